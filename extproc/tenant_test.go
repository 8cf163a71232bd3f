package extproc_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/internal/promtest"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/weights"
)

// tenantRequest is a qwen request of tenant (x-ilb-tenant; "" none) with
// request id id.
func tenantRequest(id, tenant string) []*extprocv3.ProcessingRequest {
	kv := []string{":method", "POST", ":path", "/v1/chat/completions", "x-request-id", id}
	if tenant != "" {
		kv = append(kv, header.Tenant, tenant)
	}
	return []*extprocv3.ProcessingRequest{
		reqHeaders(false, kv...),
		reqBody(`{"model":"qwen-7b","max_tokens":100,"messages":[{"role":"user","content":"` + strings.Repeat("x", 400) + `"}]}`),
	}
}

// TestTenantsShedFairly: a tenant asking for three times what each of two
// others asks, while the plan sheds 30% of the priority and the engines
// confirm the overload, takes the whole shed (half its requests: the
// level is 1.17 of the others' 1, 3.5 of 5 served); the others lose
// nothing. Before the plan, the measured overload alone cuts the flood to
// an equal share, the others not at all. Through real gRPC streams.
func TestTenantsShedFairly(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	h := startWith(t, true, func(o *extproc.Options) {
		for i := range o.Config.Sources {
			o.Config.Sources[i].TrustTenantHeader = o.Config.Sources[i].Name == "edge-us"
		}
		o.Config.Tenants.Weights = []config.TenantWeight{{Name: "team-a", Weight: 1}}
		o.Rand = rng.Uint64
	})
	h.srv.SetLive(allSaturated())
	round := func(phase string, n int) map[string][2]int { // tenant -> routed, shed
		out := map[string][2]int{}
		id := 0
		for range n {
			for _, tn := range []string{"flood", "flood", "flood", "team-a", "team-b"} {
				id++
				resps := h.run(t, "edge-us", tenantRequest(fmt.Sprintf("%s-%d", phase, id), tn)...)
				c := out[tn]
				if ir := resps[len(resps)-1].GetImmediateResponse(); ir != nil {
					if ir.GetStatus().GetCode() != 429 {
						t.Fatalf("tenant %s: %d %s; want routed or 429", tn, ir.GetStatus().GetCode(), ir.GetBody())
					}
					c[1]++
				} else {
					c[0]++
				}
				out[tn] = c
			}
		}
		return out
	}
	publishQwen(t, h, weights.ShedFractions{})
	before := round("before", 20)
	for _, tn := range []string{"team-a", "team-b"} {
		if c := before[tn]; c[1] != 0 {
			t.Errorf("no plan: tenant %s had %d of %d refused; want none", tn, c[1], c[0]+c[1])
		}
	}
	// Measured overload without a plan cuts the flood to an equal share
	// (5/3 of its 3): 4/9 of its 60 requests refused.
	if c := before["flood"]; c[1] < 15 || c[1] > 40 {
		t.Errorf("no plan, measured overload: the flood had %d of %d refused; want about 4/9", c[1], c[0]+c[1])
	}
	publishQwen(t, h, weights.ShedFractions{weights.Standard: 0.3})
	got := round("during", 40)
	for _, tn := range []string{"team-a", "team-b"} {
		if c := got[tn]; c[1] != 0 {
			t.Errorf("tenant %s, at its fair share: %d of %d shed; want none", tn, c[1], c[0]+c[1])
		}
	}
	// 120 flood requests shed with probability ~0.5.
	if c := got["flood"]; c[1] < 40 || c[1] > 80 {
		t.Errorf("the flood: %d of %d shed; want about half", c[1], c[0]+c[1])
	}
	// Its records and 429s say why.
	var rec *struct{ demand, fair, shed float64 }
	for i := 1; i <= 200 && rec == nil; i++ {
		r, ok := h.srv.Decisions().Get(fmt.Sprintf("during-%d", i))
		if ok && r.Reason == "shed" {
			if r.Tenant != "flood" || r.TenantFrom != "header" {
				t.Fatalf("a shed record of tenant %q from %q; want flood from the header", r.Tenant, r.TenantFrom)
			}
			rec = &struct{ demand, fair, shed float64 }{r.TenantDemand, r.TenantFair, r.TenantShed}
		}
	}
	if rec == nil || rec.demand < 0.55 || rec.demand > 0.65 || rec.fair < 0.25 || rec.fair > 0.35 || rec.shed < 0.45 || rec.shed > 0.55 {
		t.Errorf("the flood's record: %+v; want demand ~0.6, fair share ~0.3, shed ~0.5", rec)
	}
	// Metrics: listed tenants by name, the others as "other".
	for _, c := range []struct {
		tenant, outcome string
		want            float64
	}{
		{"team-a", "routed", 60}, {"other", "routed", float64(before["team-b"][0] + before["flood"][0] + got["team-b"][0] + got["flood"][0])}, {"other", "overloaded", float64(before["flood"][1])}, {"other", "shed", float64(got["flood"][1])},
	} {
		promtest.Check(t, h.reg, "ilb_extproc_tenant_decisions_total", map[string]string{"source": "edge-us", "tenant": c.tenant, "priority": "standard", "outcome": c.outcome}, c.want)
	}
	resps := h.run(t, "edge-us", tenantRequest("last", "flood")...)
	for resps[len(resps)-1].GetImmediateResponse() == nil { // draws until one is shed
		resps = h.run(t, "edge-us", tenantRequest("last", "flood")...)
	}
	checkImmediate(t, resps[len(resps)-1].GetImmediateResponse(), 429, "shed", "", `"flood" asks for 6`)
}

