package demand_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ilbproject/ilb/demand"
)

// TestAddCostRoundTrip: cost confirmed by AddCost (the remainder of a
// request that Add booked earlier) travels as more token cost of its
// stream in the interval it was confirmed in, without a request — in
// memory and over a real LRS stream — and is believed although the
// report has no request to explain it (cost is bounded by rate).
func TestAddCostRoundTrip(t *testing.T) {
	c := demoConfig(t)
	tests := []struct {
		name   string
		remote bool
	}{{"in memory", false}, {"over LRS", true}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock(t0) // of the aggregator and the LRS server
			agg := demand.NewAggregatorWith(demand.AggregatorOptions{Config: c, Start: t0, Now: clk.now})
			node := demand.ReporterNode("extproc-1")
			var sink demand.Sink = agg
			if tt.remote {
				client := demand.NewClient(startLRSWith(t, demand.ServerOptions{Sink: agg, Interval: time.Second, Now: clk.now}), node)
				t.Cleanup(client.Close)
				sink = client
			}
			m := demand.NewMeter(t0)
			send := func(wantReports uint64) {
				t.Helper()
				clk.add(time.Second)
				counts, d := m.Flush(clk.now())
				if err := sink.Report(demand.Encode(node, counts, d)); err != nil {
					t.Fatal(err)
				}
				waitFor(t, func() bool { return agg.Status().Reports == wantReports })
			}
			m.Add(llamaUS, 750, false) // booked at decision: an ordinary request's cost
			send(1)
			first, _ := agg.Rates(clk.now())
			m.AddCost(llamaUS, 20000) // confirmed when the engine accepted it, a second later
			m.AddCost(llamaUS, 5000)
			send(2)
			second, _ := agg.Rates(clk.now())
			if r := first[llamaUS]; r.RequestsPerSecond != 1 || r.CostPerSecond != 750 {
				t.Errorf("first interval %+v; want 1 request/s, 750 units/s", r)
			}
			if r := second[llamaUS]; r.RequestsPerSecond != 0 || r.CostPerSecond != 25000 {
				t.Errorf("second interval %+v; want no request, 25000 units/s", r)
			}
			st := agg.Status()
			if st.Dropped != 0 || len(st.Totals) != 1 || st.Totals[0].Requests != 1 || st.Totals[0].TokenCost != 25750 {
				t.Errorf("status %+v; want 1 request of 25750 units in all, nothing refused", st)
			}
		})
	}
}

// TestMeterEncoding: what a meter counted is what Encode carries, an
// AddCost-only stream included.
func TestMeterEncoding(t *testing.T) {
	m := demand.NewMeter(t0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				m.Add(llamaUS, 10, false)
				m.AddCost(llamaUS, 5)
				m.AddCost(qwenEU, 1)
			}
		})
	}
	wg.Wait()
	counts, d := m.Flush(t0.Add(time.Second))
	if d != time.Second {
		t.Errorf("interval %v", d)
	}
	req := demand.Encode(demand.ReporterNode("x"), counts, d)
	locs := req.GetClusterStats()[0].GetUpstreamLocalityStats()
	if len(locs) != 2 {
		t.Fatalf("localities %v", locs)
	}
	for _, tt := range []struct {
		i        int
		requests uint64
		cost     float64
	}{{0, 0, 800}, {1, 800, 12000}} { // edge-eu sorts first
		l := locs[tt.i]
		if l.GetTotalIssuedRequests() != tt.requests || l.GetLoadMetricStats()[0].GetTotalMetricValue() != tt.cost {
			t.Errorf("locality %d: %v; want %d requests, %v units", tt.i, l, tt.requests, tt.cost)
		}
	}
	if again, _ := m.Flush(t0.Add(2 * time.Second)); len(again) != 0 {
		t.Errorf("a flush starts a new interval: %v", again)
	}
}
