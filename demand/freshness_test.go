package demand_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	loadstatsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ilbproject/ilb/controller"
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

// TestReporterExpiry: with the demo's 1s report interval, a reporter
// silent for more than 3 s is forgotten (once: logged, counted), while
// the demand stays fresh because another reporter is alive; the silent
// reporter's streams simply drop out of the demand.
func TestReporterExpiry(t *testing.T) {
	var logs logLines
	clk := newClock(t0) // reports arrive at the times Rates is called
	agg := demand.NewAggregatorWith(demand.AggregatorOptions{Config: demoConfig(t), Logger: logs.logger(), Start: t0, Now: clk.now})
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	report(t, agg, "a", map[demand.Key]demand.Counts{llamaUS: {Requests: 1, TokenCost: 100}})
	report(t, agg, "b", map[demand.Key]demand.Counts{llamaUS: {Requests: 1, TokenCost: 300}})
	if rates, fresh := agg.Rates(at(1)); !fresh.Equal(at(1)) || rates[llamaUS].CostPerSecond != 400 {
		t.Fatalf("both reporting: %v at %v", rates, fresh)
	}
	tests := []struct {
		now       float64
		reporters int // alive after Rates at now
	}{{2, 2}, {3, 2}, {4, 2}, {4.5, 1}, {10, 1}}
	prev := 1.0
	for _, tt := range tests { // b stays silent; a keeps reporting
		clk.set(at(tt.now))
		report(t, agg, "a", map[demand.Key]demand.Counts{llamaUS: {Requests: 1, TokenCost: 100}})
		rates, fresh := agg.Rates(at(tt.now))
		if !fresh.Equal(at(tt.now)) {
			t.Errorf("t0+%vs: measured at %v; want now (a is alive)", tt.now, fresh)
		}
		if got, want := rates[llamaUS].CostPerSecond, 100/(tt.now-prev); math.Abs(got-want) > 1e-9 {
			t.Errorf("t0+%vs: %v cost/s; want a's alone, %v", tt.now, got, want)
		}
		prev = tt.now
		st := agg.Status()
		if len(st.Reporters) != tt.reporters {
			t.Errorf("t0+%vs: reporters %+v; want %d", tt.now, st.Reporters, tt.reporters)
		}
	}
	st := agg.Status()
	if st.Expired != 1 || st.Reporters[0].Node != "a" {
		t.Errorf("expired %d, reporters %+v; want b expired once", st.Expired, st.Reporters)
	}
	lines := logs.with(t, "demand reporters expired: silent for more than 3 report intervals")
	if len(lines) != 1 || !strings.Contains(fmt.Sprint(lines[0]["nodes"]), `"b"`) {
		t.Errorf("expiry log %v; want one line naming b", lines)
	}
}

// TestDemandGoesStaleWhenEveryReporterIsGone: the freshness is now while
// a reporter is alive or none ever reported; when every one is gone, it
// is the last time any reported, and a report brings it back to now.
func TestDemandGoesStaleWhenEveryReporterIsGone(t *testing.T) {
	agg := demand.NewAggregator(demoConfig(t), nil, t0)
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	if _, at := agg.Rates(sec(5)); !at.Equal(sec(5)) {
		t.Errorf("no reporter ever: measured at %v; want now", at)
	}
	report(t, agg, "a", nil)
	report(t, agg, "b", nil)
	agg.Rates(sec(6))
	for n := 7; n <= 9; n++ { // both silent, not yet expired
		if _, at := agg.Rates(sec(n)); !at.Equal(sec(n)) {
			t.Errorf("t0+%ds: measured at %v; want now (reporters alive within 3 intervals)", n, at)
		}
	}
	for n := 10; n <= 40; n += 10 {
		if _, at := agg.Rates(sec(n)); !at.Equal(sec(6)) {
			t.Errorf("t0+%ds, every reporter expired: measured at %v; want their last report (t0+6s)", n, at)
		}
	}
	if st := agg.Status(); len(st.Reporters) != 0 || st.Expired != 2 || !st.LastReport.Equal(sec(6)) {
		t.Errorf("status %+v", st)
	}
	report(t, agg, "a", nil)
	if _, at := agg.Rates(sec(41)); !at.Equal(sec(41)) {
		t.Errorf("a reports again: measured at %v; want now", at)
	}
}

