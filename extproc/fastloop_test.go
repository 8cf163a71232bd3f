package extproc_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/weights"
)

// qwen from edge-us: 4000 us-east-vllm, 4000 eu-west-vllm, 2000 eu-west-tgi;
// the fixed draw 4242 falls in eu-west-vllm's [4000, 8000).
func publishQwen(t *testing.T, h *harness, shed weights.ShedFractions) {
	t.Helper()
	publishCells(t, h, func(source, model string, cell *weights.Cell) {
		if source == "edge-us" && model == "qwen2.5-7b-instruct" {
			cell.Targets = []weights.Target{{Cluster: "us-east-vllm", Weight: 4000}, {Cluster: "eu-west-vllm", Weight: 4000}, {Cluster: "eu-west-tgi", Weight: 2000}}
			cell.Shed = shed
		}
	})
}

// publishCells publishes the harness weights with each cell changed by
// edit.
func publishCells(t *testing.T, h *harness, edit func(source, model string, cell *weights.Cell)) {
	t.Helper()
	var cells []weights.Cell
	for _, s := range h.cfg.Sources {
		for _, m := range h.cfg.Models {
			cell, _ := h.w.Cell(s.Name, m.Name)
			cell.Explanation = nil
			edit(s.Name, m.Name, &cell)
			cells = append(cells, cell)
		}
	}
	w, err := weights.New("test", time.Time{}, cells)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Publish(context.Background(), w); err != nil {
		t.Fatal(err)
	}
}

func qwenRequest(prio string) []*extprocv3.ProcessingRequest {
	hdr := post("/v1/chat/completions")
	if prio != "" {
		hdr = post("/v1/chat/completions", header.Priority, prio)
	}
	return []*extprocv3.ProcessingRequest{hdr, reqBody(`{"model":"qwen-7b","max_tokens":100,"messages":[{"role":"user","content":"` + strings.Repeat("x", 400) + `"}]}`)}
}

// allSaturated is live state with every qwen cluster of edge-us saturated:
// the engines confirm the overload.
func allSaturated() *live.State {
	return &live.State{At: now, Clusters: map[string]live.Cluster{
		"us-east-vllm": {Saturated: true}, "eu-west-vllm": {Saturated: true}, "eu-west-tgi": {Saturated: true},
	}}
}

// sat is a saturated cluster as the signals give it: a queue of three
// requests per running one (saturation needs a known load).
var sat = live.Cluster{Saturated: true, Pressure: 3, PressureKnown: true}

// free is a cluster with headroom: nothing queued.
var free = live.Cluster{PressureKnown: true}

// late misses the TTFT target while requests wait (overloaded in the
// SLO's terms), with no queue per running request to speak of.
var late = live.Cluster{Overloaded: true, PressureKnown: true}

// now is the harness clock (extproc.Options.Now).
var now = time.Unix(1700000000, 0)

