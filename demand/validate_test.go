package demand_test

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	loadstatsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ilbproject/ilb/demand"
)

// loc is one demand locality as a reporter encodes it.
func loc(source, model, prio string, requests uint64, cost float64, shed uint64, shedCost float64) *endpointv3.UpstreamLocalityStats {
	return &endpointv3.UpstreamLocalityStats{
		Locality:            &corev3.Locality{Region: source, Zone: model, SubZone: prio},
		TotalIssuedRequests: requests,
		LoadMetricStats: []*endpointv3.EndpointLoadMetricStats{
			{MetricName: demand.MetricTokenCost, NumRequestsFinishedWithMetric: requests, TotalMetricValue: cost},
			{MetricName: demand.MetricShed, NumRequestsFinishedWithMetric: shed, TotalMetricValue: shedCost},
		},
	}
}

// demandReport is ILB's demand report from node over interval.
func demandReport(node *corev3.Node, interval time.Duration, locs ...*endpointv3.UpstreamLocalityStats) *loadstatsv3.LoadStatsRequest {
	return &loadstatsv3.LoadStatsRequest{Node: node, ClusterStats: []*endpointv3.ClusterStats{{
		ClusterName: demand.ClusterName, LoadReportInterval: durationpb.New(interval), UpstreamLocalityStats: locs,
	}}}
}

// envoyReport is Envoy's own report of cluster over 1s: issued requests
// per locality.
func envoyReport(node *corev3.Node, cluster string, issued ...uint64) *loadstatsv3.LoadStatsRequest {
	cs := &endpointv3.ClusterStats{ClusterName: cluster, LoadReportInterval: durationpb.New(time.Second)}
	for _, n := range issued {
		cs.UpstreamLocalityStats = append(cs.UpstreamLocalityStats, &endpointv3.UpstreamLocalityStats{TotalIssuedRequests: n})
	}
	return &loadstatsv3.LoadStatsRequest{Node: node, ClusterStats: []*endpointv3.ClusterStats{cs}}
}

// clock is a settable clock for the aggregator or the LRS server, safe
// for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) { c.set(c.now().Add(d)) }

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func goodEU() *endpointv3.UpstreamLocalityStats {
	return loc("edge-eu", "qwen2.5-7b-instruct", "sheddable", 1, 10, 0, 0)
}