// TestTenantHeaderUntrusted: a source that does not trust x-ilb-tenant
// ignores it (a client naming another tenant would take its share), and
// the record and a counter say so.
func TestTenantHeaderUntrusted(t *testing.T) {
	h := start(t, true)
	h.run(t, "edge-us", tenantRequest("req-t", "team-a")...)
	r, ok := h.srv.Decisions().Get("req-t")
	if !ok || r.Tenant != "" || r.TenantFrom != "ignored-header" {
		t.Fatalf("record tenant %q from %q (found %v); want none, from ignored-header", r.Tenant, r.TenantFrom, ok)
	}
	promtest.Check(t, h.reg, "ilb_extproc_tenant_ignored_total", map[string]string{"source": "edge-us"}, 1)
}

// served is a request of tenant whose engine answers 200 with a JSON body
// ILB does not follow (it ends with the headers): its budget keeps the
// estimate it held.
func served(id, tenant string) []*extprocv3.ProcessingRequest {
	r := tenantRequest(id, tenant)
	end := respHeaders(":status", "200", "content-type", "application/json")
	end.GetResponseHeaders().EndOfStream = true
	return append(r, end)
}

// startBudgets is the harness with edge-us trusting x-ilb-tenant and
// budgets b, split over split replicas.
func startBudgets(t *testing.T, split int, b ...config.TenantBudget) *harness {
	return startWith(t, true, func(o *extproc.Options) {
		for i := range o.Config.Sources {
			o.Config.Sources[i].TrustTenantHeader = o.Config.Sources[i].Name == "edge-us"
		}
		o.Config.Tenants.Budgets, o.Config.Tenants.BudgetSplit = b, split
	})
}

// estimate is the tokens a tenantRequest holds: its prompt estimate and
// its max_tokens, read from a record.
func estimate(t *testing.T, h *harness) float64 {
	h.run(t, "edge-us", tenantRequest("probe", "")...)
	r, ok := h.srv.Decisions().Get("probe")
	if !ok || r.PromptTokens <= 0 || r.MaxTokens != 100 {
		t.Fatalf("probe record %+v", r)
	}
	return float64(r.PromptTokens + r.MaxTokens)
}

