package demand_test

import (
	"context"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	loadstatsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/internal/serve"
	"github.com/ilbproject/ilb/weights"
)

// report sends one report of counts from reporter id to agg.
func report(t *testing.T, agg *demand.Aggregator, id string, counts map[demand.Key]demand.Counts) {
	t.Helper()
	if err := agg.Report(demand.Encode(demand.ReporterNode(id), counts, time.Second)); err != nil {
		t.Fatal(err)
	}
}

// TestAggregatorDropsBadValues: a report entry whose token cost is NaN,
// infinite or negative is dropped and counted, never summed: one bad
// report would otherwise poison the demand average for good.
func TestAggregatorDropsBadValues(t *testing.T) {
	tests := []struct {
		name            string
		cost, shedCost  float64
		wantCost        float64
		wantDroppedMore uint64
	}{
		{"finite", 40, 0, 40, 0},
		{"NaN cost", math.NaN(), 0, 0, 1},
		{"infinite cost", math.Inf(1), 0, 0, 1},
		{"negative cost", -40, 0, 0, 1},
		{"NaN shed cost", 40, math.NaN(), 0, 1},
		{"negative shed cost", 40, -1, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agg := demand.NewAggregator(demoConfig(t), nil, t0)
			report(t, agg, "x", map[demand.Key]demand.Counts{
				llamaUS: {Requests: 4, TokenCost: tt.cost, Shed: 1, ShedCost: tt.shedCost},
				qwenEU:  {Requests: 1, TokenCost: 10},
			})
			rates, _ := agg.Rates(t0.Add(time.Second))
			if got := rates[llamaUS].CostPerSecond; got != tt.wantCost {
				t.Errorf("llama cost/s %v; want %v", got, tt.wantCost)
			}
			if got := rates[qwenEU].CostPerSecond; got != 10 {
				t.Errorf("the good entry of the same report: %v cost/s; want 10", got)
			}
			if got := agg.Status().Dropped; got != tt.wantDroppedMore {
				t.Errorf("dropped %d; want %d", got, tt.wantDroppedMore)
			}
		})
	}
}

// TestDemandFreshness: the time Rates returns is when every reporter was
// last heard from, so a reporter that falls silent makes demand stale
// instead of looking like zero demand; a reporter whose stream ended is
// forgotten.
func TestDemandFreshness(t *testing.T) {
	c := demoConfig(t)
	agg := demand.NewAggregator(c, nil, t0)
	if _, at := agg.Rates(t0.Add(5 * time.Second)); !at.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("no reporter yet: measured at %v; want now", at)
	}
	tick := func(i int, who ...string) time.Time {
		for _, id := range who {
			report(t, agg, id, nil) // a heartbeat: no demand, but alive
		}
		_, at := agg.Rates(t0.Add(time.Duration(i) * 5 * time.Second))
		return at
	}
	for i := 2; i <= 3; i++ {
		if at := tick(i, "a", "b"); !at.Equal(t0.Add(time.Duration(i) * 5 * time.Second)) {
			t.Errorf("tick %d, both reporting: measured at %v", i, at)
		}
	}
	for i := 4; i <= 10; i++ { // b falls silent after tick 3
		if at := tick(i, "a"); !at.Equal(t0.Add(15 * time.Second)) {
			t.Errorf("tick %d, b silent since tick 3: measured at %v; want b's last report (t0+15s)", i, at)
		}
	}
	st := agg.Status()
	if len(st.Reporters) != 2 || st.Reporters[1].Node != "b" || !st.Reporters[1].LastReport.Equal(t0.Add(15*time.Second)) {
		t.Errorf("reporters %+v", st.Reporters)
	}
	agg.Disconnected(demand.ReporterNode("b"))
	if at := tick(11, "a"); !at.Equal(t0.Add(55 * time.Second)) {
		t.Errorf("b's stream ended: measured at %v; want now (b forgotten)", at)
	}
	// A reporter silent for ten times stale_after is forgotten, even
	// though its stream never ended.
	report(t, agg, "c", nil)
	agg.Rates(t0.Add(60 * time.Second))
	horizon := 10 * c.Controller.StaleAfter.Std()
	if _, at := agg.Rates(t0.Add(60*time.Second + horizon - time.Second)); !at.Equal(t0.Add(60 * time.Second)) {
		t.Errorf("c silent within the horizon: measured at %v", at)
	}
	later := t0.Add(60*time.Second + horizon + time.Second)
	if _, at := agg.Rates(later); !at.Equal(later) {
		t.Errorf("c silent past the horizon: measured at %v; want now", at)
	}
}

