package signals

import (
	"flag"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/internal/promtest"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// TestMetricsGolden renders the signals metrics of a fixed snapshot and
// compares the exposition with testdata/metrics.golden (go test
// ./signals -update rewrites it): names, help, labels and values are a
// documented contract (docs/metrics.md).
func TestMetricsGolden(t *testing.T) {
	reg := prometheus.NewRegistry()
	p, err := newPromMetrics(reg, []string{"c1", "c2"})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := &Snapshot{At: at, Clusters: map[string]Cluster{
		"c1": {
			Name: "c1", Ready: 2, Warming: 1, Ramps: []float64{0.5}, Draining: 1, Unhealthy: 1,
			Waiting: 3, Running: 40, LoadKnown: 3, KVUsage: 0.42, KVKnown: true, Saturated: false,
			OldestScrape: at.Add(-1500 * time.Millisecond),
		},
		"c2": {
			Name: "c2", Starting: 1, Saturated: true, // load unknown: no waiting/running series
			DiscoveryError: "dns vllm.svc.local: i/o timeout", DiscoveryErrorSince: at.Add(-90 * time.Second),
		},
	}, Blind: &Blind{Reason: "the signals loop woke 2s late (interval 1s)", Since: at.Add(-time.Second)}}
	// Scraped 30 s after the snapshot: c2's discovery has failed for 2 minutes.
	reg.MustRegister(newDiscoveryStale([]string{"c1", "c2"}, func() *Snapshot { return s }, func() time.Time { return at.Add(30 * time.Second) }))
	p.observe(s, map[string]float64{"c1": 2500, "c2": 1000})
	p.scrapes.WithLabelValues("c1", resultOK).Add(7)
	p.scrapes.WithLabelValues("c2", resultProbeFailed).Inc()

	promtest.Golden(t, promtest.Exposition(t, reg), "testdata/metrics.golden", *update)
}