func TestFastLoop(t *testing.T) {
	tests := []struct {
		name   string
		shed   weights.ShedFractions
		live   *live.State
		prio   string
		status int    // 0: routed
		code   string // rejection code, or the record's reason when routed
		to     string // x-ilb-route-cluster, "" when Envoy's draw stands
		why    string // in the record's Redrawn when to is set
	}{
		{"no live state: the draw stands", weights.ShedFractions{}, nil, "", 0, "weighted", "", ""},
		{"drawn cluster excluded: drawn again among the rest", weights.ShedFractions{}, &live.State{At: now, Clusters: map[string]live.Cluster{
			"eu-west-vllm": {Excluded: "no ready replica (2 unhealthy)"},
		}}, "", 0, "redrawn", "eu-west-tgi", "eu-west-vllm is excluded"}, // among us-east [0, 4000) and tgi [4000, 6000): 4242 % 6000 falls in tgi
		{"stale live state is ignored", weights.ShedFractions{}, &live.State{At: now.Add(-time.Minute), Clusters: map[string]live.Cluster{
			"eu-west-vllm": {Excluded: "no ready replica"},
		}}, "", 0, "weighted", "", ""},
		{"every cluster excluded: 503", weights.ShedFractions{}, &live.State{At: now, Clusters: map[string]live.Cluster{
			"us-east-vllm": {Excluded: "unhealthy"}, "eu-west-vllm": {Excluded: "unhealthy"}, "eu-west-tgi": {Excluded: "draining"},
		}}, "", 503, "no_capacity", "", ""},
		{"planned shedding of standard, confirmed by every cluster saturated", weights.ShedFractions{weights.Standard: 1}, allSaturated(), "standard", 429, "shed", "", ""},
		{"planned shedding of standard, confirmed by every cluster missing its TTFT target", weights.ShedFractions{weights.Standard: 1}, &live.State{At: now, Clusters: map[string]live.Cluster{
			"us-east-vllm": late, "eu-west-vllm": late, "eu-west-tgi": late,
		}}, "standard", 429, "shed", "", ""},
		{"planned shedding while one cluster meets its TTFT target, the request landing on a late one: shed", weights.ShedFractions{weights.Standard: 1}, &live.State{At: now, Clusters: map[string]live.Cluster{
			"us-east-vllm": late, "eu-west-vllm": late, "eu-west-tgi": free,
		}}, "standard", 429, "shed", "", ""},
		{"planned shedding while the cluster the request lands on meets its TTFT target: waived", weights.ShedFractions{weights.Standard: 1}, &live.State{At: now, Clusters: map[string]live.Cluster{
			"us-east-vllm": late, "eu-west-vllm": free, "eu-west-tgi": late,
		}}, "standard", 0, "weighted", "", ""},
		{"every cluster missing its TTFT target without a plan: sheddable served", weights.ShedFractions{}, &live.State{At: now, Clusters: map[string]live.Cluster{
			"us-east-vllm": late, "eu-west-vllm": late, "eu-west-tgi": late,
		}}, "sheddable", 0, "weighted", "", ""},
		{"planned shedding spares more important priorities", weights.ShedFractions{weights.Standard: 1}, allSaturated(), "critical", 0, "weighted", "", ""},
		{"planned shedding while a cluster has headroom: waived", weights.ShedFractions{weights.Standard: 1}, &live.State{At: now, Clusters: map[string]live.Cluster{
			"us-east-vllm": sat, "eu-west-vllm": sat, "eu-west-tgi": free,
		}}, "standard", 0, "steered", "eu-west-tgi", "eu-west-vllm has 3.00 queued requests per running one, others less: moved (probability 1 − 0.25) among 1 clusters with less"},
		{"planned shedding without live state: waived", weights.ShedFractions{weights.Sheddable: 1}, nil, "sheddable", 0, "weighted", "", ""},
		{"all saturated: sheddable refused", weights.ShedFractions{}, &live.State{At: now, Clusters: map[string]live.Cluster{
			"us-east-vllm": sat, "eu-west-vllm": sat, "eu-west-tgi": sat,
		}}, "sheddable", 429, "overloaded", "", ""},
		{"all saturated: critical still served", weights.ShedFractions{}, &live.State{At: now, Clusters: map[string]live.Cluster{
			"us-east-vllm": sat, "eu-west-vllm": sat, "eu-west-tgi": sat,
		}}, "critical", 0, "weighted", "", ""},
		{"one cluster not saturated: sheddable served there", weights.ShedFractions{}, &live.State{At: now, Clusters: map[string]live.Cluster{
			"us-east-vllm": sat, "eu-west-vllm": sat, "eu-west-tgi": free,
		}}, "sheddable", 0, "steered", "eu-west-tgi", "eu-west-vllm has 3.00 queued requests per running one, others less: moved (probability 1 − 0.25) among 1 clusters with less"},
		// The draw (4242) falls in eu-west-vllm [4000, 8000).
		{"drawn cluster saturated: steered (graded) among the others", weights.ShedFractions{}, &live.State{At: now, Clusters: map[string]live.Cluster{
			"us-east-vllm": free, "eu-west-vllm": sat, "eu-west-tgi": free,
		}}, "", 0, "steered", "eu-west-tgi", "eu-west-vllm has 3.00 queued requests per running one, others less: moved (probability 1 − 0.25) among 2 clusters with less, slot 4242"}, // us-east [0, 4000), tgi [4000, 6000)
		{"another cluster saturated: the draw stands", weights.ShedFractions{}, &live.State{At: now, Clusters: map[string]live.Cluster{
			"us-east-vllm": sat,
		}}, "", 0, "weighted", "", ""},
		{"redrawn onto a saturated cluster: steered", weights.ShedFractions{}, &live.State{At: now, Clusters: map[string]live.Cluster{
			"us-east-vllm": free, "eu-west-vllm": {Excluded: "no ready replica"}, "eu-west-tgi": sat,
		}}, "", 0, "steered", "us-east-vllm", "then eu-west-tgi has 3.00 queued requests per running one, others less: moved (probability 1 − 0.25)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, last, rec := decideQwen(t, tt.shed, tt.live, tt.prio)
			if tt.status != 0 {
				ir := refused(t, last, tt.status, tt.code)
				if tt.status == 429 {
					found := false
					for _, o := range ir.GetHeaders().GetSetHeaders() {
						found = found || (o.GetHeader().GetKey() == "retry-after" && string(o.GetHeader().GetRawValue()) == "1")
					}
					if !found {
						t.Error("429 without retry-after: 1")
					}
				}
				counts, _ := h.meter.Flush(now)
				if c := counts[demand.Key{Source: "edge-us", Model: "qwen2.5-7b-instruct", Priority: mustPrio(tt.prio)}]; c.Requests != 1 || c.Shed != 1 {
					t.Errorf("meter counts %+v; want one shed request", c)
				}
				return
			}
			set := mutation(t, last.GetRequestBody().GetResponse())
			// The chosen cluster is always named (Envoy may not hold the
			// weights version decided with yet).
			if set[header.RouteCluster] != rec.Chosen || rec.Chosen == "" {
				t.Errorf("%s = %q; want the chosen %q", header.RouteCluster, set[header.RouteCluster], rec.Chosen)
			}
			if rec.Reason != tt.code || (tt.to != "" && (rec.Chosen != tt.to || !strings.Contains(rec.Redrawn, tt.why))) {
				t.Errorf("record reason %s chosen %s redrawn %q", rec.Reason, rec.Chosen, rec.Redrawn)
			}
			if want := tt.shed[mustPrio(tt.prio)]; rec.ShedWaived != want {
				t.Errorf("record shed_waived %g; want %g (the plan that did not apply)", rec.ShedWaived, want)
			}
			// 400/4 prompt... ~ 100 prompt tokens × 1 + 100 output × 4.
			counts, _ := h.meter.Flush(now)
			c := counts[demand.Key{Source: "edge-us", Model: "qwen2.5-7b-instruct", Priority: mustPrio(tt.prio)}]
			if c.Requests != 1 || c.Shed != 0 || c.TokenCost < 400 || c.TokenCost > 600 {
				t.Errorf("meter counts %+v; want one routed request of ~500 token-cost", c)
			}
		})
	}
}

