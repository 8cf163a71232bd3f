package controller_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/internal/promtest"
	"github.com/ilbproject/ilb/weights"
)

type recordingSink struct {
	got []string
	err error
}

func (s *recordingSink) Prepare(_ context.Context, w *weights.Weights) (func(), error) {
	if s.err != nil {
		return nil, s.err
	}
	return func() { s.got = append(s.got, w.Version()) }, nil
}

var _ controller.Sink = (*recordingSink)(nil)

func TestControllerPublishes(t *testing.T) {
	c := load(t)
	state := weights.StaticState(c)
	first, second := &recordingSink{}, &recordingSink{}
	reg := prometheus.NewRegistry()
	ctl, err := controller.New(controller.Options{
		Config: c, Policy: weights.Proportional{}, Sinks: []controller.Sink{first, second},
		State: func() (map[string]weights.ClusterState, time.Time) { return state, time.Now() }, Registry: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ctl.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	v1 := ctl.Current().Version()
	if err := ctl.Tick(ctx); err != nil { // same input: no new version
		t.Fatal(err)
	}
	if len(first.got) != 1 || len(second.got) != 1 {
		t.Fatalf("sinks got %v and %v; want one version each", first.got, second.got)
	}

	// A sink that rejects the next version keeps the last good one current
	// in every sink, including those that would have accepted it.
	state = map[string]weights.ClusterState{"us-a": state["us-a"]}
	second.err = errors.New("snapshot inconsistent")
	if err := ctl.Tick(ctx); err == nil || !strings.Contains(err.Error(), "snapshot inconsistent") {
		t.Fatalf("Tick error = %v; want the sink's error", err)
	}
	if ctl.Current().Version() != v1 || len(first.got) != 1 || len(second.got) != 1 {
		t.Errorf("after a rejected version: current %s (want %s), sinks got %v and %v", ctl.Current().Version(), v1, first.got, second.got)
	}
	second.err = nil
	if err := ctl.Tick(ctx); err != nil || ctl.Current().Version() == v1 {
		t.Errorf("after recovery: err %v, version %s", err, ctl.Current().Version())
	}
	for result, want := range map[string]float64{"published": 2, "unchanged": 1, "failed": 1} {
		if got, _ := promtest.Value(t, reg, "ilb_controller_ticks_total", map[string]string{"result": result}); got != want {
			t.Errorf("ticks{result=%q} = %v; want %v", result, got, want)
		}
	}
}

// TestControllerAdopts: a version adopted from elsewhere (an HA leader's
// predecessor) is the one the controller holds and plans from: a tick
// whose result is that same version publishes nothing; one that differs
// is published.
func TestControllerAdopts(t *testing.T) {
	c := load(t)
	state := weights.StaticState(c)
	in := weights.Input{Config: c, Clusters: state}
	same, err := weights.Proportional{}.Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	other, err := weights.RoundRobin{}.Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		adopt       *weights.Weights
		wantPublish bool
	}{
		{"the tick computes the adopted version: nothing published", same, false},
		{"the tick computes another: published", other, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sink := &recordingSink{}
			ctl, err := controller.New(controller.Options{
				Config: c, Policy: weights.Proportional{}, Sinks: []controller.Sink{sink},
				State: func() (map[string]weights.ClusterState, time.Time) { return state, time.Now() },
			})
			if err != nil {
				t.Fatal(err)
			}
			ctl.Adopt(tc.adopt)
			if ctl.Current() != tc.adopt {
				t.Fatalf("Current %v after Adopt; want the adopted version", ctl.Current())
			}
			if err := ctl.Tick(context.Background()); err != nil {
				t.Fatal(err)
			}
			if published := len(sink.got) > 0; published != tc.wantPublish {
				t.Errorf("published %v; want %v", sink.got, tc.wantPublish)
			}
		})
	}
}
