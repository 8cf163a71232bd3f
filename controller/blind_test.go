package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/weights"
)

// TestBlindFailsStatic: while Options.Blind gives a reason,
// every tick fails static with reason blind and the last good weights
// stay, however long it lasts and whatever the state says (unlike
// capacity_drop, never believed); when it clears, ticks use their inputs
// again.
func TestBlindFailsStatic(t *testing.T) {
	tests := []struct {
		name string
		// capacity is the share of its capacity every cluster reports
		// while blind.
		capacity float64
	}{
		{"state unchanged", 1},
		{"state says most capacity is gone", 0.1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := load(t)
			now := time.Unix(1000, 0)
			blind, scale := "", 1.0
			sink := &recordingSink{}
			reg := prometheus.NewRegistry()
			base := weights.StaticState(c)
			ctl, err := controller.New(controller.Options{
				Config: c, Policy: weights.Optimizer{}, Sinks: []controller.Sink{sink}, Registry: reg,
				Now:   func() time.Time { return now },
				Blind: func() string { return blind },
				State: func() (map[string]weights.ClusterState, time.Time) {
					st := map[string]weights.ClusterState{}
					for k, v := range base {
						v.Capacity *= scale
						st[k] = v
					}
					return st, now
				},
				Demand: func() (weights.Demand, time.Time) {
					return weights.Demand{{Source: "edge-us", Model: "m1", Priority: weights.Standard}: {RequestsPerSecond: 1, CostPerSecond: 100}}, now
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := ctl.Tick(ctx); err != nil {
				t.Fatal(err)
			}
			good, published := ctl.Current().Version(), len(sink.got)

			blind, scale = "silent health probe failures (timeouts, no answer) at once: 2 of 2 of a, 2 of 2 of b", tt.capacity
			for i := range 5 {
				now = now.Add(5 * time.Second)
				err := ctl.Tick(ctx)
				if err == nil || !strings.Contains(err.Error(), "blind: the engine signals are blind: silent health probe failures") {
					t.Fatalf("blind tick %d: error %v", i, err)
				}
				if v, st := ctl.Current().Version(), ctl.Current().Status(); v != good || !strings.Contains(st, "fail-static (blind)") {
					t.Fatalf("blind tick %d: current %s status %q; want %s kept with the reason", i, v, st, good)
				}
				if got := blindGauge(t, reg); got != 1 {
					t.Fatalf("blind tick %d: ilb_controller_fail_static{reason=blind} = %v", i, got)
				}
			}
			if len(sink.got) != published {
				t.Errorf("versions published while blind: %v", sink.got[published:])
			}

			blind, scale = "", 1
			now = now.Add(5 * time.Second)
			if err := ctl.Tick(ctx); err != nil {
				t.Fatalf("after blindness: %v", err)
			}
			if st := ctl.Current().Status(); st != "" || blindGauge(t, reg) != 0 {
				t.Errorf("after blindness: status %q, gauge %v", st, blindGauge(t, reg))
			}
		})
	}
}

// blindGauge reads ilb_controller_fail_static{reason="blind"}.
func blindGauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if mf.GetName() == "ilb_controller_fail_static" && l.GetName() == "reason" && l.GetValue() == "blind" {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatal(`no ilb_controller_fail_static{reason="blind"}`)
	return 0
}
