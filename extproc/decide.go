package extproc

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/internal/bound"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/openai"
	"github.com/ilbproject/ilb/route"
	"github.com/ilbproject/ilb/tenant"
)

// Reason codes of routed requests (decision.RoutedReasons).
const (
	reasonWeighted = decision.ReasonWeighted
	reasonSession  = decision.ReasonSession
	reasonRedrawn  = decision.ReasonRedrawn
	reasonSteered  = decision.ReasonSteered
	reasonBalanced = decision.ReasonBalanced
	reasonTarget   = decision.ReasonWithinTarget
	// reasonLocalReply: Envoy answered the request itself before ILB
	// decided (a body over envoy.request_buffer_bytes: 413).
	reasonLocalReply = "local_reply"
)

// decide resolves the model, applies the fast loop (live exclusions —
// no cluster left is 503 whatever the priority —, planned shedding,
// saturation), draws, predicts the cluster Envoy will
// take and returns the header mutation that makes Envoy route there. It
// fills x.rec. body is nil when ILB decides on headers alone.
func (s *Server) decide(x *exchange, body *openai.Body) (*extprocv3.HeaderMutation, error) {
	st, src, h, rec := x.st, x.src, &x.h, x.rec
	name := h.model
	rec.ModelFrom = "header"
	session, from := h.session, "header"
	if body != nil && body.Model != "" && h.model != "" && !st.sameModel(h.model, body.Model) {
		return nil, badRequest("model", "model_mismatch", fmt.Sprintf("header %s names the model %s but the body's \"model\" is %s: send one model, or the same in both",
			header.Model, bound.Quote(h.model, bound.Excerpt), bound.Quote(body.Model, bound.Excerpt)))
	}
	if body != nil && (body.Model != "" || h.model == "") {
		name, rec.ModelFrom = body.Model, "body"
		rec.Stream, rec.MaxTokens, rec.PromptTokens = body.Stream, body.MaxTokens, body.PromptTokens
		if session == "" {
			session, from = body.User, "user"
		}
		if session == "" {
			session, from = body.PromptCacheKey, "prompt_cache_key"
		}
	}
	if name == "" {
		name, rec.ModelFrom = src.defaultModel, "default"
	}
	rec.RequestedModel = bound.String(name, bound.Name)
	model, ok := st.models[name]
	ar := st.adapters[name]
	if !ok && ar != nil {
		model, ok, rec.Adapter = ar.model, true, ar.name
	}
	if !ok {
		return nil, &RequestError{
			Status: 404, Type: "invalid_request_error", Code: "model_not_found", Param: "model",
			Msg: fmt.Sprintf("the model %s does not exist (models: %s)", bound.Quote(name, bound.Excerpt), st.known),
		}
	}
	rec.Model = model
	if src.pool != "" && !src.poolModels[model] {
		return nil, &RequestError{
			Status: 404, Type: "invalid_request_error", Code: "model_not_found", Param: "model",
			Msg: fmt.Sprintf("the model %s is not served by this InferencePool (engine cluster %s)", bound.Quote(model, bound.Excerpt), src.pool),
		}
	}
	if src.pool != "" && ar != nil && !ar.serves(src.pool) {
		return nil, &RequestError{
			Status: 404, Type: "invalid_request_error", Code: "model_not_found", Param: "model",
			Msg: fmt.Sprintf("the LoRA adapter %s of %s is not served by this InferencePool (engine cluster %s)", bound.Quote(ar.name, bound.Excerpt), model, src.pool),
		}
	}
	c := src.cells[model]
	x.key = demand.Key{Source: src.name, Model: model, Priority: x.prio}
	if body != nil && x.h.endpoint != openai.EndpointOther && st.limits[model].TooLong(float64(body.PromptTokens)) {
		return nil, &RequestError{
			Status: 400, Type: "invalid_request_error", Code: "context_length_exceeded", Param: body.PromptField,
			Msg: fmt.Sprintf("the prompt is about %d tokens (%d bytes of %s at 4 bytes a token), more than %d times the context of %s, %.0f tokens: it cannot fit; shorten it",
				body.PromptTokens, len(body.Prompt), body.PromptField, demand.OverContext, model, st.limits[model].Context),
		}
	}
	if x.metered() {
		x.cost, x.prompt = s.tokenCost(st, model, h, body)
	}
	rec.TokenCost = x.cost
	rec.TotalWeight = c.rc.Total()

	ls := s.liveAt(x.start)
	rec.Candidates = c.annotate(ls)
	var sigs [8]route.Signal // most cells have fewer targets: no allocation
	sig := s.signals(c, ls, sigs[:0])
	if ar != nil {
		sig = ar.restrict(c, sig, sigs[:0])
	}
	var draw uint64
	if session != "" {
		draw = SessionDraw(session)
	} else {
		draw = s.opts.Rand()
	}
	req := route.Request{
		Priority: x.prio, Draw: draw, Uniform: s.uniform(), NoSteer: !s.opts.Config.ExtProc.Steering, Cost: x.cost, Prompt: x.prompt,
		Target: s.opts.Config.Controller.Capacity.TTFTTarget.Std().Seconds(),
	}
	tt := s.tenants[src.name][model]
	if tt != nil && x.metered() {
		// A tenant past its budget is refused before anything counts
		// it: it would never be served, so it is not demand either.
		hold, err := s.budgets.Reserve(x.start, rec.Tenant, requestTokens(st, model, h, body))
		if err != nil {
			s.metrics.tenants.WithLabelValues(src.name, tenant.Label(s.opts.Config.Tenants, rec.Tenant), x.prio.String(), codeBudget).Inc()
			return nil, budgetError(err)
		}
		x.budget = hold
	}
	var ts tenant.Share
	if tt != nil {
		ts = tt.Route(x.start, rec.Tenant, c.rc, &req)
	}
	d := route.Decide(c.rc, sig, req)
	if tt != nil && (c.rc.Shed()[x.prio] > 0 || d.OverShare) {
		rec.TenantDemand, rec.TenantFair, rec.TenantShed = ts.Demand, ts.Fair, ts.Fraction
	}
	if tt != nil {
		s.metrics.tenants.WithLabelValues(src.name, tenant.Label(s.opts.Config.Tenants, rec.Tenant), x.prio.String(), d.Outcome.String()).Inc()
	}
	if d.Waived > 0 {
		rec.ShedWaived, rec.ShedWaivedFirstToken, rec.ShedWaivedScale = d.Waived, d.WaivedAt, d.WaivedScale
		s.metrics.waived.WithLabelValues(src.name, model, x.prio.String()).Inc()
	}
	switch d.Outcome {
	case route.NoCapacity:
		return nil, &RequestError{
			Status: 503, Type: "service_unavailable", Code: codeNoCapacity,
			Msg: fmt.Sprintf("no engine cluster can serve %q from %q now%s; retry later", servedName(model, ar), src.name, c.noCapacityWhy(ls, ar)),
		}
	case route.Shed:
		msg := fmt.Sprintf("the fleet is over capacity: %.0f%% of %s requests for %q from %q are shed; retry later", 100*c.rc.Shed()[x.prio], x.prio, model, src.name)
		if tt != nil && rec.TenantShed != c.rc.Shed()[x.prio] {
			msg = fmt.Sprintf("the fleet is over capacity: %.0f%% of %s requests for %q from %q are shed, fairly between tenants: %s asks for %.0f%% of them, its fair share is %.0f%%, so %.0f%% of its requests are shed; retry later",
				100*c.rc.Shed()[x.prio], x.prio, model, src.name, bound.Quote(rec.Tenant, bound.Excerpt), 100*rec.TenantDemand, 100*rec.TenantFair, 100*rec.TenantShed)
		}
		return nil, &RequestError{Status: 429, Type: "rate_limit_error", Code: codeShed, RetryAfter: s.opts.Config.ExtProc.RetryAfter, Msg: msg}
	case route.Overloaded:
		if d.OverShare {
			return nil, &RequestError{
				Status: 429, Type: "rate_limit_error", Code: codeOverloaded, RetryAfter: s.opts.Config.ExtProc.RetryAfter,
				Msg: fmt.Sprintf("every cluster serving %q from %q is overloaded and tenant %s asks for %.0f%% of its %s requests, more than an equal share: %.0f%% of its requests are refused until the overload ends; retry later",
					model, src.name, bound.Quote(rec.Tenant, bound.Excerpt), 100*ts.Demand, x.prio, 100*ts.Over),
			}
		}
		return nil, &RequestError{
			Status: 429, Type: "rate_limit_error", Code: codeOverloaded, RetryAfter: s.opts.Config.ExtProc.RetryAfter,
			Msg: fmt.Sprintf("every cluster serving %q from %q is saturated and this request is sheddable; retry later", model, src.name),
		}
	}
	if session != "" {
		rec.DrawFrom, rec.Reason = "session", reasonSession
		rec.SessionHash, rec.SessionFrom = strconv.FormatUint(draw, 16), from
	} else {
		rec.DrawFrom, rec.Reason = "random", reasonWeighted
	}
	rec.Draw, rec.Slot, rec.Chosen = draw, d.Slot, c.targets[d.Chosen].Cluster
	x.cell, x.target = c, d.Chosen
	x.firstToken, x.rtt, x.decidedAt = d.FirstToken, c.rc.RTT(d.Chosen), s.opts.Now()
	if d.Redrawn {
		drawn := c.targets[d.Drawn].Cluster
		why := excludedWhy(ls, ar, drawn)
		rec.Redrawn = fmt.Sprintf("%s is excluded (%s): drawn again among %d clusters, slot %d", drawn, why, d.Remaining, d.RedrawSlot)
		if d.Spill {
			rec.Redrawn = fmt.Sprintf("%s is excluded (%s), as is every cluster with weight: drawn among the %d spill clusters the source may use, with equal odds (index %d)", drawn, why, d.Remaining, d.RedrawSlot)
		}
		rec.Reason = reasonRedrawn
	}
	if d.Kept {
		on := d.Chosen
		if d.Reached { // kept by balancing, then moved within the target
			on = d.ReachedFrom
		}
		rec.Redrawn = keptWhy(rec.Redrawn, c.targets[on].Cluster, c.targets[d.Alternative].Cluster, d.WaitFirst, d.WaitAlternative, d.PrefillFirst, d.PrefillAlternative, req.Target)
	}
	if d.Balanced {
		from, to := c.targets[d.BalancedFrom].Cluster, c.targets[d.Alternative].Cluster
		if d.Faster {
			rec.Redrawn = fasterWhy(rec.Redrawn, from, to, d.WaitFirst, d.PrefillFirst, d.PrefillAlternative)
		} else {
			rec.Redrawn = balancedWhy(rec.Redrawn, from, to, d.WaitFirst, d.WaitAlternative)
		}
		rec.Reason = reasonBalanced
	}
	if d.Reached {
		rec.Redrawn = reachedWhy(rec.Redrawn, c.targets[d.ReachedFrom].Cluster, c.targets[d.Chosen].Cluster, req.Prompt, req.Target, d.FirstAt, d.ReachAt, d.ReachAmong)
		rec.Reason = reasonTarget
	}
	if d.Steered { // graded by queue pressure, where the engines give no TTFT
		from := c.targets[d.SteeredFrom].Cluster
		var buf [steeredBytes]byte // the explanation is built here, then made a string once
		why := buf[:0]
		if rec.Redrawn != "" { // redrawn or balanced first: keep why
			why = append(append(why, rec.Redrawn...), "; then "...)
		}
		why = steeredByPressure(why, from, ls.Clusters[from].Pressure, d.Keep, d.SteerAmong, d.SteerSlot)
		rec.Redrawn = string(why)
		rec.Reason = reasonSteered
	}
	// The cluster is always named: Envoy's weighted route would draw the
	// same one only if it held the weights version decided with, and a
	// new version reaches ext_proc at once but each Envoy a moment later
	// (1.5% of requests went elsewhere while versions changed every
	// 50 ms). The model and draw headers stay: they say what the weighted
	// routes, which serve what ext_proc does not decide, would do.
	var sessionHash uint64
	if session != "" {
		sessionHash = draw
	}
	x.answer = new(verdict)
	s.pickReplica(x, body, model, ls, sessionHash)
	return x.answer.mutation(c.modelHeader, draw, c.clusterHeader[d.Chosen]), nil
}