// TestPlanShedsOnlyLate: under overload every cluster confirms, the
// plan refuses a request through the stream only when its first token
// would come past the TTFT target (2 s) where it goes; one predicted in
// time is routed, and its record keeps the plan it waived and the
// prediction.
func TestPlanShedsOnlyLate(t *testing.T) {
	// One serving replica per cluster, nothing of this router's awaiting:
	// the prediction is the prompt's prefill (~100 tokens).
	at := func(perToken float64) *live.State {
		c := late
		c.Serving, c.PrefillPerToken = 1, perToken
		return &live.State{At: now, Clusters: map[string]live.Cluster{"us-east-vllm": c, "eu-west-vllm": c, "eu-west-tgi": c}}
	}
	tests := []struct {
		name     string
		live     *live.State
		status   int     // 0: routed
		waivedAt float64 // the record's prediction, when routed
	}{
		{"prefill of 100 µs a token: in time, routed", at(1e-4), 0, 0.01},
		{"prefill of 100 ms a token: past the target, shed", at(0.1), 429, 0},
		{"prefill speed unknown: the plan stands, shed", at(0), 429, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, last, rec := decideQwen(t, weights.ShedFractions{weights.Sheddable: 1}, tt.live, "sheddable")
			if tt.status != 0 {
				refused(t, last, tt.status, "shed")
				return
			}
			if last.GetImmediateResponse() != nil {
				t.Fatalf("refused %v; want routed", last.GetImmediateResponse())
			}
			if rec.ShedWaived != 1 || math.Abs(rec.ShedWaivedFirstToken-tt.waivedAt) > tt.waivedAt/2 {
				t.Errorf("record shed_waived %g, first token %g s; want 1, ~%g s", rec.ShedWaived, rec.ShedWaivedFirstToken, tt.waivedAt)
			}
		})
	}
}