// TestFreshNodeIDsCannotHoldDemand: a sequence of fresh node ids, each
// reporting once, neither makes the demand stale (the real reporter is
// alive) nor piles up: each is forgotten after three intervals.
func TestFreshNodeIDsCannotHoldDemand(t *testing.T) {
	agg := demand.NewAggregator(demoConfig(t), nil, t0)
	for n := 1; n <= 60; n++ {
		report(t, agg, "real", nil)
		report(t, agg, "fake-"+strings.Repeat("x", n%7)+string(rune('a'+n%26))+time.Duration(n).String(), nil)
		now := t0.Add(time.Duration(n) * time.Second)
		if _, at := agg.Rates(now); !at.Equal(now) {
			t.Fatalf("after %d fresh ids: measured at %v; want now", n, at)
		}
		if r := len(agg.Status().Reporters); r > 5 {
			t.Fatalf("after %d fresh ids: %d reporters known; want at most the real one and the last 4 fakes", n, r)
		}
	}
	if st := agg.Status(); st.Expired < 55 {
		t.Errorf("expired %d; want the fakes forgotten", st.Expired)
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

var _ demand.Sink = chanSink(nil)

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

// TestInProcessReporter is the all-in-one process's path: a Reporter
// flushing a meter straight into the aggregator on its own ticker, timed
// by the real clock; its reports are believed and it stays alive.
func TestInProcessReporter(t *testing.T) {
	agg := demand.NewAggregator(demoConfig(t), nil, time.Now())
	meter := demand.NewMeter(time.Now())
	r := &demand.Reporter{Meter: meter, Sink: agg, Node: demand.ReporterNode("ilb-all-in-one"), Interval: 10 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	for range 50 {
		meter.Add(llamaUS, 1000, false)
	}
	waitFor(t, func() bool {
		st := agg.Status()
		return len(st.Totals) == 1 && st.Totals[0].Requests == 50
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, at := agg.Rates(now); !at.Equal(now) {
		t.Errorf("measured at %v; want now", at)
	}
	if st := agg.Status(); st.Dropped != 0 || len(st.Reporters) != 1 || st.Totals[0].TokenCost != 50000 {
		t.Errorf("status %+v; want every report believed, one reporter", st)
	}
}

// TestSilentReporterDropsOut runs the controller on the aggregator's
// rates: when one of two reporters falls silent, the weights keep
// following the demand (no fail-static), which loses the silent
// reporter's streams; when both are gone for longer than stale_after,
// the controller keeps the last good weights (stale_demand); when one
// reports again, it resumes.
func TestSilentReporterDropsOut(t *testing.T) {
	c := demoConfig(t)
	now := t0
	agg := demand.NewAggregatorWith(demand.AggregatorOptions{Config: c, Start: now, Now: func() time.Time { return now }})
	ctl, err := controller.New(controller.Options{
		Config: c, Policy: weights.Optimizer{},
		Now:    func() time.Time { return now },
		Demand: func() (weights.Demand, time.Time) { return agg.Rates(now) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tick := c.Controller.Tick.Std()
	step := func(who ...string) error {
		now = now.Add(tick)
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
	before := ctl.Current().Status()
	for i := range 5 { // b silent: never stale
		if err := step("a"); err != nil {
			t.Fatalf("tick %d with b silent: %v; want the weights to follow the demand", i, err)
		}
	}
	if st := agg.Status(); len(st.Reporters) != 1 || st.Expired != 1 {
		t.Errorf("reporters %+v, expired %d; want b forgotten", st.Reporters, st.Expired)
	}
	if strings.Contains(ctl.Current().Status(), "stale") {
		t.Errorf("status %q (before: %q); want fresh weights", ctl.Current().Status(), before)
	}
	good := ctl.Current().Version()
	var stale int
	silent := int(c.Controller.StaleAfter.Std()/tick) + 4
	for range silent { // everyone silent for 4 ticks past stale_after
		err := step()
		switch {
		case err == nil:
		case strings.Contains(err.Error(), "stale_demand"):
			stale++
		case strings.Contains(err.Error(), "demand_jump") && stale == 0:
			// Until they expire, the silent reporters' streams count as
			// zero: a drop past max_demand_jump holds the weights too.
		default:
			t.Fatalf("Tick: %v; want demand_jump, then stale_demand", err)
		}
	}
	if stale < 3 || ctl.Current().Version() != good || !strings.Contains(ctl.Current().Status(), "stale_demand") {
		t.Errorf("%d stale ticks, version %s status %q; want the weights held with stale_demand", stale, ctl.Current().Version(), ctl.Current().Status())
	}
	if err := step("b"); err != nil {
		t.Errorf("b reports again: %v", err)
	}
}

// TestStreamEndForgetsReporter: over gRPC, a reporter that closes its
// LRS stream is forgotten at once; the demand stays fresh while another
// reporter is alive, and goes stale (dated by the last report) when the
// last one leaves.
func TestStreamEndForgetsReporter(t *testing.T) {
	c := demoConfig(t)
	agg := demand.NewAggregator(c, nil, t0)
	conn := startLRS(t, agg)
	var clients []*demand.Client
	for _, id := range []string{"extproc-1", "extproc-2"} {
		node := demand.ReporterNode(id)
		client := demand.NewClient(conn, node)
		if err := client.Report(demand.Encode(node, nil, time.Second)); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, client)
	}
	waitFor(t, func() bool { return len(agg.Status().Reporters) == 2 })
	agg.Rates(t0.Add(5 * time.Second))
	clients[0].Close()
	waitFor(t, func() bool { return len(agg.Status().Reporters) == 1 })
	if _, at := agg.Rates(t0.Add(6 * time.Second)); !at.Equal(t0.Add(6 * time.Second)) {
		t.Errorf("measured at %v with extproc-2 alive; want now", at)
	}
	clients[1].Close()
	waitFor(t, func() bool { return len(agg.Status().Reporters) == 0 })
	if _, at := agg.Rates(t0.Add(time.Hour)); !at.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("measured at %v after every reporter left; want their last report (t0+5s)", at)
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
	return startLRSWith(t, demand.ServerOptions{Sink: agg, Interval: time.Second})
}

// startLRSWith serves an LRS server configured by o on loopback.
func startLRSWith(t *testing.T, o demand.ServerOptions) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	demand.NewServer(o).Register(g)
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
