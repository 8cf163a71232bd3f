package extproc

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/weights"
)

// metrics of the ext_proc service. Label values are bounded: sources and
// models come from the configuration ("unknown" otherwise), clusters from
// the weights, reasons and statuses from ILB's own codes.
type metrics struct {
	decisions  *prometheus.CounterVec
	rejections *prometheus.CounterVec
	latency    prometheus.Histogram
	mismatches *prometheus.CounterVec
	late       *prometheus.CounterVec
	streams    prometheus.Gauge
	heldBytes  prometheus.Gauge
	shed       *prometheus.CounterVec
	refused    *prometheus.CounterVec
	// priorityIgnored counts x-ilb-priority headers of sources that do not
	// trust them.
	priorityIgnored *prometheus.CounterVec
	// tenantIgnored counts x-ilb-tenant headers of sources that do not
	// trust them; tenants counts the decisions of the sources that do, by
	// tenant (its label: tenant.Label) and outcome.
	tenantIgnored, tenants *prometheus.CounterVec
	// waived counts planned sheds not enforced for want of measured
	// overload, or for a request predicted to begin in time.
	waived   *prometheus.CounterVec
	logBytes prometheus.GaugeFunc
	// idleRefused is refused{reason="idle_timeout"}, resolved once.
	idleRefused prometheus.Counter
	// Replica picking: picks by reason, prompt and cached tokens (the
	// prefix-hit estimate), served replica against chosen.
	replicaPicks, replicaPrompt, replicaCached, replicaServed *prometheus.CounterVec
	// Followed responses (follow.go): by outcome, open, and the claims
	// never booked.
	followed, unserved *prometheus.CounterVec
	following          prometheus.Gauge
}

