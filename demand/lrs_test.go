package demand_test

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	loadstatsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ilbproject/ilb/demand"
)

// lrsStream opens a raw LRS stream as node (its first message, the node
// only) and reads the server's answer.
func lrsStream(t *testing.T, conn *grpc.ClientConn, node *corev3.Node) grpc.BidiStreamingClient[loadstatsv3.LoadStatsRequest, loadstatsv3.LoadStatsResponse] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := loadstatsv3.NewLoadReportingServiceClient(conn).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&loadstatsv3.LoadStatsRequest{Node: node}); err != nil {
		t.Fatal(err)
	}
	if resp, err := st.Recv(); err != nil || !resp.GetSendAllClusters() {
		t.Fatalf("LRS answer %v, %v", resp, err)
	}
	return st
}

// TestLRSRefusesBadValues sends an ext_proc reporter's fake reports over
// a real LRS stream, one a second by the server's clock: each bad entry
// is refused with its reason, the stream stays open, the good report at
// the end is summed, and the rates and status stay finite.
func TestLRSRefusesBadValues(t *testing.T) {
	agg := demand.NewAggregator(demoConfig(t), nil, t0)
	clk := newClock(time.Unix(5000, 0))
	conn := startLRSWith(t, demand.ServerOptions{Sink: agg, Interval: time.Second, Now: clk.now})
	node := demand.ReporterNode("fake")
	st := lrsStream(t, conn, node)
	const llama = "llama-3.1-8b-instruct"
	year := 365 * 24 * time.Hour
	steps := []struct {
		name    string
		advance time.Duration // server clock, before the report
		claim   time.Duration
		entry   *endpointv3.UpstreamLocalityStats
		reason  string // "": summed
	}{
		{"+Inf", time.Second, time.Second, loc("edge-us", llama, "standard", 1, math.Inf(1), 0, 0), "token cost +Inf: want a finite number >= 0"},
		{"NaN", time.Second, time.Second, loc("edge-us", llama, "standard", 1, math.NaN(), 0, 0), "token cost NaN: want a finite number >= 0"},
		{"-1", time.Second, time.Second, loc("edge-us", llama, "standard", 1, -1, 0, 0), "token cost -1: want a finite number >= 0"},
		{"1e308", time.Second, time.Second, loc("edge-us", llama, "standard", 1, 1e308, 0, 0), "token cost 1e+308 over 1s: want at most 2.62144e+10"},
		{"1e308 again", time.Second, time.Second, loc("edge-us", llama, "standard", 1, 1e308, 0, 0), "token cost 1e+308 over 1s: want at most 2.62144e+10"},
		{"huge count", time.Second, time.Second, loc("edge-us", llama, "standard", 1e12, 40, 0, 0), "1000000000000 requests over 1s: want at most 100000"},
		// A second after the last report the stream has 2 s in store
		// (one second of slack kept, one elapsed): a year claimed is
		// believed as 2 s.
		{"a year claimed", time.Second, year, loc("edge-us", llama, "standard", 300000, 40, 0, 0), "300000 requests over 2s believed (claimed 8760h0m0s): want at most 200000"},
		{"right after", 0, time.Second, loc("edge-us", llama, "standard", 1, 40, 0, 0), "1 requests over 0s believed (claimed 1s): want at most 0"},
		{"good", time.Second, time.Second, loc("edge-us", llama, "standard", 100, 1000, 0, 0), ""},
	}
	for i, s := range steps {
		clk.add(s.advance)
		if err := st.Send(demandReport(nil, s.claim, s.entry)); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		waitFor(t, func() bool { return agg.Status().Reports == uint64(i+1) })
		got := agg.Status()
		if s.reason == "" {
			if got.Dropped != uint64(i) {
				t.Errorf("%s: dropped %d; want the report summed", s.name, got.Dropped)
			}
			continue
		}
		last := got.Refusals[len(got.Refusals)-1]
		if got.Dropped != uint64(i+1) || last.Node != `"fake"` || len(last.Reasons) != 1 || !strings.Contains(last.Reasons[0], s.reason) {
			t.Errorf("%s: dropped %d, last refusal %+v; want %q", s.name, got.Dropped, last, s.reason)
		}
	}
	rates, _ := agg.Rates(t0.Add(time.Millisecond))
	if r := rates[llamaUS]; r.RequestsPerSecond != 100000 || r.CostPerSecond != 1e6 {
		t.Errorf("rates %+v; want only the good report (100 requests, 1000 units in 1 ms)", r)
	}
	if _, err := json.Marshal(agg.Status()); err != nil {
		t.Errorf("status does not encode: %v", err)
	}
}

