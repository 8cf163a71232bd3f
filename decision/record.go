package decision

import "time"

// Record is the decision record of one request: what ILB saw, what it
// decided and why, and what Envoy really did (from the response).
type Record struct {
	RequestID string    `json:"request_id"`
	Start     time.Time `json:"start"`
	Source    string    `json:"source"`
	Method    string    `json:"method"`
	Path      string    `json:"path"`
	// RequestedModel is the model as the client named it; Model is the
	// canonical model ILB routed (after alias resolution or the default).
	RequestedModel string `json:"requested_model,omitempty"`
	Model          string `json:"model,omitempty"`
	// Adapter is the LoRA adapter the request named (RequestedModel),
	// served on the base model Model; "" for a request of the model.
	Adapter  string `json:"adapter,omitempty"`
	Priority string `json:"priority"`
	// PriorityFrom says where the priority came from: "header" (a source
	// that trusts x-ilb-priority), "default" (the source's default), or
	// "ignored-header" (the client sent x-ilb-priority, which the source
	// does not trust: the default applies).
	PriorityFrom string `json:"priority_from,omitempty"`
	// Tenant is the request's tenant (x-ilb-tenant, from a source that
	// trusts it; "" otherwise) and TenantFrom where it came from:
	// "header", or "ignored-header" (the source does not trust it).
	Tenant     string `json:"tenant,omitempty"`
	TenantFrom string `json:"tenant_from,omitempty"`
	// TenantDemand and TenantFair are the tenant's part of its priority's
	// demand in the cell and its weighted fair share of it, and
	// TenantShed the planned shed fraction that applied to it (the
	// cell's spread over its tenants, those above their fair share
	// first); all in [0, 1], set when the source trusts the tenant
	// header and the plan sheds the priority.
	TenantDemand float64 `json:"tenant_demand,omitempty"`
	TenantFair   float64 `json:"tenant_fair,omitempty"`
	TenantShed   float64 `json:"tenant_shed,omitempty"`
	// SessionHash is a hash of the session key (never the key itself).
	SessionHash string `json:"session_hash,omitempty"`
	SessionFrom string `json:"session_from,omitempty"` // header, user or prompt_cache_key
	Stream      bool   `json:"stream"`
	// TokenCost is the request's estimated token-cost units, capped by
	// the model's limits.
	TokenCost float64 `json:"token_cost,omitempty"`
	// DemandBooked is how much of it counts as demand: at most a typical
	// request's cost at the decision (its provisional share:
	// demand.Limits.Provisional), then, if an engine accepted the
	// request, what the engine generated for it, up to TokenCost
	// (follow.go). A request refused for want of capacity (429, 503)
	// counts as a typical served request of its stream, which may be more
	// than TokenCost (demand.Limits.Refused).
	DemandBooked float64 `json:"demand_booked,omitempty"`
	// Generated is what the engine's response showed it generated, when
	// ILB followed it (nil otherwise: no claim past the provisional
	// share, or no response).
	Generated    *Generated `json:"generated,omitempty"`
	MaxTokens    int        `json:"max_tokens,omitempty"`
	PromptTokens int        `json:"prompt_tokens_estimate,omitempty"`
	// ModelFrom says where the model came from: "body" (the request
	// JSON), "header" (x-ilb-model: ILB decided without the body) or
	// "default" (the request names none: the source's default model).
	ModelFrom string `json:"model_from,omitempty"`

	// TraceID and SpanID identify the decision's OpenTelemetry span (hex,
	// W3C trace-context form); empty when tracing is off.
	TraceID string `json:"trace_id,omitempty"`
	SpanID  string `json:"span_id,omitempty"`

	WeightsVersion string      `json:"weights_version,omitempty"`
	Candidates     []Candidate `json:"candidates,omitempty"`
	Draw           uint64      `json:"draw"`
	DrawFrom       string      `json:"draw_from,omitempty"` // session or random
	Slot           uint64      `json:"slot"`                // draw % total weight
	TotalWeight    uint64      `json:"total_weight,omitempty"`
	Chosen         string      `json:"chosen,omitempty"`
	// ShedWaived is the planned shed fraction of the request's priority
	// that would have refused it but was not enforced: a cluster it may go
	// to was not overloaded (its engines met the TTFT target, or had no
	// queue), there was no live engine state to confirm the overload, or
	// the request was predicted to begin within the TTFT target on the
	// cluster it went to — then ShedWaivedFirstToken is that prediction,
	// in seconds (its wait and its prefill there, times ShedWaivedScale:
	// how far that cluster's first tokens ran below such predictions, in
	// (0, 1]). 0 when no plan applied.
	ShedWaived           float64 `json:"shed_waived,omitempty"`
	ShedWaivedFirstToken float64 `json:"shed_waived_first_token_s,omitempty"`
	ShedWaivedScale      float64 `json:"shed_waived_scale,omitempty"`
	// Redrawn says why the first draw's cluster was passed over.
	Redrawn string `json:"redrawn,omitempty"`
	// Reason is a short code: a routed reason (RoutedReasons: weighted, session,
	// redrawn, balanced, within_target, steered), the code of
	// a rejection (model_not_found, invalid_json, shed, overloaded,
	// no_capacity, ...), models (ILB's model list), or local_reply (Envoy
	// answered, Status, before ILB decided).
	Reason string `json:"reason"`
	// Status is the HTTP status the client got: ILB's own for a
	// rejection, else Envoy's response status.
	Status int `json:"status,omitempty"`
	// Replica is the replica decision inside Chosen (clusters with
	// replica picking); nil otherwise.
	Replica *ReplicaDecision `json:"replica,omitempty"`
	// Served* come back from Envoy's response headers.
	ServedCluster string `json:"served_cluster,omitempty"`
	ServedVersion string `json:"served_version,omitempty"`
	UpstreamHost  string `json:"upstream_host,omitempty"`
	// Mismatch says the served cluster is not the chosen one (a route
	// without ILB's headers matched, or Envoy could not follow the
	// cluster header).
	Mismatch bool `json:"mismatch,omitempty"`

	// Unanswered says why the record holds no answer the client got: ILB
	// answered after Envoy's message_timeout (Envoy had gone on without
	// it: a fail-open source's default weights, a fail-closed one's 503),
	// or the stream ended before the response (the client went away, or
	// Envoy stopped waiting for ILB) — or before ILB could decide. Status
	// and Served* are then not what the client saw; "" otherwise.
	Unanswered string `json:"unanswered,omitempty"`

	// DecisionMicros is the time from the message that carried what ILB
	// needed (headers or body) to the answer, in microseconds.
	DecisionMicros int64 `json:"decision_us"`
	// TotalMillis is the time from request headers to response headers.
	TotalMillis float64 `json:"total_ms,omitempty"`
	Complete    bool    `json:"complete"`

	// Seq is the record's sequence number in its log (1 for the first
	// record stored): /debug/decisions pages with before=Seq.
	Seq uint64 `json:"seq"`
	// stored is the entry the log keeps of this version (nil: not
	// stored); repEncoded the Replica its compact replica decision was
	// encoded from (versions whose Replica is the same share it).
	stored     *entry
	repEncoded *ReplicaDecision
}