// decideQwen sends one qwen request of priority prio from edge-us to a
// server holding weights with planned shed fractions shed and live state
// l (nil: none), and returns the harness, the last answer and the
// decision's record.
func decideQwen(t *testing.T, shed weights.ShedFractions, l *live.State, prio string) (*harness, *extprocv3.ProcessingResponse, decision.Record) {
	t.Helper()
	h := start(t, true)
	publishQwen(t, h, shed)
	if l != nil {
		h.srv.SetLive(l)
	}
	resps := h.run(t, "edge-us", qwenRequest(prio)...)
	rec, _ := h.srv.Decisions().Get("req-1")
	return h, resps[len(resps)-1], rec
}

// refused checks that last is an immediate response of status and code.
func refused(t *testing.T, last *extprocv3.ProcessingResponse, status int, code string) *extprocv3.ImmediateResponse {
	t.Helper()
	ir := last.GetImmediateResponse()
	if ir == nil {
		t.Fatalf("answer %v; want %d", last, status)
	}
	checkImmediate(t, ir, status, code, "", "")
	return ir
}

func mustPrio(s string) weights.Priority {
	if s == "" {
		return weights.Standard
	}
	p, err := weights.ParsePriority(s)
	if err != nil {
		panic(err)
	}
	return p
}

// TestRoutingByClusterName: a source whose routing is "cluster" (Istio)
// gets the chosen cluster named on every request.
func TestRoutingByClusterName(t *testing.T) {
	h := start(t, true)
	for i := range h.cfg.Sources {
		if h.cfg.Sources[i].Name == "edge-us" {
			h.cfg.Sources[i].Routing = "cluster"
		}
	}
	publishQwen(t, h, weights.ShedFractions{})
	resps := h.run(t, "edge-us", qwenRequest("")...)
	set := mutation(t, resps[len(resps)-1].GetRequestBody().GetResponse())
	rec, _ := h.srv.Decisions().Get("req-1")
	if set[header.RouteCluster] != "eu-west-vllm" || rec.Chosen != "eu-west-vllm" {
		t.Errorf("%s = %q, chosen %s; want eu-west-vllm named", header.RouteCluster, set[header.RouteCluster], rec.Chosen)
	}
}

// TestHealthService: Envoy's gRPC health check of the ext_proc cluster
// gets SERVING.
func TestHealthService(t *testing.T) {
	h := start(t, true)
	for _, svc := range []string{"", "envoy.service.ext_proc.v3.ExternalProcessor"} {
		resp, err := healthpb.NewHealthClient(h.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %v, %v", svc, resp, err)
		}
	}
}

// TestEngineQueueBalances: a queue the engines report (other routers'
// requests, which this one never counted) moves the requests drawn to
// that cluster to the one that would begin them soonest, through real
// streams, saying why; once the queue is gone, the draw stands.
func TestEngineQueueBalances(t *testing.T) {
	h := start(t, true)
	publishQwen(t, h, weights.ShedFractions{})
	calm := live.Cluster{TTFT: 0.05, TTFTKnown: true, FirstTokensPerSecond: 10, PressureKnown: true, Serving: 2}
	ls := allClusters(h.cfg, calm)
	queued := ls.Clusters["eu-west-vllm"]
	queued.Waiting, queued.FirstTokensPerSecond = 8, 2 // 4 s to admit them
	ls.Clusters["eu-west-vllm"] = queued
	h.srv.SetLive(ls)
	chosen := func() decision.Record {
		t.Helper()
		rec, ok := h.srv.Decisions().Get("req-1")
		if !ok {
			t.Fatal("no record")
		}
		return rec
	}
	done := respHeaders(":status", "200")
	// The draw (4242) falls on eu-west-vllm.
	h.run(t, "edge-us", append(qwenRequest(""), done)...)
	if rec := chosen(); rec.Chosen == "eu-west-vllm" || rec.Reason != "balanced" || !strings.Contains(rec.Redrawn, "eu-west-vllm would begin it in 4000 ms") {
		t.Errorf("with the engines' queue at eu-west-vllm: %s (%s, %q); want balanced away, saying why", rec.Chosen, rec.Reason, rec.Redrawn)
	}
	// The same queue, but the others prefill this prompt far slower
	// (their engines' TTFT per prompt token): the queue saves less than
	// their prefill loses, and the draw stands.
	slow := calm
	slow.PrefillPerToken = 1 // s per prompt token
	ls = allClusters(h.cfg, slow)
	queued.PrefillPerToken = 1e-5
	ls.Clusters["eu-west-vllm"] = queued
	h.srv.SetLive(ls)
	h.run(t, "edge-us", append(qwenRequest(""), done)...)
	if rec := chosen(); rec.Chosen != "eu-west-vllm" || rec.Reason != "weighted" || !strings.Contains(rec.Redrawn, "but its engines prefill this prompt in") || !strings.Contains(rec.Redrawn, "kept on eu-west-vllm") {
		t.Errorf("with the queue, the others' prefill slower: %s (%s, %q); want eu-west-vllm by weight, saying why", rec.Chosen, rec.Reason, rec.Redrawn)
	}
	// The others prefill this prompt in 3 s: less than the 4 s queue
	// saves, but past the 2 s TTFT target (controller.capacity.ttft_target)
	// where eu-west-vllm's prefill is not: the draw stands, saying so.
	prompt := float64(chosen().PromptTokens)
	if !(prompt > 0) {
		t.Fatalf("no prompt estimate in %+v", chosen())
	}
	past := calm
	past.PrefillPerToken = 3 / prompt
	ls = allClusters(h.cfg, past)
	ls.Clusters["eu-west-vllm"] = queued
	h.srv.SetLive(ls)
	h.run(t, "edge-us", append(qwenRequest(""), done)...)
	if rec := chosen(); rec.Chosen != "eu-west-vllm" || rec.Reason != "weighted" || !strings.Contains(rec.Redrawn, "prefill this prompt in 3000 ms, past the TTFT target of 2000 ms") {
		t.Errorf("with the queue, the others' prefill past the target: %s (%s, %q); want eu-west-vllm by weight, saying why", rec.Chosen, rec.Reason, rec.Redrawn)
	}
	h.srv.SetLive(allClusters(h.cfg, calm))
	h.run(t, "edge-us", append(qwenRequest(""), done)...)
	if rec := chosen(); rec.Chosen != "eu-west-vllm" || rec.Reason != "weighted" {
		t.Errorf("without the queue: %s (%s); want eu-west-vllm by weight", rec.Chosen, rec.Reason)
	}
}

