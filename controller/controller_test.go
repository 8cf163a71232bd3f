package controller_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/internal/promtest"
	"github.com/ilbproject/ilb/weights"
)

func TestSmootherHalfLife(t *testing.T) {
	s := controller.NewSmoother(10 * time.Second)
	k := weights.DemandKey{Source: "s", Model: "m", Priority: weights.Standard}
	t0 := time.Unix(0, 0)
	s.Observe(weights.Demand{k: {CostPerSecond: 100}}, t0)
	// One half-life later, a new level of 0 has half the weight.
	got := s.Observe(weights.Demand{}, t0.Add(10*time.Second))[k].CostPerSecond
	if math.Abs(got-50) > 1e-9 {
		t.Errorf("after one half-life: %v; want 50", got)
	}
	got = s.Observe(weights.Demand{k: {CostPerSecond: 50}}, t0.Add(30*time.Second))[k].CostPerSecond
	if math.Abs(got-50) > 1e-9 {
		t.Errorf("steady at 50: %v", got)
	}
	// A stream seen for the first time is taken as is, not ramped up from
	// zero; it then averages like the others.
	k2 := weights.DemandKey{Source: "s2", Model: "m", Priority: weights.Standard}
	got = s.Observe(weights.Demand{k: {CostPerSecond: 50}, k2: {CostPerSecond: 80}}, t0.Add(40*time.Second))[k2].CostPerSecond
	if math.Abs(got-80) > 1e-9 {
		t.Errorf("new stream: %v; want 80 at once", got)
	}
	got = s.Observe(weights.Demand{k: {CostPerSecond: 50}}, t0.Add(50*time.Second))[k2].CostPerSecond
	if math.Abs(got-40) > 1e-9 {
		t.Errorf("new stream after one silent half-life: %v; want 40", got)
	}
}

// fakePolicy fails on demand, for the fail-static paths.
type fakePolicy struct {
	err   error
	inner weights.Policy
}

var _ weights.Policy = (*fakePolicy)(nil)

func (f *fakePolicy) Name() string { return "fake" }
func (f *fakePolicy) Compute(in weights.Input) (*weights.Weights, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.inner.Compute(in)
}

