package controller_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/internal/promtest"
	"github.com/ilbproject/ilb/weights"
)

// TestMetricsSinkGolden publishes two weights versions through the
// metrics sink and compares the exposition after each with golden files:
// the second version drops a target and a cell, whose series must go.
func TestMetricsSinkGolden(t *testing.T) {
	reg := prometheus.NewRegistry()
	sink, err := controller.NewMetricsSink(reg)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	v1, err := weights.New("optimizer", at, []weights.Cell{
		{
			Source: "edge-us", Model: "llama", Targets: []weights.Target{{Cluster: "us-east", Weight: 7500}, {Cluster: "eu-west", Weight: 2500}},
			Demand: 1000, Served: 900, Shed: weights.ShedFractions{weights.Sheddable: 0.25},
		},
		{Source: "edge-eu", Model: "llama", Targets: []weights.Target{{Cluster: "eu-west", Weight: 10000}}, Demand: 400, Served: 400},
	})
	if err != nil {
		t.Fatal(err)
	}
	v2, err := weights.New("optimizer", at.Add(5*time.Second), []weights.Cell{
		{Source: "edge-us", Model: "llama", Targets: []weights.Target{{Cluster: "us-east", Weight: 10000}}, Demand: 800, Served: 800},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		w      *weights.Weights
		golden string
	}{
		{"first version", v1, "testdata/metrics-v1.golden"},
		{"a target and a cell dropped", v2, "testdata/metrics-v2.golden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			commit, err := sink.Prepare(t.Context(), tc.w)
			if err != nil {
				t.Fatal(err)
			}
			commit()
			promtest.Golden(t, promtest.Exposition(t, reg), tc.golden, *update)
		})
	}
}

// TestMetricsRefreshedEveryTick: while the routing stays the same version
// (every tick unchanged), the planned demand and load gauges follow each
// tick's demand, not the first tick's.
func TestMetricsRefreshedEveryTick(t *testing.T) {
	c := load(t)
	reg := prometheus.NewRegistry()
	sink, err := controller.NewMetricsSink(reg)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	demand := 100.0
	ctl, err := controller.New(controller.Options{
		Config: c, Policy: weights.Proportional{}, Sinks: []controller.Sink{sink}, Registry: reg,
		Now: func() time.Time { return now },
		Demand: func() (weights.Demand, time.Time) {
			return weights.Demand{{Source: "edge-us", Model: "m1", Priority: weights.Standard}: {RequestsPerSecond: 1, CostPerSecond: demand}}, now
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	gauge := func() float64 {
		t.Helper()
		v, ok := promtest.Value(t, reg, "ilb_weights_demand", map[string]string{"source": "edge-us", "model": "m1"})
		if !ok {
			t.Fatal("no ilb_weights_demand for (edge-us, m1)")
		}
		return v
	}
	var first string
	for i, tc := range []struct {
		name   string
		demand float64
	}{
		{"first tick", 100},
		{"demand rises tenfold, same routing", 1000},
	} {
		demand = tc.demand
		now = now.Add(5 * time.Minute) // ten half-lives: the average is the new demand
		if err := ctl.Tick(t.Context()); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = ctl.Current().Version()
		} else if v := ctl.Current().Version(); v != first {
			t.Fatalf("version %s after %s: the routing changed, so this does not test an unchanged tick", v, first)
		}
		if got := gauge(); got < tc.demand*0.9 || got > tc.demand*1.1 {
			t.Errorf("%s: ilb_weights_demand %v, want about %v", tc.name, got, tc.demand)
		}
	}
}
