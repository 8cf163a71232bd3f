package controller_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/weights"
)

// TestTickSpans: every tick is an "ilb.controller.tick" span with its
// outcome; a fail-static tick has the reason and an error status.
func TestTickSpans(t *testing.T) {
	c := load(t)
	state := weights.StaticState(c)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	sink := &recordingSink{}
	ctl, err := controller.New(controller.Options{
		Config: c, Policy: weights.Proportional{}, Sinks: []controller.Sink{sink}, TracerProvider: tp,
		State: func() (map[string]weights.ClusterState, time.Time) { return state, time.Now() },
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		prepare func()
		outcome string
		reason  string
	}{
		{"first weights are published", func() {}, "published", ""},
		{"same input is unchanged", func() {}, "unchanged", ""},
		{"a sink rejecting the version is fail-static", func() {
			state = map[string]weights.ClusterState{"us-a": state["us-a"]}
			sink.err = errors.New("snapshot inconsistent")
		}, "fail-static", "rejected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exp.Reset()
			tt.prepare()
			_ = ctl.Tick(context.Background())
			spans := exp.GetSpans()
			if len(spans) != 1 || spans[0].Name != "ilb.controller.tick" {
				t.Fatalf("spans %v; want one ilb.controller.tick", spans)
			}
			attrs := map[attribute.Key]attribute.Value{}
			for _, kv := range spans[0].Attributes {
				attrs[kv.Key] = kv.Value
			}
			if got := attrs["ilb.outcome"].AsString(); got != tt.outcome {
				t.Errorf("ilb.outcome = %q; want %q", got, tt.outcome)
			}
			if got := attrs["ilb.weights_version"].AsString(); got != ctl.Current().Version() {
				t.Errorf("ilb.weights_version = %q; want %q", got, ctl.Current().Version())
			}
			if _, ok := attrs["ilb.solve_seconds"]; !ok {
				t.Error("no ilb.solve_seconds")
			}
			if got := attrs["ilb.policy"].AsString(); got != "proportional" {
				t.Errorf("ilb.policy = %q", got)
			}
			failed := spans[0].Status.Code == codes.Error
			if failed != (tt.reason != "") || attrs["ilb.fail_static_reason"].AsString() != tt.reason {
				t.Errorf("status %v, reason %q; want reason %q", spans[0].Status, attrs["ilb.fail_static_reason"].AsString(), tt.reason)
			}
		})
	}
}