// TestLRSEnvoyReports: Envoy's own reports over LRS count for the engine
// clusters its source may use; an unknown cluster is refused with a
// reason, ILB's own clusters are skipped; a later message naming another
// node still speaks as the stream's node.
func TestLRSEnvoyReports(t *testing.T) {
	agg := demand.NewAggregator(demoConfig(t), nil, t0)
	// The server's clock moves a second between the reports: each claims
	// a second, which the stream then has (no wall clock in the test).
	clk := newClock(time.Unix(5000, 0))
	conn := startLRSWith(t, demand.ServerOptions{Sink: agg, Interval: time.Second, Now: clk.now})
	st := lrsStream(t, conn, &corev3.Node{Id: "envoy-1", Cluster: "edge-us"})
	req := envoyReport(nil, "us-east-vllm", 20)
	req.ClusterStats = append(req.ClusterStats, envoyReport(nil, "evil", 7).ClusterStats[0], envoyReport(nil, "ilb_extproc", 9).ClusterStats[0])
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return agg.Status().Reports == 1 })
	clk.add(time.Second)
	// The same stream now claims to be an Envoy of edge-eu.
	if err := st.Send(envoyReport(&corev3.Node{Id: "envoy-2", Cluster: "edge-eu"}, "eu-west-vllm", 10)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return agg.Status().Reports == 2 })
	agg.Rates(t0.Add(time.Second))
	got := agg.Status()
	want := []demand.ObservedRate{{Source: "edge-us", Cluster: "eu-west-vllm", RequestsPerSecond: 10}, {Source: "edge-us", Cluster: "us-east-vllm", RequestsPerSecond: 20}}
	if !slices.Equal(got.Observed, want) {
		t.Errorf("observed %+v; want %+v", got.Observed, want)
	}
	if got.Dropped != 1 || len(got.Refusals) != 1 || !strings.Contains(got.Refusals[0].Reasons[0], `cluster "evil" of source edge-us: not an engine cluster`) {
		t.Errorf("dropped %d, refusals %+v; want evil refused", got.Dropped, got.Refusals)
	}
}

