package test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/sim/engine"
	"github.com/ilbproject/ilb/sim/loadgen"
	"github.com/ilbproject/ilb/sim/stack"
	"github.com/ilbproject/ilb/weights"
)

// retainedHeap is the live heap after a full collection.
func retainedHeap() uint64 {
	runtime.GC()
	runtime.GC() // finalizers of the first may free more
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestHugeModelNamesStayBounded: 20 requests through Envoy naming a 4 MiB
// model get bounded 404s, and leave bounded records: the decision log
// keeps a bounded excerpt, /debug/decisions?limit=50 stays small, and the
// process keeps no more than a few MiB of them.
func TestHugeModelNamesStayBounded(t *testing.T) {
	// Parsing a 4 MiB body under the race detector on a loaded machine can
	// take longer than the default message timeout, and Envoy would then
	// route without ILB (and the engine answer): give ILB the time, as an
	// operator sizes message_timeout for the largest prompt.
	s := startWorld(t, nil, func(c *config.Config) {
		c.Controller.Policy = config.PolicyProportional
		c.Envoy.MessageTimeout = config.Duration(30 * time.Second)
		c.ExtProc.StreamIdleTimeout = config.Duration(31 * time.Second)
	})
	us := envoyURL(t, s, "edge-us")
	model := strings.Repeat("m", 4<<20)
	before := retainedHeap()
	for i := range 20 {
		resp, body := do(t, http.MethodPost, us+"/v1/chat/completions",
			fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi %d"}]}`, model, i), nil)
		if resp.StatusCode != http.StatusNotFound || len(body) > 64<<10 || resp.Header.Get("x-ilb-reason") != "model_not_found" {
			t.Fatalf("request %d: %d (x-ilb-reason %q) with a %d-byte body; want ILB's 404 model_not_found of at most 64 KiB",
				i, resp.StatusCode, resp.Header.Get("x-ilb-reason"), len(body))
		}
	}
	grown := int64(retainedHeap()) - int64(before)
	if grown > 64<<20 {
		t.Errorf("the retained heap grew by %d MiB after 20 requests with 4 MiB model names; want <= 64 MiB", grown>>20)
	}
	resp, b := do(t, http.MethodGet, "http://"+s.App.AdminAddr()+"/debug/decisions?limit=50", "", nil)
	if resp.StatusCode != http.StatusOK || len(b) > 4<<20 || strings.Count(string(b), `"model_not_found"`) < 20 {
		t.Errorf("/debug/decisions?limit=50: %d, %d bytes, %d records naming model_not_found; want 200, <= 4 MiB, >= 20",
			resp.StatusCode, len(b), strings.Count(string(b), `"model_not_found"`))
	}
	t.Logf("retained heap grew by %d KiB; /debug/decisions?limit=50 is %d bytes", grown>>10, len(b))
}

// TestInflatedDemandShedsNoOne: 20 requests claiming max_tokens=1e15 (the
// engines refuse them) and 15 requests with 600 KiB prompts abandoned
// before the engine answers (its prefill of 150k tokens takes seconds;
// the clients leave after 2 s, once ILB has booked every request of the
// attack),
// then ordinary traffic at a rate the fleet serves: the controller
// never plans to shed and no ordinary request is shed.
func TestInflatedDemandShedsNoOne(t *testing.T) {
	timing := engine.DefaultFixedTiming()
	s := startWorld(t, &timing, func(c *config.Config) {
		c.Controller.Policy = config.PolicyOptimizer
		c.Controller.Tick = config.Duration(500 * time.Millisecond)
		// Room for 1 MB parses under the race detector on a loaded
		// machine: the attack must reach ILB's decision to be measured.
		c.Envoy.MessageTimeout = config.Duration(10 * time.Second)
		c.ExtProc.StreamIdleTimeout = config.Duration(11 * time.Second)
	})
	us := envoyURL(t, s, "edge-us")

	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			resp, _ := do(t, http.MethodPost, us+"/v1/chat/completions",
				fmt.Sprintf(`{"model":"llama3-8b","max_tokens":1000000000000000,"messages":[{"role":"user","content":"claim %d"}]}`, i), nil)
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("max_tokens=1e15: %d; want the engine's 400", resp.StatusCode)
			}
		})
	}
	prompt := strings.Repeat("x", 600<<10) // over the context, not twice: ILB forwards it
	// The clients leave once ILB has decided every request of the attack
	// (the demand counts them), not after a fixed time: on a loaded
	// machine a 600 KiB body may take seconds to reach the decision.
	booked := func() int64 {
		for _, tot := range s.App.Demand.Status().Totals {
			if tot.Source == "edge-us" && tot.Model == "llama-3.1-8b-instruct" {
				return int64(tot.Requests)
			}
		}
		return 0
	}
	leave, leaveNow := context.WithCancel(context.Background())
	defer leaveNow()
	var answered atomic.Int64
	for i := range 15 {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(leave, http.MethodPost, us+"/v1/chat/completions",
				strings.NewReader(fmt.Sprintf(`{"model":"llama3-8b","messages":[{"role":"user","content":"%d %s"}]}`, i, prompt)))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				answered.Add(1)
			}
		})
	}
	// The attack reached the demand: its requests were reported. The
	// clients stay at least 2 s, as clients that gave up on a slow answer.
	sent := time.Now()
	waitUntil(t, "the attack's requests reach the demand", time.Minute, func() bool { return booked() >= 35 })
	time.Sleep(2*time.Second - time.Since(sent))
	leaveNow()
	wg.Wait()
	t.Logf("%d of the 15 long prompts were answered before their clients left", answered.Load())
	// Ordinary traffic for 6 s, while the controller ticks (every 500 ms)
	// on the demand that holds the attack.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var results []loadgen.Result
	done := make(chan error, 1)
	go func() {
		var err error
		results, err = loadgen.Run(ctx, loadgen.Options{
			Targets: []loadgen.Target{{Source: "edge-us", URL: us}}, Models: []string{"llama-3.1-8b-instruct"},
			Concurrency: 2, MaxTokens: 16, Duration: 6 * time.Second, Seed: 5,
		})
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	shed := 0
	for _, r := range results {
		if r.Status == http.StatusTooManyRequests || r.Status == http.StatusServiceUnavailable {
			shed++
			t.Logf("refused: %d %s %q (request %s)", r.Status, r.Reason, r.Body, r.RequestID)
		}
	}
	if shed > 0 || len(results) == 0 {
		t.Errorf("%d of %d ordinary requests were refused; want none", shed, len(results))
	}
	// No version published since the start planned any shedding.
	for _, v := range s.App.History.Versions(1000) {
		for _, c := range v.Cells {
			for p, f := range c.Shed {
				if f > 0 {
					t.Errorf("weights %s shed %.0f%% of %s %s/%s", v.Version, 100*f, weights.Priority(p), c.Source, c.Model)
				}
			}
		}
	}
}