// TestFasterPrefillAtEqualQueue: through a real stream, with no queue
// anywhere, a request drawn to a cluster abroad moves to a nearer one
// only when that one also prefills its prompt faster; the record says
// why.
func TestFasterPrefillAtEqualQueue(t *testing.T) {
	calm := live.Cluster{TTFT: 0.05, TTFTKnown: true, FirstTokensPerSecond: 10, PressureKnown: true, Serving: 2, PrefillPerToken: 1e-4}
	tests := []struct {
		name    string
		drawn   float64 // eu-west-vllm's prefill time per token (the draw's)
		near    float64 // us-east-vllm's (edge-us's own region)
		to      string
		reason  string
		explain string
	}{
		{"nearer and faster: moved", 2e-4, 1e-4, "us-east-vllm", "balanced", "eu-west-vllm and us-east-vllm would begin it alike, in 0 ms (the queue ahead), and us-east-vllm is nearer and prefills this prompt sooner"},
		{"nearer but slower: the draw stands", 1e-4, 2e-4, "eu-west-vllm", "weighted", ""},
		{"nearer, as fast: the draw stands", 1e-4, 1e-4, "eu-west-vllm", "weighted", ""},
		{"the drawn one's speed unknown: moved to the measured one", 0, 1e-4, "us-east-vllm", "balanced", "(11 ms against not measured there)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, true)
			publishQwen(t, h, weights.ShedFractions{})
			ls := allClusters(h.cfg, calm)
			for name, p := range map[string]float64{"eu-west-vllm": tt.drawn, "us-east-vllm": tt.near} {
				c := ls.Clusters[name]
				c.PrefillPerToken = p
				ls.Clusters[name] = c
			}
			h.srv.SetLive(ls)
			// The draw (4242) falls on eu-west-vllm.
			h.run(t, "edge-us", append(qwenRequest(""), respHeaders(":status", "200"))...)
			rec, ok := h.srv.Decisions().Get("req-1")
			if !ok {
				t.Fatal("no record")
			}
			if rec.Chosen != tt.to || rec.Reason != tt.reason || !strings.Contains(rec.Redrawn, tt.explain) {
				t.Errorf("chosen %s (%s, %q); want %s (%s) saying %q", rec.Chosen, rec.Reason, rec.Redrawn, tt.to, tt.reason, tt.explain)
			}
		})
	}
}

