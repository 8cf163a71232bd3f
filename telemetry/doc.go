// Package telemetry builds ILB's OpenTelemetry tracer provider from the
// standard OTEL_* environment variables, read through an injected Getenv
// (never os.Getenv directly) so that tests are deterministic.
//
// Unconfigured, tracing costs nothing: the provider is the no-op one and
// no exporter, processor or goroutine is created. Tracing turns on when
// OTEL_TRACES_EXPORTER=otlp, or when it is unset and an OTLP endpoint
// variable is set. Spans then go through a batch span processor to an
// OTLP exporter (gRPC or HTTP/protobuf). The W3C trace-context propagator
// ([Propagator]) carries the context in and out of ILB.
//
// Variables read through Getenv:
//
//	OTEL_SDK_DISABLED                     true | false (default false): true is the no-op provider
//	OTEL_TRACES_EXPORTER                  otlp | none (default: otlp when an endpoint below is set, else none)
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT    URL used as is (takes precedence)
//	OTEL_EXPORTER_OTLP_ENDPOINT           base URL; HTTP appends /v1/traces
//	OTEL_EXPORTER_OTLP_TRACES_PROTOCOL    grpc | http/protobuf (takes precedence)
//	OTEL_EXPORTER_OTLP_PROTOCOL           grpc | http/protobuf (default http/protobuf)
//	OTEL_EXPORTER_OTLP_TRACES_INSECURE    true | false (gRPC endpoints without a scheme)
//	OTEL_EXPORTER_OTLP_INSECURE           true | false
//	OTEL_SERVICE_NAME                     service.name (default "ilb"; wins over the attributes)
//	OTEL_RESOURCE_ATTRIBUTES              key=value,... (values percent-decoded)
//
// The exporters read their other variables themselves from the process
// environment (headers, timeout, compression, certificates), as do the
// SDK's sampler (OTEL_TRACES_SAMPLER) and batch processor (OTEL_BSP_*).
// A bad value is an error naming the variable, the value and what is
// accepted.
package telemetry