func newMetrics(reg *prometheus.Registry, log *decision.Log) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_extproc_decisions_total",
			Help: "Requests routed by ext_proc, by source, model, chosen cluster and reason (weighted, session, redrawn, balanced, within_target, steered).",
		}, []string{"source", "model", "cluster", "reason"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_extproc_rejections_total",
			Help: "Requests ext_proc answered itself, by source, HTTP status and reason code.",
		}, []string{"source", "status", "reason"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ilb_extproc_decision_duration_seconds",
			Help:    "Time from the message that completes what ext_proc needs (headers or body) to its answer, including body parsing.",
			Buckets: []float64{5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1},
		}),
		mismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_extproc_served_mismatch_total",
			Help: "Responses served by another cluster than ext_proc chose (a fallback route, or a cluster header Envoy could not follow).",
		}, []string{"source"}),
		replicaPicks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_extproc_replica_picks_total",
			Help: "Replica choices of ILB's replica picking, by cluster and reason (prefix: a cached prefix outweighed load; session: the same, credited through the session key of a request decided on headers alone; load: least work; only: one serving replica; skipped: no live replica state, Envoy's least request chose).",
		}, []string{"cluster", "reason"}),
		replicaPrompt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_extproc_replica_prompt_tokens_total",
			Help: "Estimated prompt tokens of the requests ILB picked a replica for, by cluster.",
		}, []string{"cluster"}),
		replicaCached: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_extproc_replica_cached_tokens_total",
			Help: "Of those, the tokens ILB believes the chosen replica held in its prefix cache, by cluster: over ilb_extproc_replica_prompt_tokens_total, the prefix-hit estimate.",
		}, []string{"cluster"}),
		replicaServed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_extproc_replica_served_total",
			Help: "Responses of requests ILB picked a replica for, by cluster and whether Envoy's upstream host was the chosen replica (chosen) or another (other: a retry, or the host had left Envoy's cluster).",
		}, []string{"cluster", "served"}),
		followed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_extproc_followed_responses_total",
			Help: "Responses whose generation ILB followed to book demand past a request's provisional share, or to the first event of an event stream, by source and outcome (complete: the body's end came; confirmed: the whole estimate was generated, ILB stopped following; ended: the stream ended first, e.g. the client went away; unfollowed: over extproc.max_followed_streams, only the provisional share counted; first_event: an event stream booked whole at the decision, followed to its first event only, which brings the first token).",
		}, []string{"source", "outcome"}),
		unserved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_extproc_unserved_claim_token_cost_total",
			Help: "Token-cost units requests claimed (max_tokens, prompt) past their provisional share that no engine generated, so never counted as demand, by source.",
		}, []string{"source"}),
		following: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ilb_extproc_followed_streams",
			Help: "Responses ILB follows now (at most extproc.max_followed_streams).",
		}),
		late: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_extproc_late_total",
			Help: "Answers ext_proc gave after Envoy's message_timeout: Envoy had gone on without them (the request was routed by the fallback route).",
		}, []string{"source"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ilb_extproc_streams",
			Help: "Open ext_proc streams (one per in-flight request).",
		}),
		heldBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ilb_extproc_held_body_bytes",
			Help: "Bytes of request bodies arriving in chunks that ILB holds until their end (bounded by extproc.max_held_body_bytes).",
		}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_extproc_shed_total",
			Help: "Requests refused for capacity, by source, model, priority and reason (shed: the controller's planned shedding; overloaded: every cluster saturated; no_capacity: no cluster can serve).",
		}, []string{"source", "model", "priority", "reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_extproc_streams_refused_total",
			Help: "ext_proc streams ended by ILB: max_streams (over extproc.max_streams), idle_timeout (Envoy owed a message for extproc.stream_idle_timeout), protocol_error (messages out of order).",
		}, []string{"reason"}),
		priorityIgnored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_extproc_priority_ignored_total",
			Help: "Requests whose x-ilb-priority header was ignored: their source does not trust it (trust_priority_header).",
		}, []string{"source"}),
		tenantIgnored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_extproc_tenant_ignored_total",
			Help: "Requests whose x-ilb-tenant header was ignored: their source does not trust it (trust_tenant_header).",
		}, []string{"source"}),
		tenants: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_extproc_tenant_decisions_total",
			Help: "Decisions on the requests of sources that trust x-ilb-tenant, by source, tenant (a name listed in tenants.weights, other, or none), priority and outcome (routed, shed, overloaded, no_capacity, budget_exceeded).",
		}, []string{"source", "tenant", "priority", "outcome"}),
		waived: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_extproc_shed_waived_total",
			Help: "Requests the controller's planned shedding would have refused but ILB routed, because a cluster they may go to was not overloaded (its engines met the TTFT target, or had no queue), they were predicted to begin within the TTFT target on the cluster they went to, or no live engine state confirmed the overload, by source, model and priority.",
		}, []string{"source", "model", "priority"}),
		logBytes: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ilb_extproc_decision_log_bytes",
			Help: "Estimated memory held by the decision log (bounded by extproc.decision_log_bytes).",
		}, func() float64 { return float64(log.Bytes()) }),
	}
	for _, r := range []string{refusedMaxStreams, refusedPeerStreams, refusedIdle, refusedProtocol} {
		m.refused.WithLabelValues(r)
	}
	m.idleRefused = m.refused.WithLabelValues(refusedIdle)
	if reg != nil {
		for _, c := range []prometheus.Collector{m.decisions, m.rejections, m.latency, m.mismatches, m.late, m.streams, m.heldBytes, m.shed, m.refused, m.priorityIgnored, m.tenantIgnored, m.tenants, m.waived, m.logBytes, m.replicaPicks, m.replicaPrompt, m.replicaCached, m.replicaServed, m.followed, m.unserved, m.following} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("extproc metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *metrics) rejected(source string, re *RequestError) {
	m.rejections.WithLabelValues(source, strconv.Itoa(re.Status), re.Reason()).Inc()
}

// Reason codes of requests refused for capacity.
const (
	codeShed       = "shed"
	codeOverloaded = "overloaded"
	codeNoCapacity = "no_capacity"
	// codeBudget: the tenant's token budget is spent (not capacity:
	// never demand, not counted in ilb_extproc_shed_total).
	codeBudget = "budget_exceeded"
)

// shedding counts a request refused for capacity (shed, overloaded,
// no_capacity); other rejections are not counted here.
func (m *metrics) shedding(source string, key demand.Key, prio weights.Priority, re *RequestError) {
	switch re.Code {
	case codeShed, codeOverloaded, codeNoCapacity:
		model := key.Model
		if model == "" {
			model = "unknown"
		}
		m.shed.WithLabelValues(source, model, prio.String(), re.Code).Inc()
	}
}

// mismatchCounter is the ilb_extproc_served_mismatch_total counter of
// x's source: from the source's cache, without hashing its label again.
func (s *Server) mismatchCounter(x *exchange) prometheus.Counter {
	if x.src == nil {
		return s.metrics.mismatches.WithLabelValues(x.source)
	}
	if c := x.src.mismatched.Load(); c != nil {
		return *c
	}
	c := s.metrics.mismatches.WithLabelValues(x.source)
	x.src.mismatched.Store(&c)
	return c
}

// routedReasons are the reasons of routed requests, in the order of a
// cell's counter cache.
var routedReasons = decision.RoutedReasons

// decisionCounter is the ilb_extproc_decisions_total counter of a routed
// request: from its cell's cache, without hashing its labels again.
func (s *Server) decisionCounter(x *exchange) prometheus.Counter {
	r := slices.Index(routedReasons[:], x.rec.Reason)
	if x.cell == nil || r < 0 || x.target < 0 || x.target >= len(x.cell.targets) {
		return s.metrics.decisions.WithLabelValues(x.source, x.rec.Model, x.rec.Chosen, x.rec.Reason)
	}
	slot := &x.cell.decided[x.target*len(routedReasons)+r]
	if c := slot.Load(); c != nil {
		return *c
	}
	c := s.metrics.decisions.WithLabelValues(x.source, x.rec.Model, x.rec.Chosen, x.rec.Reason)
	slot.Store(&c)
	return c
}
