package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestServeRefusesBadTracingEnv: a bad OTEL_* value stops `ilb serve`
// before it binds anything, with the variable, the value and what is
// accepted.
func TestServeRefusesBadTracingEnv(t *testing.T) {
	tests := []struct {
		name, key, value, want string
	}{
		{"unknown exporter", "OTEL_TRACES_EXPORTER", "jaeger", `OTEL_TRACES_EXPORTER is "jaeger": want otlp (alone or in a list) or none`},
		{"unknown protocol", "OTEL_EXPORTER_OTLP_PROTOCOL", "thrift", `OTEL_EXPORTER_OTLP_PROTOCOL is "thrift": want grpc or http/protobuf`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("OTEL_SDK_DISABLED", "")
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			t.Setenv(tt.key, tt.value)
			var out, errw bytes.Buffer
			err := runServe(context.Background(), []string{"--config", "../../examples/demo/ilb.yaml"}, &out, &errw)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v; want one containing %q", err, tt.want)
			}
		})
	}
}