// tokenCost estimates a request's token-cost units, its demand: prompt
// tokens from the body (else Content-Length / 4, else the default), output
// tokens from max_tokens (else the default) — both evidence from the
// client, capped by the model's limits: the prompt by its context, the
// output by max_output_tokens and what the context leaves after the
// prompt. prompt is the prompt tokens it counts.
func (s *Server) tokenCost(st *State, model string, h *hints, body *openai.Body) (cost, prompt float64) {
	lim := st.limits[model]
	prompt, ok := promptTokens(lim, h, body)
	return lim.Estimate(prompt, ok, maxTokensOf(body))
}

// requestTokens is the prompt and output tokens tokenCost counts: what a
// tenant's budget holds for the request.
func requestTokens(st *State, model string, h *hints, body *openai.Body) float64 {
	lim := st.limits[model]
	prompt, ok := promptTokens(lim, h, body)
	p, o := lim.Tokens(prompt, ok, maxTokensOf(body))
	return p + o
}

// maxTokensOf is the body's max_tokens (0 without a body).
func maxTokensOf(body *openai.Body) int {
	if body == nil {
		return 0
	}
	return body.MaxTokens
}

// promptTokens is a request's prompt length as the client's evidence
// gives it: the body's count, else Content-Length / 4 (at least 1),
// capped by the model's context; ok is false when there is neither.
func promptTokens(l demand.Limits, h *hints, body *openai.Body) (tokens float64, ok bool) {
	switch {
	case body != nil:
		return min(float64(body.PromptTokens), l.Context), true
	case h.contentLength > 0:
		return min(math.Max(1, float64(h.contentLength)/4), l.Context), true
	}
	return 0, false
}

