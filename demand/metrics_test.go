package demand_test

import (
	"bytes"
	"flag"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/internal/promtest"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// TestCollectorGolden meters demand, reports it, and compares the
// collector's exposition with testdata/metrics.golden (-update rewrites).
func TestCollectorGolden(t *testing.T) {
	c := demoConfig(t)
	m := demand.NewMeter(t0)
	for range 30 {
		m.Add(llamaUS, 100, false)
	}
	for range 10 {
		m.Add(qwenEU, 50, true)
	}
	agg := demand.NewAggregator(c, nil, t0)
	reg := prometheus.NewRegistry()
	reg.MustRegister(demand.NewCollector(agg, func() time.Time { return t0.Add(12 * time.Second) }))

	before := promtest.Exposition(t, reg)
	if bytes.Contains(before, []byte("ilb_demand_oldest_report_age_seconds ")) {
		t.Errorf("a report age before any report:\n%s", before)
	}
	counts, d := m.Flush(t0.Add(2 * time.Second))
	if err := agg.Report(demand.Encode(demand.ReporterNode("x"), counts, d)); err != nil {
		t.Fatal(err)
	}
	agg.Rates(t0.Add(10 * time.Second))
	promtest.Golden(t, promtest.Exposition(t, reg), "testdata/metrics.golden", *update)
}
