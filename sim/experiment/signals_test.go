package experiment

import (
	"context"
	"testing"
	"time"
)

// TestSignalsInterval: the simulated signals scrape at the fleet
// configuration's signals.interval, its default or the one set, with the
// timeouts capped at it.
func TestSignalsInterval(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  time.Duration
		want time.Duration
	}{
		{"default", 0, time.Second},
		{"250 ms", 250 * time.Millisecond, 250 * time.Millisecond},
		{"50 ms: timeouts capped", 50 * time.Millisecond, 50 * time.Millisecond},
		{"5 s", 5 * time.Second, 5 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := world().Config(ControllerSettings{Policy: "proportional", SignalsInterval: tt.set, CapacityPerReplica: map[string]float64{
				"llama-3-8b/h100": 1000, "llama-3-8b/a100-80gb": 500,
			}})
			if err != nil {
				t.Fatal(err)
			}
			r := &runner{cfg: cfg}
			if got := r.signalsEvery(); got != tt.want {
				t.Errorf("signals every %v; want %v", got, tt.want)
			}
			if s := cfg.Signals; s.Timeout.Std() > tt.want || s.RetryDelay.Std() > tt.want {
				t.Errorf("timeout %v, retry delay %v; want at most the interval %v", s.Timeout, s.RetryDelay, tt.want)
			}
		})
	}
}

// TestSignalsIntervalReachesTheRun: a scenario's SignalsInterval sets
// when the run's signals rounds happen: over a run of 10.25 s the last
// round is the first at or past its end, 10.25 s at 250 ms, 11 s at the
// default 1 s.
func TestSignalsIntervalReachesTheRun(t *testing.T) {
	for _, tt := range []struct {
		name     string
		interval time.Duration
		last     time.Duration
	}{
		{"default", 0, 11 * time.Second},
		{"250 ms", 250 * time.Millisecond, 10250 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := LookupScenario("diurnal", 10250*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			s.SignalsInterval = tt.interval
			p, _ := LookupPolicy("ilb")
			reqs, err := s.Workload(1)
			if err != nil {
				t.Fatal(err)
			}
			r, err := newRunner(Options{Scenario: s, Policy: p, Seed: 1, Requests: reqs, Capacity: map[string]float64{
				"llama-3-8b/h100": 3000, "llama-3-8b/a100-80gb": 1500,
			}, Window: s.Duration / 60})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.run(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := r.snap.At.Sub(epoch); got != tt.last {
				t.Errorf("last signals round at %v; want %v", got, tt.last)
			}
		})
	}
}