// TestTenantBudget: through real gRPC streams, a tenant's requests are
// admitted while their tokens fit its budget per minute, then refused
// with 429 budget_exceeded, Retry-After at the minute's end and a message
// naming the budget; a request whose stream ends with no answer gives its
// hold back; another tenant is not counted; refusals are not demand.
func TestTenantBudget(t *testing.T) {
	h := startBudgets(t, 1, config.TenantBudget{Name: "team-a", TokensPerMinute: 1000}, config.TenantBudget{Name: "team-c", TokensPerMinute: 1000})
	tok := estimate(t, h)
	fits := int(1000 / tok)
	if fits < 2 {
		t.Fatalf("a request holds %v tokens: the test needs several to fit 1000", tok)
	}
	admitted := 0
	var refusal *extprocv3.ImmediateResponse
	for i := range fits + 3 {
		resps := h.run(t, "edge-us", served(fmt.Sprintf("a-%d", i), "team-a")...)
		if ir := resps[len(resps)-1].GetImmediateResponse(); ir != nil {
			refusal = ir
			break
		}
		admitted++
	}
	if admitted != fits || refusal == nil {
		t.Fatalf("%d requests of %v tokens admitted under 1000 (refusal %v); want %d, then a refusal", admitted, tok, refusal, fits)
	}
	// The harness clock is 20 s into a minute.
	checkImmediate(t, refusal, 429, "budget_exceeded", "", `tenant "team-a" has used`)
	retry := ""
	for _, o := range refusal.GetHeaders().GetSetHeaders() {
		if o.GetHeader().GetKey() == "retry-after" {
			retry = string(o.GetHeader().GetRawValue())
		}
	}
	if retry != "40" {
		t.Errorf("retry-after %q; want 40 (the minute's end)", retry)
	}
	// Another tenant is not counted.
	if resps := h.run(t, "edge-us", served("b-1", "team-b")...); resps[len(resps)-1].GetImmediateResponse() != nil {
		t.Errorf("team-b, without a budget, was refused")
	}
	// A stream that ends before any answer holds nothing: team-c's
	// budget admits as many again after fits of them.
	for i := range fits {
		h.run(t, "edge-us", tenantRequest(fmt.Sprintf("c-gone-%d", i), "team-c")...)
	}
	for i := range fits {
		if resps := h.run(t, "edge-us", served(fmt.Sprintf("c-%d", i), "team-c")...); resps[len(resps)-1].GetImmediateResponse() != nil {
			t.Fatalf("team-c's request %d refused after its earlier streams ended unanswered", i)
		}
	}
	promtest.Check(t, h.reg, "ilb_extproc_tenant_decisions_total", map[string]string{"source": "edge-us", "tenant": "other", "priority": "standard", "outcome": "budget_exceeded"}, 1)
	promtest.Check(t, h.reg, "ilb_extproc_rejections_total", map[string]string{"source": "edge-us", "status": "429", "reason": "budget_exceeded"}, 1)
	if _, ok := promtest.Value(t, h.reg, "ilb_extproc_shed_total", map[string]string{"reason": "budget_exceeded"}); ok {
		t.Error("a budget refusal counted as shed for capacity")
	}
	counts, _ := h.meter.Flush(now)
	if c := counts[demand.Key{Source: "edge-us", Model: "qwen2.5-7b-instruct", Priority: weights.Standard}]; c.Shed != 0 || c.Requests == 0 {
		t.Errorf("demand %+v; want the admitted requests and no refusal", c)
	}
}

// TestTenantBudgetTwoReplicas: two ILB replicas with budget_split 2,
// requests alternating between them, admit no more than the budget
// together.
func TestTenantBudgetTwoReplicas(t *testing.T) {
	b := config.TenantBudget{Name: "team-a", TokensPerMinute: 2000}
	a, c := startBudgets(t, 2, b), startBudgets(t, 2, b)
	tok := estimate(t, a)
	admitted := 0
	for i := range 40 {
		h := a
		if i%2 == 1 {
			h = c
		}
		if resps := h.run(t, "edge-us", served(fmt.Sprintf("r-%d", i), "team-a")...); resps[len(resps)-1].GetImmediateResponse() == nil {
			admitted++
		}
	}
	if got, want := float64(admitted)*tok, 2000.0; got > want || got < want-2*tok {
		t.Errorf("two replicas admitted %d requests of %v tokens (%v) under a budget of %v; want at most it, within a request each", admitted, tok, got, want)
	}
}

// TestTenantFloodSeenWithinATick: three tenants ask alike for a minute;
// then one triples its demand and, two ticks (10 s) later, the plan sheds
// 30% of the priority under measured overload. The table decays demand
// over the controller's tick (5 s), not its demand half-life (30 s), so
// it already sees the flood as more than its fair share and sheds it
// alone: over the 30 s demand half-life the flood's tenant was still near
// an equal share and the others lost a fifth of their requests. Through
// real gRPC streams, on an injected clock.
func TestTenantFloodSeenWithinATick(t *testing.T) {
	h, clock, at := startTenantClock(t, 9, func(o *extproc.Options) {
		o.Config.Controller.DemandHalfLife = config.Duration(30 * time.Second)
	})
	run := func(phase string, seconds int, perRound map[string]int, live func() *live.State) map[string][2]int {
		return tenantRounds(t, h, clock, phase, seconds, perRound, live)
	}
	calm := func() *live.State {
		return &live.State{At: at(), Clusters: map[string]live.Cluster{"us-east-vllm": free, "eu-west-vllm": free, "eu-west-tgi": free}}
	}
	saturated := func() *live.State { s := allSaturated(); s.At = at(); return s }
	alike := map[string]int{"flood": 2, "team-a": 2, "team-b": 2}
	if got := run("before", 60, alike, calm); got["team-a"][1]+got["team-b"][1]+got["flood"][1] != 0 {
		t.Fatalf("no plan, no overload: %v refused; want none", got)
	}
	flood := map[string]int{"flood": 6, "team-a": 2, "team-b": 2}
	run("onset", 10, flood, calm)
	publishQwen(t, h, weights.ShedFractions{weights.Standard: 0.3})
	got := run("during", 5, flood, saturated)
	for _, tn := range []string{"team-a", "team-b"} {
		if c := got[tn]; c[1] != 0 {
			t.Errorf("tenant %s, below its fair share: %d of %d shed; want none", tn, c[1], c[0]+c[1])
		}
	}
	if c := got["flood"]; c[1] < 6 {
		t.Errorf("the flood: %d of %d shed; want it to take the plan's shed", c[1], c[0]+c[1])
	}
}

