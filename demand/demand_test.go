package demand_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	loadstatsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/weights"
)

func demoConfig(t *testing.T) *config.Config {
	t.Helper()
	c, err := demoConfigFor(t)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// demoConfigFor loads the demo world for a test, benchmark or fuzz target.
func demoConfigFor(tb testing.TB) (*config.Config, error) {
	tb.Helper()
	return config.Load("../examples/demo/ilb.yaml")
}

var (
	t0      = time.Unix(1000, 0)
	llamaUS = demand.Key{Source: "edge-us", Model: "llama-3.1-8b-instruct", Priority: weights.Standard}
	qwenEU  = demand.Key{Source: "edge-eu", Model: "qwen2.5-7b-instruct", Priority: weights.Sheddable}
)

// TestMeterToRates goes the in-memory path: meter, encode, aggregate,
// rates — the path of the all-in-one process.
func TestMeterToRates(t *testing.T) {
	c := demoConfig(t)
	m := demand.NewMeter(t0)
	for range 30 {
		m.Add(llamaUS, 100, false)
	}
	for range 10 {
		m.Add(qwenEU, 50, true)
	}
	agg := demand.NewAggregator(c, nil, t0)
	counts, d := m.Flush(t0.Add(2 * time.Second))
	if err := agg.Report(demand.Encode(demand.ReporterNode("x"), counts, d)); err != nil {
		t.Fatal(err)
	}
	rates, at := agg.Rates(t0.Add(10 * time.Second))
	if !at.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("measured at %v", at)
	}
	for _, tt := range []struct {
		k          demand.Key
		rps, costs float64
	}{{llamaUS, 3, 300}, {qwenEU, 1, 50}} {
		r := rates[tt.k]
		if math.Abs(r.RequestsPerSecond-tt.rps) > 1e-9 || math.Abs(r.CostPerSecond-tt.costs) > 1e-9 {
			t.Errorf("%v: %+v; want %v rps, %v cost/s (shed requests are demand too)", tt.k, r, tt.rps, tt.costs)
		}
	}
	if again, _ := agg.Rates(t0.Add(20 * time.Second)); len(again) != 0 {
		t.Errorf("rates are per interval: %v", again)
	}
	st := agg.Status()
	if st.Reports != 1 || len(st.Totals) != 2 || st.Totals[0].Shed != 10 || st.Totals[0].Source != "edge-eu" {
		t.Errorf("status %+v", st)
	}
}

// TestAggregatorRefusesUnknownStreams: streams of unknown sources or
// models are refused entry by entry (counted, with a reason); an alias
// is summed under its canonical model.
func TestAggregatorRefusesUnknownStreams(t *testing.T) {
	c := demoConfig(t)
	agg := demand.NewAggregator(c, nil, t0)
	counts := map[demand.Key]demand.Counts{
		{Source: "edge-mars", Model: "llama3-8b", Priority: weights.Standard}: {Requests: 5},
		{Source: "edge-us", Model: "gpt-9", Priority: weights.Standard}:       {Requests: 5},
		{Source: "edge-us", Model: "llama3-8b", Priority: weights.Critical}:   {Requests: 5, TokenCost: 10}, // alias: resolved
	}
	if err := agg.Report(demand.Encode(demand.ReporterNode("x"), counts, time.Second)); err != nil {
		t.Fatal(err)
	}
	rates, _ := agg.Rates(t0.Add(time.Second))
	if len(rates) != 1 || rates[demand.Key{Source: "edge-us", Model: "llama-3.1-8b-instruct", Priority: weights.Critical}].CostPerSecond != 10 {
		t.Errorf("rates %v; want only the known stream, under its canonical model", rates)
	}
	st := agg.Status()
	if st.Dropped != 2 || len(st.Refusals) != 1 || st.Refusals[0].Entries != 2 {
		t.Fatalf("dropped %d, refusals %+v; want 2 entries refused in one report", st.Dropped, st.Refusals)
	}
	reasons := strings.Join(st.Refusals[0].Reasons, "; ")
	for _, want := range []string{`locality "edge-mars"/"llama3-8b"/"standard": unknown source`, `locality "edge-us"/"gpt-9"/"standard": unknown model`} {
		if !strings.Contains(reasons, want) {
			t.Errorf("reasons %q; want %q", reasons, want)
		}
	}
}

// TestLRSOverGRPC runs the reporter against a real LRS server on loopback,
// and an Envoy-style report of its own engine clusters.
func TestLRSOverGRPC(t *testing.T) {
	c := demoConfig(t)
	agg := demand.NewAggregator(c, nil, t0)
	conn := startLRS(t, agg)

	m := demand.NewMeter(t0)
	m.Add(llamaUS, 40, false)
	client := demand.NewClient(conn, demand.ReporterNode("extproc-1"))
	defer client.Close()
	counts, d := m.Flush(t0.Add(time.Second))
	if err := client.Report(demand.Encode(demand.ReporterNode("extproc-1"), counts, d)); err != nil {
		t.Fatal(err)
	}
	// Envoy: the node names the source; it reports its engine clusters.
	envoy, err := loadstatsv3.NewLoadReportingServiceClient(conn).StreamLoadStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := envoy.Send(&loadstatsv3.LoadStatsRequest{Node: &corev3.Node{Id: "e1", Cluster: "edge-us"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := envoy.Recv()
	if err != nil || !resp.GetSendAllClusters() || resp.GetLoadReportingInterval().AsDuration() != time.Second {
		t.Fatalf("LRS answer %v, %v; want all clusters every 1s", resp, err)
	}
	if err := envoy.Send(&loadstatsv3.LoadStatsRequest{ClusterStats: []*endpointv3.ClusterStats{{
		ClusterName:           "us-east-vllm",
		UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{TotalIssuedRequests: 20}},
		LoadReportInterval:    durationpb.New(time.Second),
	}}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for agg.Status().Reports < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	rates, _ := agg.Rates(t0.Add(2 * time.Second))
	if r := rates[llamaUS]; r.CostPerSecond != 20 {
		t.Errorf("demand over LRS: %+v; want 20 cost/s", r)
	}
	if obs := agg.Status().Observed; len(obs) != 1 || obs[0].Source != "edge-us" || obs[0].Cluster != "us-east-vllm" || obs[0].RequestsPerSecond != 10 {
		t.Errorf("Envoy's report: %+v", obs)
	}
}
