package demand_test

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	loadstatsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/protobuf/proto"

	"github.com/ilbproject/ilb/demand"
)

// FuzzReport feeds any LoadStatsRequest (protobuf wire bytes) to the
// aggregator, twice, a fuzzed time apart: it never panics, what it sums
// stays finite and non-negative, its status encodes as JSON and its
// refusal reasons stay short, whatever the report says.
func FuzzReport(f *testing.F) {
	c, err := demoConfigFor(f)
	if err != nil {
		f.Fatal(err)
	}
	const llama = "llama-3.1-8b-instruct"
	seeds := []*loadstatsv3.LoadStatsRequest{
		demand.Encode(demand.ReporterNode("x"), map[demand.Key]demand.Counts{llamaUS: {Requests: 3, TokenCost: 30, Shed: 1, ShedCost: 10}}, time.Second),
		demandReport(demand.ReporterNode("x"), 365*24*time.Hour, loc("edge-us", llama, "standard", math.MaxUint64, math.MaxFloat64, 0, 0)),
		demandReport(demand.ReporterNode("x"), time.Second, loc("edge-us", llama, "urgent", 1, math.Inf(1), 2, math.NaN())),
		envoyReport(&corev3.Node{Id: "e", Cluster: "edge-us"}, "us-east-vllm", 20, 1e15),
		envoyReport(&corev3.Node{Id: "e", Cluster: "edge-eu"}, "evil", 1),
		{Node: &corev3.Node{Id: "n", Cluster: "edge-mars"}},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, int64(time.Second))
	}
	f.Fuzz(func(t *testing.T, wire []byte, gap int64) {
		var req loadstatsv3.LoadStatsRequest
		if proto.Unmarshal(wire, &req) != nil {
			return
		}
		clk := newClock(time.Unix(5000, 0))
		agg := demand.NewAggregatorWith(demand.AggregatorOptions{Config: c, Start: t0, Now: clk.now})
		for range 2 {
			_ = agg.Report(&req) // an error is a refused node: fine
			clk.add(time.Duration(gap))
		}
		rates, _ := agg.Rates(t0.Add(time.Nanosecond)) // the shortest interval: the largest rates
		for k, r := range rates {
			if !finiteNonNegative(r.RequestsPerSecond) || !finiteNonNegative(r.CostPerSecond) {
				t.Fatalf("rate of %v: %+v", k, r)
			}
		}
		st := agg.Status()
		if _, err := json.Marshal(st); err != nil {
			t.Fatalf("status does not encode: %v", err)
		}
		for _, r := range st.Refusals {
			for _, why := range r.Reasons {
				if len(why) > 2048 {
					t.Fatalf("a reason of %d bytes", len(why))
				}
			}
		}
	})
}

func finiteNonNegative(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 }
