package telemetry_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ilbproject/ilb/telemetry"
	"github.com/ilbproject/ilb/telemetry/otlptest"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// export builds a provider from vars, ends one span and shuts down (which
// flushes the batch).
func export(t *testing.T, vars map[string]string) {
	t.Helper()
	ctx := context.Background()
	tp, shutdown, err := telemetry.NewTracerProvider(ctx, telemetry.TracingOptions{Getenv: env(vars), ServiceVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tp.(noop.TracerProvider); ok {
		t.Fatal("got the no-op provider; want an exporting one")
	}
	_, span := tp.Tracer("test").Start(ctx, "probe")
	span.End()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := shutdown(sctx); err != nil {
		t.Fatal(err)
	}
}

func TestExport(t *testing.T) {
	tests := []struct {
		name    string
		start   func(testing.TB) (*otlptest.Receiver, string)
		vars    func(endpoint string) map[string]string
		service string
	}{
		{"grpc via the generic endpoint", otlptest.StartGRPC, func(ep string) map[string]string {
			return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
		}, "ilb"},
		{"grpc host:port with OTEL_EXPORTER_OTLP_INSECURE", otlptest.StartGRPC, func(ep string) map[string]string {
			return map[string]string{
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": strings.TrimPrefix(ep, "http://"), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
				"OTEL_EXPORTER_OTLP_INSECURE": "true", "OTEL_SERVICE_NAME": "ilb-eu",
			}
		}, "ilb-eu"},
		{"http/protobuf by default, /v1/traces appended", otlptest.StartHTTP, func(ep string) map[string]string {
			return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": ep, "OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs,deployment.environment=test%20env"}
		}, "from-attrs"},
		{"http/protobuf traces endpoint used as is", otlptest.StartHTTP, func(ep string) map[string]string {
			return map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ep + "/v1/traces", "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
		}, "ilb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ep := tt.start(t)
			export(t, tt.vars(ep))
			s, ok := r.WaitFor("probe", 5*time.Second)
			if !ok {
				t.Fatalf("no span received; got %v", r.Spans())
			}
			if s.Resource["service.name"] != tt.service || s.Resource["service.version"] != "test" {
				t.Errorf("resource = %v; want service.name %q, service.version test", s.Resource, tt.service)
			}
			if tt.service == "from-attrs" && s.Resource["deployment.environment"] != "test env" {
				t.Errorf("resource = %v; want deployment.environment %q", s.Resource, "test env")
			}
		})
	}
}

func TestEnvErrors(t *testing.T) {
	tests := []struct {
		name string
		vars map[string]string
		want string
	}{
		{"bad OTEL_SDK_DISABLED", map[string]string{"OTEL_SDK_DISABLED": "yes"}, `OTEL_SDK_DISABLED is "yes": want true or false`},
		{"unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, `OTEL_TRACES_EXPORTER is "zipkin": want otlp (alone or in a list) or none`},
		{"unknown protocol", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, `OTEL_EXPORTER_OTLP_PROTOCOL is "http/json": want grpc or http/protobuf`},
		{"unknown traces protocol", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"}, `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL is "udp": want grpc or http/protobuf`},
		{"endpoint without scheme for http", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, `OTEL_EXPORTER_OTLP_ENDPOINT is "collector:4318": want a URL with scheme http or https`},
		{"endpoint with a bad scheme", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://collector"}, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is "ftp://collector": want a URL`},
		{"bad insecure", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_INSECURE": "yes"}, `OTEL_EXPORTER_OTLP_INSECURE is "yes": want true or false (or 1 or 0)`},
		{"bad disabled", map[string]string{"OTEL_SDK_DISABLED": "nope"}, `OTEL_SDK_DISABLED is "nope": want true or false (or 1 or 0)`},
		{"resource pair without =", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_RESOURCE_ATTRIBUTES": "a=1,b"}, `the pair "b" is not key=value`},
		{"resource value badly encoded", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_RESOURCE_ATTRIBUTES": "a=%zz"}, `the value of a is not percent-encoded`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, _, err := telemetry.NewTracerProvider(context.Background(), telemetry.TracingOptions{Getenv: env(tt.vars)})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v (provider %T); want one containing %q", err, tp, tt.want)
			}
		})
	}
}

func TestNoOpWhenUnconfigured(t *testing.T) {
	tests := []struct {
		name string
		vars map[string]string
	}{
		{"nothing set", nil},
		{"exporter none wins over an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{"SDK disabled wins over everything", map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{"SDK disabled as 1", map[string]string{"OTEL_SDK_DISABLED": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{"only a service name", map[string]string{"OTEL_SERVICE_NAME": "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			on, err := telemetry.Enabled(env(tt.vars))
			if err != nil || on {
				t.Fatalf("Enabled = %v, %v; want false, nil", on, err)
			}
			tp, shutdown, err := telemetry.NewTracerProvider(context.Background(), telemetry.TracingOptions{Getenv: env(tt.vars)})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := tp.(noop.TracerProvider); !ok {
				t.Fatalf("provider %T; want noop.TracerProvider (no exporter)", tp)
			}
			_, span := tp.Tracer("t").Start(context.Background(), "x")
			if span.IsRecording() || span.SpanContext().IsValid() {
				t.Error("a no-op span records or has a valid context")
			}
			if err := shutdown(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestEnvAccepts: forms the spec or the Go exporters allow turn tracing on
// without an error.
func TestEnvAccepts(t *testing.T) {
	tests := []struct {
		name string
		vars map[string]string
	}{
		{"exporter list with otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp,console"}},
		{"insecure as 1", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_INSECURE": "1"}},
		{"resource attributes with a trailing comma", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_RESOURCE_ATTRIBUTES": "a=b,"}},
		{"grpc over a unix socket", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "unix:///run/otel.sock"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if on, err := telemetry.Enabled(env(tt.vars)); err != nil || !on {
				t.Errorf("Enabled = %v, %v; want true, nil", on, err)
			}
		})
	}
}