// TestSlowPrefillMovesWithinTarget: through a real stream, a request
// drawn to a cluster whose engines would prefill its prompt past the
// TTFT target (controller.capacity.ttft_target, 2 s by default) goes to
// one that gives it within the target, with nothing queued anywhere;
// the record says why. When every cluster would miss it, the draw stands.
func TestSlowPrefillMovesWithinTarget(t *testing.T) {
	h := start(t, true)
	publishQwen(t, h, weights.ShedFractions{})
	// The others queue a request per replica (0.2 s at 10 first tokens a
	// second): longer than the drawn one's queue, so balancing keeps the
	// request, and the move within the target takes it.
	calm := live.Cluster{TTFT: 0.05, TTFTKnown: true, FirstTokensPerSecond: 10, PressureKnown: true, Serving: 2, PrefillPerToken: 1e-4, Waiting: 2}
	ls := allClusters(h.cfg, calm)
	slow := ls.Clusters["eu-west-vllm"]
	slow.PrefillPerToken = 0.1 // 100 prompt tokens or so: 10 s
	slow.Waiting = 0
	ls.Clusters["eu-west-vllm"] = slow
	h.srv.SetLive(ls)
	done := respHeaders(":status", "200")
	// The draw (4242) falls on eu-west-vllm.
	h.run(t, "edge-us", append(qwenRequest(""), done)...)
	rec, ok := h.srv.Decisions().Get("req-1")
	if !ok {
		t.Fatal("no record")
	}
	if rec.Chosen == "eu-west-vllm" || rec.Reason != decision.ReasonWithinTarget || !strings.Contains(rec.Redrawn, "eu-west-vllm would give its first token in about") ||
		!strings.Contains(rec.Redrawn, "past the 2000 ms TTFT target") || !strings.Contains(rec.Redrawn, "2 other clusters would give it within the target") {
		t.Errorf("eu-west-vllm prefilling past the target: %s (%s, %q); want moved within the target, saying why", rec.Chosen, rec.Reason, rec.Redrawn)
	}
	for _, c := range []string{"us-east-vllm", "eu-west-tgi"} {
		cl := ls.Clusters[c]
		cl.PrefillPerToken = 0.1
		ls.Clusters[c] = cl
	}
	h.srv.SetLive(ls)
	h.run(t, "edge-us", append(qwenRequest(""), done)...)
	if rec, _ := h.srv.Decisions().Get("req-1"); rec.Chosen != "eu-west-vllm" || rec.Reason != decision.ReasonWeighted {
		t.Errorf("every cluster past the target: %s (%s, %q); want eu-west-vllm by weight", rec.Chosen, rec.Reason, rec.Redrawn)
	}
}

// TestAwaitingWorkBalances: balancing through real streams, by the work
// ext_proc sent and has not heard back from. With nothing awaiting, the
// draw (eu-west-tgi) stands; with one of ext_proc's requests awaiting its
// first token there (as many as its serving replicas), the next request
// drawn there goes to eu-west-vllm, which has nothing ahead, saying why;
// once the first token came, the draw stands again. A JSON response's
// headers come with its answer; an event stream's come first (vLLM and
// SGLang send them as the response starts) and its first event brings
// the first token.
func TestAwaitingWorkBalances(t *testing.T) {
	tests := []struct {
		name   string
		answer []*extprocv3.ProcessingRequest // the first request's response, up to its first token
	}{
		{"a JSON response: its headers", []*extprocv3.ProcessingRequest{respHeaders(":status", "200", "content-type", "application/json")}},
		{"a response without a content type: its headers", []*extprocv3.ProcessingRequest{respHeaders(":status", "200")}},
		{"an event stream: its first event, not its headers", []*extprocv3.ProcessingRequest{respHeaders(":status", "200", "content-type", "text/event-stream"), respChunk(sseEvents(1), false)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, true)
			// edge-eu's qwen: the fixed draw (4242) falls in eu-west-tgi's
			// [0, 5000).
			publishCells(t, h, func(source, model string, cell *weights.Cell) {
				if source == "edge-eu" && model == "qwen2.5-7b-instruct" {
					cell.Targets = []weights.Target{{Cluster: "eu-west-tgi", Weight: 5000}, {Cluster: "eu-west-vllm", Weight: 5000}}
				}
			})
			// eu-west-tgi serves one replica, eu-west-vllm four: the
			// requests balanced there (three at most) leave it a free one.
			l := allClusters(h.cfg, live.Cluster{PressureKnown: true, Serving: 1})
			l.Clusters["eu-west-vllm"] = live.Cluster{PressureKnown: true, Serving: 4}
			h.srv.SetLive(l)
			held, rec := sendLongPrompt(t, h, "first")
			if rec.Chosen != "eu-west-tgi" || rec.Reason != "weighted" {
				t.Fatalf("nothing awaiting: %s (%s, %q); want eu-west-tgi by weight", rec.Chosen, rec.Reason, rec.Redrawn)
			}
			balanced := func(when string) {
				t.Helper()
				if _, rec := sendLongPrompt(t, h, "next-"+when); rec.Chosen != "eu-west-vllm" || rec.Reason != "balanced" || !strings.Contains(rec.Redrawn, "eu-west-tgi would begin it in") || !strings.Contains(rec.Redrawn, "eu-west-vllm in 0 ms") {
					t.Fatalf("one awaiting at eu-west-tgi (%s): %s (%s, %q); want balanced to eu-west-vllm, saying why", when, rec.Chosen, rec.Reason, rec.Redrawn)
				}
			}
			balanced("before any answer")
			for i, m := range tt.answer {
				if i > 0 { // the answer so far does not bring the first token
					balanced(fmt.Sprintf("after %d of its messages", i))
				}
				if _, err := exchangeOne(t, held, m); err != nil {
					t.Fatal(err)
				}
			}
			if _, rec := sendLongPrompt(t, h, "after"); rec.Chosen != "eu-west-tgi" || rec.Reason != "weighted" {
				t.Errorf("after the first token: %s (%s, %q); want eu-west-tgi by weight", rec.Chosen, rec.Reason, rec.Redrawn)
			}
		})
	}
}