// chanSink hands reports to a channel, dropping those it has no room for.
type chanSink chan *loadstatsv3.LoadStatsRequest

func (s chanSink) Report(req *loadstatsv3.LoadStatsRequest) error {
	select {
	case s <- req:
	default:
	}
	return nil
}

// TestReporterHeartbeat: an idle reporter still reports every interval
// (an empty demand report), so its silence can only mean it is gone.
func TestReporterHeartbeat(t *testing.T) {
	sink := make(chanSink, 100)
	r := &demand.Reporter{Meter: demand.NewMeter(time.Now()), Sink: sink, Node: demand.ReporterNode("idle"), Interval: 5 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	for range 3 {
		select {
		case req := <-sink:
			cs := req.GetClusterStats()
			if len(cs) != 1 || cs[0].GetClusterName() != demand.ClusterName || len(cs[0].GetUpstreamLocalityStats()) != 0 || req.GetNode().GetId() != "idle" {
				t.Errorf("heartbeat %v; want an empty %s report from idle", req, demand.ClusterName)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no report from an idle reporter")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// TestSilentReporterHoldsWeights runs the controller on the aggregator's
// rates: while every reporter sends its heartbeat, weights are computed;
// when one falls silent for longer than stale_after, the controller keeps
// the last good weights (stale_demand); when it reports again, the
// controller resumes.
func TestSilentReporterHoldsWeights(t *testing.T) {
	c := demoConfig(t)
	now := t0
	agg := demand.NewAggregator(c, nil, now)
	ctl, err := weights.NewController(weights.ControllerOptions{
		Config: c, Policy: weights.Optimizer{},
		Now:    func() time.Time { return now },
		Demand: func() (weights.Demand, time.Time) { return agg.Rates(now) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	step := func(who ...string) error {
		now = now.Add(c.Controller.Tick.Std())
		for _, id := range who {
			report(t, agg, id, map[demand.Key]demand.Counts{llamaUS: {Requests: 5, TokenCost: 5000}})
		}
		return ctl.Tick(ctx)
	}
	for range 3 {
		if err := step("a", "b"); err != nil {
			t.Fatal(err)
		}
	}
	good := ctl.Current().Version()
	var stale int
	silent := int(c.Controller.StaleAfter.Std()/c.Controller.Tick.Std()) + 4
	for range silent { // b silent for 4 ticks past stale_after
		if err := step("a"); err != nil {
			if !strings.Contains(err.Error(), "stale_demand") {
				t.Fatalf("Tick: %v; want stale_demand", err)
			}
			stale++
		}
	}
	if stale < 3 || ctl.Current().Version() != good || !strings.Contains(ctl.Current().Status(), "stale_demand") {
		t.Errorf("%d stale ticks, version %s status %q; want the weights held with stale_demand", stale, ctl.Current().Version(), ctl.Current().Status())
	}
	if err := step("a", "b"); err != nil {
		t.Errorf("b reports again: %v", err)
	}
}

// TestStreamEndForgetsReporter: over gRPC, a reporter that closes its
// LRS stream is forgotten, so its silence then does not hold the weights.
func TestStreamEndForgetsReporter(t *testing.T) {
	c := demoConfig(t)
	agg := demand.NewAggregator(c, nil, t0)
	conn := startLRS(t, agg)
	node := &corev3.Node{Id: "extproc-1", Cluster: "ilb-extproc"}
	client := demand.NewClient(conn, node)
	if err := client.Report(demand.Encode(node, nil, time.Second)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(agg.Status().Reporters) == 1 })
	agg.Rates(t0.Add(5 * time.Second))
	client.Close()
	waitFor(t, func() bool { return len(agg.Status().Reporters) == 0 })
	if _, at := agg.Rates(t0.Add(time.Hour)); !at.Equal(t0.Add(time.Hour)) {
		t.Errorf("measured at %v after the only reporter left; want now", at)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startLRS serves agg's LRS on loopback for the test and returns a client
// connection to it; both close when the test ends.
func startLRS(t *testing.T, agg *demand.Aggregator) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	demand.NewServer(demand.ServerOptions{Sink: agg, Interval: time.Second}).Register(g)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve.GRPC(ctx, g, ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return conn
}