// Candidate is one cluster that serves the model of a request.
type Candidate struct {
	Cluster  string  `json:"cluster"`
	Weight   uint32  `json:"weight"`
	Share    float64 `json:"share"`
	Excluded string  `json:"excluded,omitempty"`
	// Spill: weight 0 in this version, but the source may reach it:
	// Envoy's draw never takes it, steering may send a request there when
	// its engines are faster.
	Spill bool `json:"spill,omitempty"`
	// Saturated: the cluster was saturated when the request came.
	Saturated bool `json:"saturated,omitempty"`
}

// Filter selects decision records; an empty field matches every record.
type Filter struct {
	Source string
	Model  string // the canonical model
	// Cluster matches the chosen or the served cluster.
	Cluster string
	Reason  string
	// Complete keeps only complete records (answered, or ended): no
	// request still in flight.
	Complete bool
	// Before, when not 0, keeps only the records stored before this
	// sequence number (Record.Seq): paging back from the last record of
	// a page. Match does not check it.
	Before uint64
}

// Match reports whether r passes every set field of f.
func (f Filter) Match(r *Record) bool {
	return (f.Source == "" || r.Source == f.Source) &&
		(f.Model == "" || r.Model == f.Model) &&
		(f.Cluster == "" || r.Chosen == f.Cluster || r.ServedCluster == f.Cluster) &&
		(f.Reason == "" || r.Reason == f.Reason) &&
		(!f.Complete || r.Complete)
}

// matchEntry is Match on a stored entry, reading its fields in place.
func (f Filter) matchEntry(e *entry, in *interner) bool {
	return (f.Source == "" || e.is(strSource, f.Source, in)) &&
		(f.Model == "" || e.is(strModel, f.Model, in)) &&
		(f.Cluster == "" || e.is(strChosen, f.Cluster, in) || e.is(strServedCluster, f.Cluster, in)) &&
		(f.Reason == "" || e.is(strReason, f.Reason, in)) &&
		(!f.Complete || e.flags&flagComplete != 0)
}

// copy returns a copy of r that shares nothing with it but what records
// share (Replica, Generated): what subscribers get.
func (r *Record) copy() Record {
	c := *r
	c.stored, c.repEncoded = nil, nil
	c.Candidates = append([]Candidate(nil), r.Candidates...)
	return c
}

// Generated is what a followed response showed an engine generated.
type Generated struct {
	// Tokens is the output tokens: the engine's usage, else one per
	// server-sent event, else a token per 4 bytes of body.
	Tokens int64 `json:"tokens"`
	// PromptTokens is the usage's prompt tokens (0 without usage).
	PromptTokens int64 `json:"prompt_tokens,omitempty"`
	// From is where Tokens comes from: usage, events or bytes.
	From string `json:"from"`
	// Outcome is how following ended: complete (the body's end came),
	// confirmed (the whole estimate was generated; ILB stopped
	// following), ended (the stream ended first: the client went away).
	Outcome string `json:"outcome"`
}