// sendLongPrompt sends edge-eu's request id for qwen-7b with a prompt of
// 40,000 bytes, leaves its stream open (awaiting its response) and
// returns the stream and the request's decision record.
func sendLongPrompt(t *testing.T, h *harness, id string) (extprocv3.ExternalProcessor_ProcessClient, decision.Record) {
	t.Helper()
	st, _ := openStream(t, h, "edge-eu")
	for _, m := range []*extprocv3.ProcessingRequest{
		reqHeaders(false, ":method", "POST", ":path", "/v1/chat/completions", ":authority", "ilb", header.RequestID, id),
		reqBody(`{"model":"qwen-7b","max_tokens":10,"messages":[{"role":"user","content":"` + strings.Repeat("x", 40000) + `"}]}`),
	} {
		if _, err := exchangeOne(t, st, m); err != nil {
			t.Fatal(err)
		}
	}
	rec, ok := h.srv.Decisions().Get(id)
	if !ok {
		t.Fatalf("no record %s", id)
	}
	return st, rec
}

// TestAwaitingPromptsBound: with the clusters' prefill speed measured,
// the wait of ext_proc's own requests awaiting a first token is at most
// their prompts' prefill there (route.Signal.Prompt), through real
// streams: a request of some 10,000 prompt tokens awaiting at
// eu-west-tgi, prefilled at 10 µs a token, puts 100 ms ahead of the
// next, however much its whole cost would take at the planned capacity.
func TestAwaitingPromptsBound(t *testing.T) {
	h := start(t, true)
	publishCells(t, h, func(source, model string, cell *weights.Cell) {
		if source == "edge-eu" && model == "qwen2.5-7b-instruct" {
			cell.Targets = []weights.Target{{Cluster: "eu-west-tgi", Weight: 5000}, {Cluster: "eu-west-vllm", Weight: 5000}}
		}
	})
	h.srv.SetLive(allClusters(h.cfg, live.Cluster{PressureKnown: true, Serving: 1, PrefillPerToken: 1e-5}))
	send := func(id string) decision.Record {
		t.Helper()
		_, rec := sendLongPrompt(t, h, id)
		return rec
	}
	first := send("first")
	if first.Chosen != "eu-west-tgi" || first.PromptTokens <= 0 {
		t.Fatalf("nothing awaiting: %s (prompt %d); want eu-west-tgi, with a prompt estimate", first.Chosen, first.PromptTokens)
	}
	want := fmt.Sprintf("eu-west-tgi would begin it in %.0f ms", 1000*float64(first.PromptTokens)*1e-5)
	if rec := send("second"); rec.Chosen != "eu-west-vllm" || rec.Reason != "balanced" || !strings.Contains(rec.Redrawn, want) {
		t.Errorf("one awaiting at eu-west-tgi: %s (%s, %q); want balanced to eu-west-vllm, saying %q", rec.Chosen, rec.Reason, rec.Redrawn, want)
	}
}