// TestLRSUnknownNode: a stream whose node is not a known reporter ends
// with InvalidArgument before any answer, and nothing it sent is summed,
// even in its first message.
func TestLRSUnknownNode(t *testing.T) {
	tests := []struct {
		name  string
		first *loadstatsv3.LoadStatsRequest
		want  string
	}{
		{"node only", &loadstatsv3.LoadStatsRequest{Node: &corev3.Node{Id: "x", Cluster: "edge-mars"}}, `node.cluster "edge-mars" is neither`},
		{"no node", demandReport(nil, time.Second, loc("edge-us", "llama-3.1-8b-instruct", "standard", 1, 40, 0, 0)), "no node"},
		{"with a report", demandReport(&corev3.Node{Id: "x", Cluster: "edge-mars"}, time.Second, loc("edge-us", "llama-3.1-8b-instruct", "standard", 1, 40, 0, 0)), `node.cluster "edge-mars"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agg := demand.NewAggregator(demoConfig(t), nil, t0)
			conn := startLRS(t, agg)
			st, err := loadstatsv3.NewLoadReportingServiceClient(conn).StreamLoadStats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(tt.first); err != nil {
				t.Fatal(err)
			}
			_, err = st.Recv()
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Recv: %v; want InvalidArgument with %q", err, tt.want)
			}
			if rates, _ := agg.Rates(t0.Add(time.Second)); len(rates) != 0 {
				t.Errorf("rates %v; want nothing summed", rates)
			}
			if got := agg.Status(); got.Reports != 0 || len(got.Reporters) != 0 || len(got.Refusals) != 1 {
				t.Errorf("status %+v; want no report taken, one refusal", got)
			}
		})
	}
}

// denyEU is an authorizer that refuses edge-eu, as a peer whose identity
// may speak only for edge-us; it records what it was asked.
type denyEU struct {
	mu    sync.Mutex
	asked []string
	peers int // calls whose ctx carried the stream's peer
}

var _ demand.Authorizer = (*denyEU)(nil)

func (d *denyEU) Authorize(ctx context.Context, source string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, source)
	if _, ok := peer.FromContext(ctx); ok {
		d.peers++
	}
	if source == "edge-eu" {
		return status.Errorf(codes.PermissionDenied, "peer may not report load for source %s", source)
	}
	return nil
}

func (d *denyEU) calls() ([]string, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.asked), d.peers
}

// TestLRSAuthorizer: every source a report speaks for is authorized
// (once per stream) with the stream's context before anything of it is
// summed; a refusal ends the stream with the authorizer's status and
// none of that report is summed — not even its allowed entries.
func TestLRSAuthorizer(t *testing.T) {
	const llama = "llama-3.1-8b-instruct"
	t.Run("demand report", func(t *testing.T) {
		agg := demand.NewAggregator(demoConfig(t), nil, t0)
		auth := &denyEU{}
		conn := startLRSWith(t, demand.ServerOptions{Sink: agg, Interval: time.Second, Authorizer: auth})
		st := lrsStream(t, conn, demand.ReporterNode("extproc-us"))
		if err := st.Send(demandReport(nil, time.Second, loc("edge-us", llama, "standard", 1, 40, 0, 0))); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return agg.Status().Reports == 1 })
		if err := st.Send(demandReport(nil, time.Second, loc("edge-us", llama, "standard", 2, 80, 0, 0), loc("edge-eu", llama, "standard", 2, 80, 0, 0))); err != nil {
			t.Fatal(err)
		}
		_, err := st.Recv()
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "edge-eu") {
			t.Fatalf("Recv: %v; want PermissionDenied for edge-eu", err)
		}
		got := agg.Status()
		if got.Reports != 1 || len(got.Totals) != 1 || got.Totals[0].Requests != 1 {
			t.Errorf("reports %d, totals %+v; want only the first report summed", got.Reports, got.Totals)
		}
		asked, peers := auth.calls()
		if !slices.Equal(asked, []string{"edge-us", "edge-eu"}) || peers != 2 {
			t.Errorf("authorizer asked %v (%d with the stream's peer); want edge-us once, then edge-eu, with the stream's context", asked, peers)
		}
	})
	t.Run("Envoy report", func(t *testing.T) {
		agg := demand.NewAggregator(demoConfig(t), nil, t0)
		conn := startLRSWith(t, demand.ServerOptions{Sink: agg, Interval: time.Second, Authorizer: &denyEU{}})
		st := lrsStream(t, conn, &corev3.Node{Id: "envoy-eu", Cluster: "edge-eu"})
		if err := st.Send(envoyReport(nil, "eu-west-vllm", 10)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("Recv: %v; want PermissionDenied", err)
		}
		agg.Rates(t0.Add(time.Second))
		if got := agg.Status(); got.Reports != 0 || len(got.Observed) != 0 {
			t.Errorf("status %+v; want nothing taken", got)
		}
	})
	t.Run("first message", func(t *testing.T) {
		agg := demand.NewAggregator(demoConfig(t), nil, t0)
		conn := startLRSWith(t, demand.ServerOptions{Sink: agg, Interval: time.Second, Authorizer: &denyEU{}})
		st, err := loadstatsv3.NewLoadReportingServiceClient(conn).StreamLoadStats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(demandReport(demand.ReporterNode("x"), time.Second, loc("edge-eu", llama, "standard", 2, 80, 0, 0))); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("Recv: %v; want PermissionDenied", err)
		}
		if got := agg.Status(); got.Reports != 0 || len(got.Totals) != 0 || len(got.Reporters) != 0 {
			t.Errorf("status %+v; want nothing taken", got)
		}
	})
}
