package demand_test

import (
	"bytes"
	"flag"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/internal/promtest"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// TestCollectorGolden meters demand, reports it (with a refused entry
// from a second reporter, which then falls silent and expires), and
// compares the collector's exposition with testdata/metrics.golden
// (-update rewrites).
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
	reg.MustRegister(demand.NewCollector(agg, func() time.Time { return t0.Add(16 * time.Second) }))

	before := promtest.Exposition(t, reg)
	if bytes.Contains(before, []byte("ilb_demand_oldest_report_age_seconds ")) {
		t.Errorf("a report age before any report:\n%s", before)
	}
	counts, d := m.Flush(t0.Add(2 * time.Second))
	if err := agg.Report(demand.Encode(demand.ReporterNode("x"), counts, d)); err != nil {
		t.Fatal(err)
	}
	bad := map[demand.Key]demand.Counts{llamaUS: {Requests: 1, TokenCost: math.NaN()}}
	if err := agg.Report(demand.Encode(demand.ReporterNode("y"), bad, time.Second)); err != nil {
		t.Fatal(err)
	}
	agg.Rates(t0.Add(10 * time.Second))
	report(t, agg, "x", nil)            // x's heartbeat; y stays silent
	agg.Rates(t0.Add(14 * time.Second)) // y silent for 4 s: expired
	promtest.Golden(t, promtest.Exposition(t, reg), "testdata/metrics.golden", *update)
}

// TestReportAgeWhenEveryReporterIsGone: once every reporter is gone, the
// report age is the time since the last report of any — what the
// controller judges the demand's freshness by.
func TestReportAgeWhenEveryReporterIsGone(t *testing.T) {
	agg := demand.NewAggregator(demoConfig(t), nil, t0)
	reg := prometheus.NewRegistry()
	reg.MustRegister(demand.NewCollector(agg, func() time.Time { return t0.Add(100 * time.Second) }))
	report(t, agg, "x", nil)
	agg.Rates(t0.Add(time.Second))
	agg.Rates(t0.Add(10 * time.Second)) // x expired
	got := promtest.Exposition(t, reg)
	for _, want := range []string{"ilb_demand_oldest_report_age_seconds 99\n", "ilb_demand_reporters 0\n", "ilb_demand_reporters_expired_total 1\n"} {
		if !bytes.Contains(got, []byte(want)) {
			t.Errorf("exposition lacks %q:\n%s", want, got)
		}
	}
}