// TestReportValidation: every entry of a demand report is checked before
// it is summed; an entry that fails is refused with a reason naming the
// locality, the value and the bound, and counted, while the good entry
// of the same report is summed. Bounds with the demo's defaults:
// extproc.max_report_rate 100000/s; llama's largest request costs
// 131072 + 4 × 32768 = 262144 units; a reporter's first report is
// believed to cover at most one report interval (1s).
func TestReportValidation(t *testing.T) {
	us := demand.ReporterNode("extproc-1")
	const llama = "llama-3.1-8b-instruct"
	tests := []struct {
		name       string
		req        *loadstatsv3.LoadStatsRequest
		wantCost   float64 // summed for llamaUS
		wantReason string  // "" : nothing refused
	}{
		{"finite", demandReport(us, time.Second, loc("edge-us", llama, "standard", 4, 40, 1, 10), goodEU()), 40, ""},
		{
			"NaN cost", demandReport(us, time.Second, loc("edge-us", llama, "standard", 4, math.NaN(), 0, 0), goodEU()), 0,
			`locality "edge-us"/"llama-3.1-8b-instruct"/"standard": token cost NaN: want a finite number >= 0`,
		},
		{
			"+Inf cost", demandReport(us, time.Second, loc("edge-us", llama, "standard", 4, math.Inf(1), 0, 0), goodEU()), 0,
			"token cost +Inf: want a finite number >= 0",
		},
		{
			"negative cost", demandReport(us, time.Second, loc("edge-us", llama, "standard", 4, -1, 0, 0), goodEU()), 0,
			"token cost -1: want a finite number >= 0",
		},
		{
			"NaN shed cost", demandReport(us, time.Second, loc("edge-us", llama, "standard", 4, 40, 1, math.NaN()), goodEU()), 0,
			"shed cost NaN: want a finite number >= 0",
		},
		{
			"1e308 cost", demandReport(us, time.Second, loc("edge-us", llama, "standard", 4, 1e308, 0, 0), goodEU()), 0,
			"token cost 1e+308 over 1s: want at most 2.62144e+10 (100000 requests/s × 262144 units, the largest request of llama-3.1-8b-instruct)",
		},
		{
			"huge request count", demandReport(us, time.Second, loc("edge-us", llama, "standard", 1e12, 40, 0, 0), goodEU()), 0,
			"1000000000000 requests over 1s: want at most 100000 (extproc.max_report_rate 100000/s)",
		},
		{
			"a year claimed", demandReport(us, 365*24*time.Hour, loc("edge-us", llama, "standard", 200000, 40, 0, 0), goodEU()), 0,
			"200000 requests over 1s believed (claimed 8760h0m0s): want at most 100000",
		},
		{"no interval", &loadstatsv3.LoadStatsRequest{Node: us, ClusterStats: []*endpointv3.ClusterStats{{
			ClusterName: demand.ClusterName, UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{loc("edge-us", llama, "standard", 1, 40, 0, 0)},
		}}}, 0, "1 requests over 0s: want at most 0"},
		{
			"shed over requests", demandReport(us, time.Second, loc("edge-us", llama, "standard", 4, 40, 5, 40), goodEU()), 0,
			"5 shed of 4 requests: want shed <= requests",
		},
		{
			"shed cost over cost", demandReport(us, time.Second, loc("edge-us", llama, "standard", 4, 40, 1, 41), goodEU()), 0,
			"shed cost 41 over token cost 40: want shed cost <= token cost",
		},
		{
			"unknown priority", demandReport(us, time.Second, loc("edge-us", llama, "urgent", 4, 40, 0, 0), goodEU()), 0,
			`locality "edge-us"/"llama-3.1-8b-instruct"/"urgent": unknown priority: want critical, standard or sheddable`,
		},
		{
			"same stream twice", demandReport(us, time.Second, loc("edge-us", llama, "standard", 4, 40, 0, 0), loc("edge-us", "llama3-8b", "standard", 4, 40, 0, 0), goodEU()), 40,
			"the stream (edge-us, llama-3.1-8b-instruct, standard) is already in this report",
		},
		{
			"a huge source name", demandReport(us, time.Second, loc(strings.Repeat("x", 1<<20), llama, "standard", 4, 40, 0, 0), goodEU()), 0,
			`"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"…(1048576 bytes)/"llama-3.1-8b-instruct"/"standard": unknown source`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agg := demand.NewAggregator(demoConfig(t), nil, t0)
			if err := agg.Report(tt.req); err != nil {
				t.Fatal(err)
			}
			rates, _ := agg.Rates(t0.Add(time.Second))
			if got := rates[llamaUS].CostPerSecond; got != tt.wantCost {
				t.Errorf("llama cost/s %v; want %v", got, tt.wantCost)
			}
			withGood := len(tt.req.GetClusterStats()[0].GetUpstreamLocalityStats()) > 1
			if got := rates[qwenEU].CostPerSecond; withGood && got != 10 {
				t.Errorf("the good entry of the same report: %v cost/s; want 10", got)
			}
			st := agg.Status()
			if tt.wantReason == "" {
				if st.Dropped != 0 || len(st.Refusals) != 0 {
					t.Errorf("dropped %d, refusals %+v; want none", st.Dropped, st.Refusals)
				}
				return
			}
			if st.Dropped != 1 || len(st.Refusals) != 1 || st.Refusals[0].Entries != 1 || st.Refusals[0].Node != `"extproc-1"` {
				t.Fatalf("dropped %d, refusals %+v; want one entry of extproc-1 refused", st.Dropped, st.Refusals)
			}
			if r := st.Refusals[0].Reasons; len(r) != 1 || !strings.Contains(r[0], tt.wantReason) || len(r[0]) > 512 {
				t.Errorf("reasons %q; want one of at most 512 bytes with %q", r, tt.wantReason)
			}
		})
	}
}

