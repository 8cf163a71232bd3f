package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracingOptions configure NewTracerProvider.
type TracingOptions struct {
	// Getenv reads the OTEL_* variables; nil: os.Getenv.
	Getenv func(string) string
	// ServiceVersion is service.version when not "" (e.g. the build's).
	ServiceVersion string
}

// Propagator is the W3C trace-context propagator (traceparent,
// tracestate) ILB extracts incoming contexts with and forwards upstream.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Enabled reports whether the environment turns tracing on, or the error
// NewTracerProvider would return.
func Enabled(getenv func(string) string) (bool, error) {
	c, err := parseEnv(getenv)
	if err != nil {
		return false, err
	}
	return c.enabled, nil
}

// NewTracerProvider builds the tracer provider the environment asks for
// (see the package documentation), and the function that flushes the
// spans still buffered and stops the exporter; call it once on exit with
// a deadline. When tracing is off it returns the no-op provider and a
// shutdown that does nothing: no exporter is created. Creating an
// exporter does not connect: a collector that is down loses spans, never
// blocks ILB.
func NewTracerProvider(ctx context.Context, o TracingOptions) (trace.TracerProvider, func(context.Context) error, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	noShutdown := func(context.Context) error { return nil }
	c, err := parseEnv(getenv)
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: %w", err)
	}
	if !c.enabled {
		return noop.NewTracerProvider(), noShutdown, nil
	}
	attrs := c.attrs
	if o.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", o.ServiceVersion))
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...))
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	exp, err := newExporter(ctx, c)
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: OTLP %s exporter to %s: %w", c.protocol, c.endpoint, err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	shutdown := func(ctx context.Context) error {
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("telemetry: shutdown: %w", err)
		}
		return nil
	}
	return tp, shutdown, nil
}

// newExporter creates the OTLP exporter; explicit options override what
// the exporter reads from the process environment for the same settings.
func newExporter(ctx context.Context, c config) (sdktrace.SpanExporter, error) {
	hasScheme := c.endpointVar == "" || isURL(c.endpoint)
	switch c.protocol {
	case ProtocolGRPC:
		var opts []otlptracegrpc.Option
		if hasScheme {
			opts = append(opts, otlptracegrpc.WithEndpointURL(c.endpoint))
		} else {
			opts = append(opts, otlptracegrpc.WithEndpoint(c.endpoint))
			if c.insecure {
				opts = append(opts, otlptracegrpc.WithInsecure())
			}
		}
		return otlptracegrpc.New(ctx, opts...)
	case ProtocolHTTP:
		return otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(c.endpoint))
	}
	return nil, errors.New("unknown protocol " + c.protocol)
}

// isURL reports whether s is a URL with scheme http or https and a host.
func isURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}