func TestFailStatic(t *testing.T) {
	type inputs struct {
		stateAge, demandAge time.Duration
		capacityScale       float64
		demand              float64
		policyErr           error
		sinkErr             error
		other               weights.Policy // a policy with other routing
	}
	tests := []struct {
		name   string
		bad    inputs
		reason string
		msg    string
		// healsAfter: ticks of the same input after which it is believed.
		healsAfter int
	}{
		{"stale state", inputs{stateAge: time.Minute, demand: 100, capacityScale: 1}, "stale_state", "cluster state observed 1m0s ago (stale after 30s)", 0},
		{"stale demand", inputs{demandAge: 31 * time.Second, demand: 100, capacityScale: 1}, "stale_demand", "demand measured 31s ago", 0},
		{"demand jump, believed when it persists", inputs{demand: 5000, capacityScale: 1}, "demand_jump", "total demand went from 100 to 5000 token-cost/s in one tick (more than ×10)", 3},
		{"capacity drop, believed when it persists", inputs{demand: 100, capacityScale: 0.3}, "capacity_drop", "total capacity fell from 800 to 240 token-cost/s in one tick (more than 50%)", 3},
		{"NaN demand", inputs{demand: math.NaN(), capacityScale: 1}, "bad_input", "demand of (edge-us, m1, standard) is", 0},
		{"solver error", inputs{demand: 100, capacityScale: 1, policyErr: errors.New("solver exploded")}, "solver_error", "solver exploded", 0},
		{"sink rejects", inputs{demand: 100, capacityScale: 1, sinkErr: errors.New("inconsistent snapshot"), other: weights.RoundRobin{}}, "rejected", "inconsistent snapshot", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := load(t)
			now := time.Unix(1000, 0)
			cur := inputs{demand: 100, capacityScale: 1}
			policy := &fakePolicy{inner: weights.Optimizer{}}
			sink := &recordingSink{}
			reg := prometheus.NewRegistry()
			base := weights.StaticState(c)
			ctl, err := controller.New(controller.Options{
				Config: c, Policy: policy, Sinks: []controller.Sink{sink}, Registry: reg,
				Now: func() time.Time { return now },
				State: func() (map[string]weights.ClusterState, time.Time) {
					st := map[string]weights.ClusterState{}
					for k, v := range base {
						v.Capacity *= cur.capacityScale
						st[k] = v
					}
					return st, now.Add(-cur.stateAge)
				},
				Demand: func() (weights.Demand, time.Time) {
					return weights.Demand{{Source: "edge-us", Model: "m1", Priority: weights.Standard}: {RequestsPerSecond: 1, CostPerSecond: cur.demand}}, now.Add(-cur.demandAge)
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := ctl.Tick(ctx); err != nil {
				t.Fatal(err)
			}
			good := ctl.Current().Version()

			cur = tt.bad
			policy.err = tt.bad.policyErr
			sink.err = tt.bad.sinkErr
			if tt.bad.other != nil {
				policy.inner = tt.bad.other
			}
			now = now.Add(5 * time.Second)
			err = ctl.Tick(ctx)
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Tick error = %v; want %q", err, tt.msg)
			}
			if ctl.Current().Version() != good || !strings.Contains(ctl.Current().Status(), "fail-static ("+tt.reason+")") {
				t.Errorf("current %s status %q; want %s kept with the reason", ctl.Current().Version(), ctl.Current().Status(), good)
			}
			if got := gauge(t, reg, "ilb_controller_fail_static", tt.reason); got != 1 {
				t.Errorf("ilb_controller_fail_static{reason=%q} = %v; want 1", tt.reason, got)
			}
			if tt.healsAfter > 0 {
				for range tt.healsAfter - 1 {
					now = now.Add(5 * time.Second)
					err = ctl.Tick(ctx)
				}
				if err != nil || ctl.Current().Status() != "" || gauge(t, reg, "ilb_controller_fail_static", tt.reason) != 0 {
					t.Errorf("after %d ticks of the same input: err %v status %q; want it believed", tt.healsAfter, err, ctl.Current().Status())
				}
			}
		})
	}
}

func TestFallbackWithoutLastGood(t *testing.T) {
	c := load(t)
	ctl, err := controller.New(controller.Options{Config: c, Policy: &fakePolicy{err: errors.New("no solution")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	w := ctl.Current()
	if w.Policy() != "proportional" || !strings.Contains(w.Status(), "fake failed (no solution): proportional fallback") {
		t.Errorf("policy %s status %q; want the proportional fallback", w.Policy(), w.Status())
	}
}

// gauge is the value of name's series with this reason (0 when absent).
func gauge(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	v, _ := promtest.Value(t, reg, name, map[string]string{"reason": reason})
	return v
}

// TestTriggerTicksNow: a trigger makes Run tick before its (hour-long)
// period, and triggers are rate-limited into one tick per gap.
func TestTriggerTicksNow(t *testing.T) {
	c := load(t)
	c.Controller.Tick = config.Duration(time.Hour)
	reg := prometheus.NewRegistry()
	var calls atomic.Int32
	ctl, err := controller.New(controller.Options{
		Config: c, Policy: weights.Proportional{}, Registry: reg, MinResolveGap: 20 * time.Millisecond,
		State: func() (map[string]weights.ClusterState, time.Time) {
			calls.Add(1)
			return weights.StaticState(c), time.Now()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctl.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for calls.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for range 5 { // five triggers at once: at most two more ticks
		ctl.Trigger()
	}
	for calls.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n < 2 || n > 3 {
		t.Errorf("%d ticks; want the first, then one or two for five triggers", n)
	}
}
