package weights_test

import (
	"flag"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/internal/promtest"
	"github.com/ilbproject/ilb/weights"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// TestMetricsSinkGolden publishes two weights versions through the
// metrics sink and compares the exposition after each with golden files:
// the second version drops a target and a cell, whose series must go.
func TestMetricsSinkGolden(t *testing.T) {
	reg := prometheus.NewRegistry()
	sink, err := weights.NewMetricsSink(reg)
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