// TestEnvoyReportValidation: Envoy's own reports count only for engine
// clusters its source may use, from a node of a configured source; the
// clusters of ILB's own bootstrap are skipped without a word.
func TestEnvoyReportValidation(t *testing.T) {
	edgeUS := &corev3.Node{Id: "envoy-1", Cluster: "edge-us"}
	edgeEU := &corev3.Node{Id: "envoy-2", Cluster: "edge-eu"}
	tests := []struct {
		name       string
		req        *loadstatsv3.LoadStatsRequest
		wantRate   float64 // observed for (source, cluster)
		wantReason string
	}{
		{"engine cluster", envoyReport(edgeUS, "us-east-vllm", 20, 5), 25, ""},
		{"ILB's own clusters", envoyReport(edgeUS, "ilb_extproc", 500), 0, ""},
		{"unknown cluster", envoyReport(edgeUS, "evil", 20), 0, `cluster "evil" of source edge-us: not an engine cluster`},
		{
			"residency", envoyReport(edgeEU, "us-east-vllm", 20), 0,
			"cluster us-east-vllm of source edge-eu: not an engine cluster the source may use (residency)",
		},
		{
			"not from an Envoy", envoyReport(demand.ReporterNode("x"), "us-east-vllm", 20), 0,
			`cluster "us-east-vllm": Envoy's cluster stats need a node whose cluster is a configured source, not "ilb-extproc"`,
		},
		{
			"huge count", envoyReport(edgeUS, "us-east-vllm", 1e15, 5), 5,
			"cluster us-east-vllm locality \"\"/\"\"/\"\": 1000000000000000 requests over 1s: want at most 100000",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agg := demand.NewAggregator(demoConfig(t), nil, t0)
			if err := agg.Report(tt.req); err != nil {
				t.Fatal(err)
			}
			agg.Rates(t0.Add(time.Second))
			st := agg.Status()
			var got float64
			for _, o := range st.Observed {
				got += o.RequestsPerSecond
			}
			if got != tt.wantRate {
				t.Errorf("observed %+v; want %v requests/s", st.Observed, tt.wantRate)
			}
			switch {
			case tt.wantReason == "" && (st.Dropped != 0 || len(st.Refusals) != 0):
				t.Errorf("dropped %d, refusals %+v; want none", st.Dropped, st.Refusals)
			case tt.wantReason != "" && (st.Dropped != 1 || len(st.Refusals) != 1 || !strings.Contains(strings.Join(st.Refusals[0].Reasons, ";"), tt.wantReason)):
				t.Errorf("dropped %d, refusals %+v; want one entry refused: %q", st.Dropped, st.Refusals, tt.wantReason)
			}
		})
	}
}

// TestUnknownNode: a report whose node is missing or names no known
// reporter is refused whole: nothing summed, every entry counted.
func TestUnknownNode(t *testing.T) {
	entry := loc("edge-us", "llama-3.1-8b-instruct", "standard", 4, 40, 0, 0)
	tests := []struct {
		name string
		node *corev3.Node
		want string
	}{
		{"no node", nil, "no node"},
		{"empty id", &corev3.Node{Cluster: "edge-us"}, "node.id is empty"},
		{"huge id", &corev3.Node{Id: strings.Repeat("n", 5000), Cluster: "edge-us"}, "…(5000 bytes): want at most 256 bytes"},
		{"unknown cluster", &corev3.Node{Id: "n", Cluster: "edge-mars"}, `node "n": node.cluster "edge-mars" is neither "ilb-extproc" (an ext_proc reporter) nor a configured source`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agg := demand.NewAggregator(demoConfig(t), nil, t0)
			err := agg.Report(demandReport(tt.node, time.Second, entry, goodEU()))
			if !errors.Is(err, demand.ErrUnknownNode) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Report: %v; want ErrUnknownNode with %q", err, tt.want)
			}
			if rates, _ := agg.Rates(t0.Add(time.Second)); len(rates) != 0 {
				t.Errorf("rates %v; want nothing of the report summed", rates)
			}
			if st := agg.Status(); st.Dropped != 2 || st.Reports != 0 || len(st.Reporters) != 0 {
				t.Errorf("status %+v; want 2 entries dropped, no report taken, no reporter", st)
			}
		})
	}
}