// TestIdleStreamsDoNotStarveRouting: thousands of ext_proc streams that
// send request headers and never the body they announce (a client, or a
// broken Envoy, holding them) while ordinary traffic flows: every ordinary
// request is routed (no 503 no_capacity, no 429), and ILB ends every idle
// stream after extproc.stream_idle_timeout.
func TestIdleStreamsDoNotStarveRouting(t *testing.T) {
	const idle = 2000
	s := startWorld(t, nil, func(c *config.Config) { c.Controller.Policy = config.PolicyProportional })
	us := envoyURL(t, s, "edge-us")
	conn, err := grpc.NewClient(s.App.ExtProcAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := extprocv3.NewExternalProcessorClient(conn)
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "x-ilb-source", "edge-us"))
	defer cancel()
	ended := make(chan codes.Code, idle)
	for range idle {
		st, err := client.Process(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/chat/completions")},
			}},
		}}}); err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				if _, err := st.Recv(); err != nil {
					ended <- status.Code(err)
					return
				}
			}
		}()
	}
	results, err := loadgen.Run(context.Background(), loadgen.Options{
		Targets: []loadgen.Target{{Source: "edge-us", URL: us}}, Models: []string{"llama-3.1-8b-instruct"},
		Concurrency: 4, MaxTokens: 8, Duration: 3 * time.Second, Seed: 9,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("an ordinary request got %d (%v) while %d streams idled", r.Status, r.Err, idle)
		}
	}
	for i := range idle {
		if c := <-ended; c != codes.DeadlineExceeded {
			t.Fatalf("idle stream %d ended with %s; want DeadlineExceeded from ILB", i, c)
		}
	}
	t.Logf("%d ordinary requests served while %d idle streams were open and then timed out", len(results), idle)
}