// TestTenantWithinItsNoiseNotShed: through real streams on an injected
// clock, a tenant asking a fifth above the fair level on a few requests a
// second (within the noise of its count: two standard errors are ~30%) is
// served whole while a flood, clearly above, gives up what that takes;
// shed on the point estimate, it lost a sixth of its requests.
func TestTenantWithinItsNoiseNotShed(t *testing.T) {
	h, clock, at := startTenantClock(t, 11, nil)
	rates := map[string]int{"flood": 6, "team-a": 3, "team-b": 2} // requests a second
	run := func(phase string, seconds int, live func() *live.State) map[string][2]int {
		return tenantRounds(t, h, clock, phase, seconds, rates, live)
	}
	calm := func() *live.State {
		return &live.State{At: at(), Clusters: map[string]live.Cluster{"us-east-vllm": free, "eu-west-vllm": free, "eu-west-tgi": free}}
	}
	saturated := func() *live.State { s := allSaturated(); s.At = at(); return s }
	run("before", 60, calm)
	// 11 asked, 7 served: the fair level is 2.5, team-a asks 3.
	publishQwen(t, h, weights.ShedFractions{weights.Standard: 4.0 / 11})
	got := run("during", 5, saturated)
	t.Logf("served and shed per tenant: %v", got)
	for _, tn := range []string{"team-a", "team-b"} {
		if c := got[tn]; c[1] != 0 {
			t.Errorf("tenant %s, within its noise of the fair level: %d of %d shed; want none", tn, c[1], c[0]+c[1])
		}
	}
	// The flood keeps what is left, 7 − 3 − 2 = 2 of its 6 a second: two
	// thirds shed (each request drawn), at least half.
	if c := got["flood"]; 2*c[1] < c[0]+c[1] {
		t.Errorf("the flood: %d of %d shed; want it to give up what team-a keeps (two thirds)", c[1], c[0]+c[1])
	}
}

// tenantRounds sends, for seconds rounds of one simulated second each
// (clock, nanoseconds since the epoch, moves by a second after each),
// perRound[tenant] requests of the tenants flood, team-a and team-b from
// edge-us, the live state of each round from live; it returns, per
// tenant, how many were answered and how many refused.
func tenantRounds(t *testing.T, h *harness, clock *atomic.Int64, phase string, seconds int, perRound map[string]int, live func() *live.State) map[string][2]int {
	t.Helper()
	out := map[string][2]int{}
	id := 0
	for range seconds {
		h.srv.SetLive(live())
		for _, tn := range []string{"flood", "team-a", "team-b"} {
			for range perRound[tn] {
				id++
				resps := h.run(t, "edge-us", tenantRequest(fmt.Sprintf("%s-%d", phase, id), tn)...)
				c := out[tn]
				if ir := resps[len(resps)-1].GetImmediateResponse(); ir != nil {
					c[1]++
				} else {
					c[0]++
				}
				out[tn] = c
			}
		}
		clock.Add(int64(time.Second))
	}
	return out
}

// startTenantClock starts a server whose source edge-us trusts the tenant
// header, with a 5 s tick, randomness seeded by seed and an injected
// clock (nanoseconds since an epoch; at reads it), opt adjusting the
// options further (nil: none), and publishes qwen without a shed.
func startTenantClock(t *testing.T, seed uint64, opt func(*extproc.Options)) (h *harness, clock *atomic.Int64, at func() time.Time) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	clock = new(atomic.Int64)
	epoch := time.Unix(1700000000, 0)
	at = func() time.Time { return epoch.Add(time.Duration(clock.Load())) }
	h = startWith(t, true, func(o *extproc.Options) {
		for i := range o.Config.Sources {
			o.Config.Sources[i].TrustTenantHeader = o.Config.Sources[i].Name == "edge-us"
		}
		o.Config.Controller.Tick = config.Duration(5 * time.Second)
		o.Rand, o.Now = rng.Uint64, at
		if opt != nil {
			opt(o)
		}
	})
	publishQwen(t, h, weights.ShedFractions{})
	return h, clock, at
}