// uniform is a random number in [0, 1).
func (s *Server) uniform() float64 { return float64(s.opts.Rand()>>11) / (1 << 53) }

// SessionDraw maps a session key to a stable draw: FNV-1a, then the
// splitmix64 finalizer so that nearby keys spread over every slot. It is
// the same in every ext_proc replica and across restarts (and what the
// routing benchmark draws with).
func SessionDraw(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	var b [8]byte
	z := binary.BigEndian.Uint64(h.Sum(b[:0]))
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// annotate returns the candidates with the live exclusions and marks of
// ls, shared by every record decided on ls (nil: the cell's own).
func (c *cell) annotate(ls *live.State) []decision.Candidate {
	if ls == nil {
		return c.candidates
	}
	if a := c.annotated.Load(); a != nil && a.live == ls {
		return a.candidates
	}
	out := append([]decision.Candidate(nil), c.candidates...)
	for i := range out {
		cl, ok := ls.Clusters[out[i].Cluster]
		if !ok {
			continue
		}
		if cl.Excluded != "" && out[i].Excluded == "" {
			out[i].Excluded = "now: " + cl.Excluded
		}
		out[i].Saturated = cl.Saturated
	}
	c.annotated.Store(&annotated{live: ls, candidates: out})
	return out
}

// signals is the live state of the cell's targets, in order, for the
// route decision, in out's memory when it has room; nil without live
// state. A target's TTFT counts
// ext_proc's own requests still awaiting their response there
// (route.PredictTTFT); its FirstTokenScale is the calibration its
// followed streaming responses taught (firstEvent).
func (s *Server) signals(c *cell, ls *live.State, out []route.Signal) []route.Signal {
	if ls == nil {
		return nil
	}
	out = slices.Grow(out[:0], len(c.targets))[:len(c.targets)]
	for i, t := range c.targets {
		var awaiting int64
		var work, prompt float64
		a := s.awaiting[t.Cluster]
		if a != nil {
			awaiting, work, prompt = a.load()
		}
		out[i] = ls.Clusters[t.Cluster].Signal(awaiting, work, prompt)
		if a != nil {
			out[i].FirstTokenScale = a.calib.Scale()
		}
	}
	return out
}

// servedName is what a request asked to be served: the adapter ar, or
// the model.
func servedName(model string, ar *adapterRoute) string {
	if ar != nil {
		return ar.name
	}
	return model
}

// excludedWhy says why cluster is excluded for a request of adapter ar
// (nil: the base model).
func excludedWhy(ls *live.State, ar *adapterRoute, cluster string) string {
	if ar != nil && !ar.serves(cluster) {
		return "it does not serve the LoRA adapter " + ar.name
	}
	if ls == nil {
		return "no live state"
	}
	return ls.Clusters[cluster].Excluded
}

// noCapacityWhy says why no target of the cell is left for a request of
// adapter ar (nil: the base model).
func (c *cell) noCapacityWhy(ls *live.State, ar *adapterRoute) string {
	if c.rc.Total() == 0 { // spill targets alone carry no weight
		return " (no cluster has capacity for it in the current weights)"
	}
	if ls == nil && ar == nil {
		return " (no cluster has capacity for it in the current weights)"
	}
	var why []string
	for _, t := range c.targets {
		if ar != nil && !ar.serves(t.Cluster) || ls != nil && ls.Clusters[t.Cluster].Excluded != "" {
			why = append(why, t.Cluster+": "+excludedWhy(ls, ar, t.Cluster))
		}
	}
	sort.Strings(why)
	return " (" + strings.Join(why, "; ") + ")"
}

// balancedWhy says why a request left from for to, the cluster that
// would begin it soonest: after what happened before (redrawn, or ""),
// the two waits compared.
func balancedWhy(before, from, to string, waitFrom, waitTo float64) string {
	why := fmt.Sprintf("%s would begin it in %.0f ms (the queue ahead: the work ILB sent there that its engines have not begun, or the queue they report), %s in %.0f ms, the soonest of the clusters the request may use, round trip included: moved there",
		from, 1000*waitFrom, to, 1000*waitTo)
	if before != "" {
		return before + "; then " + why
	}
	return why
}

// fasterWhy says why a request left from for to, whose queue ahead was
// as long (wait, seconds): to is nearer and prefills the prompt faster
// (prefill seconds on each).
func fasterWhy(before, from, to string, wait, prefillFrom, prefillTo float64) string {
	was := fmt.Sprintf("%.0f ms", 1000*prefillFrom)
	if math.IsInf(prefillFrom, 0) {
		was = "not measured there"
	}
	why := fmt.Sprintf("%s and %s would begin it alike, in %.0f ms (the queue ahead), and %s is nearer and prefills this prompt sooner (%.0f ms against %s): moved there",
		from, to, 1000*wait, to, 1000*prefillTo, was)
	if before != "" {
		return before + "; then " + why
	}
	return why
}

// reachedWhy says why a request left from, where its first token was
// predicted past the TTFT target, for to.
func reachedWhy(before, from, to string, prompt, target, fromAt, toAt float64, among int) string {
	others := fmt.Sprintf("%d other clusters would give it within the target: drawn among them", among)
	if among == 1 {
		others = "one other cluster would give it within the target"
	}
	why := fmt.Sprintf("%s would give its first token in about %.0f ms (its queue and the prefill of %.0f prompt tokens), past the %.0f ms TTFT target (controller.capacity.ttft_target); %s: %s, in about %.0f ms",
		from, 1000*fromAt, prompt, 1000*target, others, to, 1000*toAt)
	if before != "" {
		return before + "; then " + why
	}
	return why
}

// keptWhy says why a request stayed on at although to would begin it
// sooner: its prompt's prefill there is longer by more than the queue
// saves, or past the TTFT target (target seconds, 0: none) where at's is
// not.
func keptWhy(before, at, to string, waitAt, waitTo, prefillAt, prefillTo, target float64) string {
	why := fmt.Sprintf("%s would begin it in %.0f ms, %s in %.0f ms, but its engines prefill this prompt in %.0f ms against %.0f ms here: kept on %s",
		at, 1000*waitAt, to, 1000*waitTo, 1000*prefillTo, 1000*prefillAt, at)
	if target > 0 && prefillTo > target && prefillAt <= target {
		why = fmt.Sprintf("%s would begin it in %.0f ms, %s in %.0f ms, but its engines prefill this prompt in %.0f ms, past the TTFT target of %.0f ms, against %.0f ms here: kept on %s",
			at, 1000*waitAt, to, 1000*waitTo, 1000*prefillTo, 1000*target, 1000*prefillAt, at)
	}
	if before != "" {
		return before + "; then " + why
	}
	return why
}

// steeredBytes holds a steering explanation of clusters with names of
// ordinary length (a longer one grows onto the heap).
const steeredBytes = 256

// steeredByPressure appends why a request left from for a cluster with
// less queue pressure, as fmt.Sprintf("%s has %.2f queued requests per
// running one, others less: moved (probability 1 − %.2f) among %d
// clusters with less, slot %d", from, pressure, keep, among, slot) would.
func steeredByPressure(b []byte, from string, pressure, keep float64, among int, slot uint64) []byte {
	b = strconv.AppendFloat(append(append(b, from...), " has "...), pressure, 'f', 2, 64)
	b = append(b, " queued requests per running one, others less: moved (probability 1 − "...)
	b = strconv.AppendFloat(b, keep, 'f', 2, 64)
	b = strconv.AppendInt(append(b, ") among "...), int64(among), 10)
	b = strconv.AppendUint(append(b, " clusters with less, slot "...), slot, 10)
	return b
}