// TestSumsSaturate: with bounds that let everything through (a
// max_report_rate of the largest double), two reports of the largest
// finite double still sum to a finite number, and the rates and the
// status stay finite and encodable. With the default bounds, such
// reports are refused, and the status encodes too.
func TestSumsSaturate(t *testing.T) {
	for _, tt := range []struct {
		name    string
		rate    float64
		wantMax bool
	}{{"no bound", math.MaxFloat64, true}, {"default bound", 0, false}} {
		t.Run(tt.name, func(t *testing.T) {
			c := demoConfig(t)
			if tt.rate > 0 {
				c.ExtProc.MaxReportRate = tt.rate
			}
			agg := demand.NewAggregator(c, nil, t0)
			for range 2 {
				if err := agg.Report(demandReport(demand.ReporterNode("x"), time.Second,
					loc("edge-us", "llama-3.1-8b-instruct", "standard", math.MaxUint64, math.MaxFloat64, math.MaxUint64, math.MaxFloat64))); err != nil {
					t.Fatal(err)
				}
			}
			rates, _ := agg.Rates(t0.Add(time.Millisecond)) // a short interval: the rate would overflow
			for k, r := range rates {
				if math.IsInf(r.CostPerSecond, 0) || math.IsNaN(r.CostPerSecond) || math.IsInf(r.RequestsPerSecond, 0) {
					t.Errorf("rate of %v: %+v; want finite", k, r)
				}
			}
			st := agg.Status()
			if _, err := json.Marshal(st); err != nil {
				t.Fatalf("status does not encode: %v", err)
			}
			if tt.wantMax {
				if len(st.Totals) != 1 || st.Totals[0].TokenCost != math.MaxFloat64 || st.Totals[0].Requests != math.MaxUint64 {
					t.Errorf("totals %+v; want saturated at the largest values", st.Totals)
				}
				if rates[llamaUS].CostPerSecond != math.MaxFloat64 {
					t.Errorf("rate %+v; want the largest double", rates[llamaUS])
				}
			} else if len(st.Totals) != 0 || st.Dropped != 2 {
				t.Errorf("totals %+v, dropped %d; want both refused", st.Totals, st.Dropped)
			}
		})
	}
}

// TestCoverageBoundsRapidReports: a reporter cannot inflate its bound by
// reporting often, each report claiming a full interval: together its
// reports are believed to cover the time that passed plus one interval.
func TestCoverageBoundsRapidReports(t *testing.T) {
	clk := newClock(time.Unix(5000, 0))
	agg := demand.NewAggregatorWith(demand.AggregatorOptions{Config: demoConfig(t), Start: t0, Now: clk.now})
	node := demand.ReporterNode("rapid")
	full := loc("edge-us", "llama-3.1-8b-instruct", "standard", 100000, 0, 0, 0) // the bound of one whole second
	for i := range 10 {                                                          // ten reports in 10 ms, each claiming 1s
		if err := agg.Report(demandReport(node, time.Second, full)); err != nil {
			t.Fatal(err)
		}
		clk.add(time.Millisecond)
		if st := agg.Status(); i == 0 && st.Dropped != 0 {
			t.Fatalf("the first report was refused: %+v", st.Refusals)
		}
	}
	st := agg.Status()
	if st.Dropped != 9 || len(st.Totals) != 1 || st.Totals[0].Requests != 100000 {
		t.Errorf("dropped %d, totals %+v; want one report's worth believed, nine refused", st.Dropped, st.Totals)
	}
	if r := st.Refusals[len(st.Refusals)-1].Reasons; len(r) != 1 || !strings.Contains(r[0], "100000 requests over 1ms believed (claimed 1s)") {
		t.Errorf("reasons %q", r)
	}
	clk.add(time.Second) // a second later, a second's worth is believed again
	if err := agg.Report(demandReport(node, time.Second, full)); err != nil {
		t.Fatal(err)
	}
	if st := agg.Status(); st.Dropped != 9 || st.Totals[0].Requests != 200000 {
		t.Errorf("dropped %d, totals %+v after a second; want the report summed", st.Dropped, st.Totals)
	}
}