// TestFakeLRSReportsChangeNothing: a reporter on the xDS port sends
// +Inf, NaN, 1e308 (twice) and then falls silent: its entries are refused
// with reasons, the controller keeps ticking on fresh demand (it never
// fails static), /debug/signals still answers, and edge-us's llama cell
// stays where real demand puts it.
func TestFakeLRSReportsChangeNothing(t *testing.T) {
	s := startWorld(t, nil, func(c *config.Config) {
		c.Controller.Policy = config.PolicyOptimizer
		c.Controller.Tick = config.Duration(200 * time.Millisecond)
	})
	before, _ := s.App.Controller.Current().Cell("edge-us", "llama-3.1-8b-instruct")
	conn, err := grpc.NewClient(s.App.XDSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	node := demand.ReporterNode("fake-reporter")
	client := demand.NewClient(conn, node)
	defer client.Close()
	k := demand.Key{Source: "edge-us", Model: "llama-3.1-8b-instruct", Priority: weights.Standard}
	for _, cost := range []float64{math.Inf(1), math.NaN(), 1e308, 1e308} {
		if err := client.Report(demand.Encode(node, map[demand.Key]demand.Counts{k: {Requests: 1, TokenCost: cost}}, time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the fake entries are refused", 10*time.Second, func() bool { return s.App.Demand.Status().Dropped >= 4 })
	// The reporter now stays silent: it expires within three report
	// intervals, and the controller ticks on fresh demand meanwhile.
	waitUntil(t, "the silent reporter expires", 20*time.Second, func() bool { return s.App.Demand.Status().Expired >= 1 })
	ticks := func() float64 { return promValue(t, s, `ilb_controller_ticks_total{result="failed"}`) }
	failed := ticks()
	published := len(s.App.History.Versions(1000))
	waitUntil(t, "five more ticks", 20*time.Second, func() bool {
		return promValue(t, s, `ilb_controller_ticks_total{result="unchanged"}`) >= 5 || len(s.App.History.Versions(1000)) >= published+5
	})
	if got := ticks(); got != failed {
		t.Errorf("the controller failed %v ticks after the fake reports; want none (status %q)", got-failed, s.App.Controller.Current().Status())
	}
	resp, b := do(t, http.MethodGet, "http://"+s.App.AdminAddr()+"/debug/signals", "", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "token cost") {
		t.Errorf("/debug/signals: %d, refusals shown: %v", resp.StatusCode, strings.Contains(string(b), "token cost"))
	}
	after, _ := s.App.Controller.Current().Cell("edge-us", "llama-3.1-8b-instruct")
	if fmt.Sprint(after.Targets) != fmt.Sprint(before.Targets) || after.Shed != before.Shed {
		t.Errorf("edge-us llama moved from %v to %v (shed %v): fake reports skewed it", before.Targets, after.Targets, after.Shed)
	}
}

// promValue reads one sample of the admin /metrics by its exact series;
// 0 when the series is not exposed.
func promValue(t *testing.T, s *stack.Stack, series string) float64 {
	t.Helper()
	_, b := do(t, http.MethodGet, "http://"+s.App.AdminAddr()+"/metrics", "", nil)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return v
		}
	}
	return 0
}