// TestBalancingToSpillTargets: clusters the weights give nothing but the
// source may reach are in the record as spill targets, and a request
// whose drawn cluster's engines queue goes to one of them, named for
// Envoy.
func TestBalancingToSpillTargets(t *testing.T) {
	h := start(t, true)
	publishCells(t, h, func(source, model string, cell *weights.Cell) {
		if source == "edge-us" && model == "llama-3.1-8b-instruct" {
			cell.Targets = []weights.Target{{Cluster: "us-east-vllm", Weight: weights.Total}}
		}
	})
	ls := allClusters(h.cfg, live.Cluster{TTFT: 0.05, TTFTKnown: true, FirstTokensPerSecond: 10, PressureKnown: true, Serving: 2})
	slow := ls.Clusters["us-east-vllm"]
	slow.TTFT = 30                                  // seconds
	slow.Waiting, slow.FirstTokensPerSecond = 80, 2 // a queue of 40 s
	ls.Clusters["us-east-vllm"] = slow
	h.srv.SetLive(ls)
	resps := h.run(t, "edge-us", post("/v1/chat/completions"), reqBody(`{"model":"llama-3.1-8b-instruct","messages":[{"role":"user","content":"hi"}]}`))
	set := mutation(t, resps[len(resps)-1].GetRequestBody().GetResponse())
	rec, _ := h.srv.Decisions().Get("req-1")
	if rec.Reason != "balanced" || rec.Chosen == "us-east-vllm" || set[header.RouteCluster] != rec.Chosen {
		t.Fatalf("record %s (%s), %s = %q; want balanced to a spill target, named", rec.Chosen, rec.Reason, header.RouteCluster, set[header.RouteCluster])
	}
	spill := map[string]bool{}
	for _, c := range rec.Candidates {
		if c.Spill {
			spill[c.Cluster] = true
			if c.Excluded != "" || c.Weight != 0 {
				t.Errorf("spill candidate %+v", c)
			}
		}
	}
	if !spill["us-west-sglang"] || !spill["eu-west-vllm"] || len(spill) != 2 || !spill[rec.Chosen] {
		t.Errorf("spill candidates %v, chosen %s; want us-west-sglang and eu-west-vllm, the chosen among them", spill, rec.Chosen)
	}
}

// TestSpillWhenWeightedOut: when every cluster the weights give a share
// is out between two ticks, the spill targets take the requests (named
// for Envoy, the record saying why) instead of a 503 for all.
func TestSpillWhenWeightedOut(t *testing.T) {
	h := start(t, true)
	publishCells(t, h, func(source, model string, cell *weights.Cell) {
		if source == "edge-us" && model == "llama-3.1-8b-instruct" {
			cell.Targets = []weights.Target{{Cluster: "us-east-vllm", Weight: weights.Total}}
		}
	})
	ls := allClusters(h.cfg, free)
	ls.Clusters["us-east-vllm"] = live.Cluster{Excluded: "no serving replica: 3 unhealthy"}
	h.srv.SetLive(ls)
	resps := h.run(t, "edge-us", post("/v1/chat/completions"), reqBody(`{"model":"llama-3.1-8b-instruct","messages":[{"role":"user","content":"hi"}],"priority":"critical"}`))
	last := resps[len(resps)-1]
	if ir := last.GetImmediateResponse(); ir != nil {
		t.Fatalf("answered %d %s; want a spill target", ir.GetStatus().GetCode(), ir.GetBody())
	}
	set := mutation(t, last.GetRequestBody().GetResponse())
	rec, _ := h.srv.Decisions().Get("req-1")
	if rec.Chosen == "us-east-vllm" || rec.Chosen == "" || set[header.RouteCluster] != rec.Chosen {
		t.Fatalf("record chose %q, %s = %q; want a spill target, named", rec.Chosen, header.RouteCluster, set[header.RouteCluster])
	}
	if !strings.Contains(rec.Redrawn, "as is every cluster with weight: drawn among the") {
		t.Errorf("record says %q; want why a spill target took it", rec.Redrawn)
	}
	for _, c := range rec.Candidates {
		if c.Cluster == rec.Chosen && (!c.Spill || c.Weight != 0) {
			t.Errorf("chosen %+v; want a spill candidate", c)
		}
	}
}
