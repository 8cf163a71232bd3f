package extproc

import (
	"context"
	"sync"
	"time"

	"github.com/ilbproject/ilb/internal/bound"
)

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
	Priority       string `json:"priority"`
	// PriorityFrom says where the priority came from: "header" (a source
	// that trusts x-ilb-priority), "default" (the source's default), or
	// "ignored-header" (the client sent x-ilb-priority, which the source
	// does not trust: the default applies).
	PriorityFrom string `json:"priority_from,omitempty"`
	// SessionHash is a hash of the session key (never the key itself).
	SessionHash string `json:"session_hash,omitempty"`
	SessionFrom string `json:"session_from,omitempty"` // header, user or prompt_cache_key
	Stream      bool   `json:"stream"`
	// TokenCost is the request's estimated token-cost units, capped by
	// the model's limits.
	TokenCost float64 `json:"token_cost,omitempty"`
	// DemandBooked is how much of it counts as demand: at most an
	// ordinary request's cost until an engine accepted the request (2xx
	// response headers), then all of it.
	DemandBooked float64 `json:"demand_booked,omitempty"`
	MaxTokens    int     `json:"max_tokens,omitempty"`
	PromptTokens int     `json:"prompt_tokens_estimate,omitempty"`
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
	// to had headroom (or there was no live engine state to confirm the
	// overload). 0 when no plan applied.
	ShedWaived float64 `json:"shed_waived,omitempty"`
	// Redrawn says why the first draw's cluster was passed over.
	Redrawn string `json:"redrawn,omitempty"`
	// Reason is a short code: weighted, session, redrawn, steered, or the code of
	// a rejection (model_not_found, invalid_json, shed, overloaded,
	// no_capacity, ...).
	Reason string `json:"reason"`
	// Status is the HTTP status the client got: ILB's own for a
	// rejection, else Envoy's response status.
	Status int `json:"status,omitempty"`
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
	// size is the estimate the log counts for this record.
	size int64
}

// recordOverhead estimates a record's fixed memory: the struct, its map
// entry and ring slot; candidateOverhead one candidate's.
const (
	recordOverhead    = 640
	candidateOverhead = 96
)

// estimate is the record's approximate memory in bytes: fixed parts plus
// every string it holds.
func (r *Record) estimate() int64 {
	n := recordOverhead + len(r.RequestID) + len(r.Source) + len(r.Method) + len(r.Path) +
		len(r.RequestedModel) + len(r.Model) + len(r.Priority) + len(r.PriorityFrom) + len(r.SessionHash) + len(r.SessionFrom) +
		len(r.ModelFrom) + len(r.TraceID) + len(r.SpanID) + len(r.WeightsVersion) + len(r.DrawFrom) +
		len(r.Chosen) + len(r.Redrawn) + len(r.Reason) + len(r.ServedCluster) + len(r.ServedVersion) + len(r.UpstreamHost) + len(r.Unanswered)
	for _, c := range r.Candidates {
		n += candidateOverhead + len(c.Cluster) + len(c.Excluded)
	}
	return int64(n)
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

// Log keeps the most recent decision records, indexed by request id:
// at most a number of records and an estimated number of bytes, the
// oldest evicted first. Safe for concurrent use. A record is stored when
// ILB decides and completed when the response headers come back; readers
// get copies. Subscribers get each record once, when it completes (see
// Subscribe).
type Log struct {
	mu       sync.Mutex
	ring     []*Record // capacity: the most records kept
	head     int       // index of the oldest record kept
	n        int       // records kept
	added    uint64    // records ever stored: the sequence number of the newest
	bytes    int64     // estimated size of the records kept
	maxBytes int64
	byID     map[string]*Record
	subs     map[*Subscription]struct{}
}

// NewLog returns a log of at most size records (>= 1) and maxBytes bytes
// (an estimate of the records' memory; < 1: no byte bound).
func NewLog(size int, maxBytes int64) *Log {
	size = max(size, 1)
	return &Log{
		ring: make([]*Record, size), byID: make(map[string]*Record, min(size, 1<<16)),
		subs: map[*Subscription]struct{}{}, maxBytes: maxBytes,
	}
}

// add stores r, evicting the oldest records while the log is full in
// records or in bytes. A record with the id of a kept one replaces it in
// the index. A record added complete (ILB answered it itself) goes to the
// subscribers now. r's strings must be bounded by its producer.
func (l *Log) add(r *Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.added++
	r.Seq = l.added
	r.size = r.estimate()
	for l.n > 0 && (l.n == len(l.ring) || l.maxBytes > 0 && l.bytes+r.size > l.maxBytes) {
		l.evictOldest()
	}
	l.ring[(l.head+l.n)%len(l.ring)] = r
	l.n++
	l.bytes += r.size
	l.byID[r.RequestID] = r
	if r.Complete {
		l.publish(r)
	}
}

// evictOldest drops the oldest record. Called with l.mu held.
func (l *Log) evictOldest() {
	old := l.ring[l.head]
	l.ring[l.head] = nil
	l.head = (l.head + 1) % len(l.ring)
	l.n--
	l.bytes -= old.size
	if l.byID[old.RequestID] == old {
		delete(l.byID, old.RequestID)
	}
}

// at returns the i-th most recent record kept (0: the newest). Called with
// l.mu held; i < l.n.
func (l *Log) at(i int) *Record { return l.ring[(l.head+l.n-1-i)%len(l.ring)] }

// update applies f to the kept record r under the log's lock; records
// already evicted are updated harmlessly. When f completes r, it goes to
// the subscribers.
func (l *Log) update(r *Record, f func(*Record)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	was := r.Complete
	f(r)
	if l.byID[r.RequestID] == r { // still kept: its size counts
		size := r.estimate()
		l.bytes += size - r.size
		r.size = size
	}
	if r.Complete && !was {
		l.publish(r)
	}
}

// Bytes is the estimated size of the records kept.
func (l *Log) Bytes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes
}

// Get returns a copy of the record of a request id. The id is bounded as
// ILB bounds the ids it stores, so the id a client got back finds its
// record even when it was cut.
func (l *Log) Get(id string) (Record, bool) {
	id = bound.String(id, bound.Name)
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.byID[id]
	if !ok {
		return Record{}, false
	}
	return r.copy(), true
}

// Recent returns copies of up to n most recent records, newest first.
func (l *Log) Recent(n int) []Record { return l.Find(Filter{}, n) }

// Find returns copies of up to n most recent records that match f, newest
// first, complete or not (with f.Before, only those stored before that
// sequence number: the next page).
func (l *Log) Find(f Filter, n int) []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Record
	for i := 0; i < l.n && len(out) < n; i++ {
		r := l.at(i)
		if f.Before != 0 && r.Seq >= f.Before {
			continue
		}
		if f.Match(r) {
			out = append(out, r.copy())
		}
	}
	return out
}

// Filter selects decision records; an empty field matches every record.
type Filter struct {
	Source string
	Model  string // the canonical model
	// Cluster matches the chosen or the served cluster.
	Cluster string
	Reason  string
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
		(f.Reason == "" || r.Reason == f.Reason)
}

// DefaultSubscriptionBuffer is the buffer of a subscription when
// Subscribe is given size < 1.
const DefaultSubscriptionBuffer = 256

// Subscription receives copies of the records that complete after
// Subscribe and match its filter, in completion order. Its buffer is
// bounded: when the reader falls behind, new records are dropped (never
// the request path blocked) and counted.
type Subscription struct {
	f       Filter
	c       chan Delivery
	dropped uint64 // dropped since the last delivery; guarded by the log's lock
	log     *Log
}

// Delivery is one record of a subscription, and how many matching records
// were dropped just before it because the buffer was full.
type Delivery struct {
	Record        Record
	DroppedBefore uint64
}

// Subscribe returns a subscription to the records that complete from now
// on and match f, with a buffer of size records (< 1: the default). A
// record completes when Envoy's response headers come back, or at once
// when ILB answers the request itself (a rejection); a record whose
// response never comes (the client went away first) is kept by Find but
// never sent. When ctx is done the subscription ends: Records is closed
// and the log forgets it. No goroutine is started.
func (l *Log) Subscribe(ctx context.Context, f Filter, size int) *Subscription {
	if size < 1 {
		size = DefaultSubscriptionBuffer
	}
	s := &Subscription{f: f, c: make(chan Delivery, size), log: l}
	l.mu.Lock()
	l.subs[s] = struct{}{}
	l.mu.Unlock()
	context.AfterFunc(ctx, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.subs, s)
		close(s.c)
	})
	return s
}

// Records delivers the records; it is closed when the subscription's
// context is done.
func (s *Subscription) Records() <-chan Delivery { return s.c }

// Dropped returns how many records were dropped, because the buffer was
// full, after the last one delivered (the next delivery would carry them
// as DroppedBefore), and resets the count. A reader that has emptied the
// buffer can report them at once.
func (s *Subscription) Dropped() uint64 {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	n := s.dropped
	s.dropped = 0
	return n
}

// publish sends a copy of r to every matching subscriber without
// blocking. l.mu is held, so a subscription cannot be closed meanwhile.
func (l *Log) publish(r *Record) {
	for s := range l.subs {
		if !s.f.Match(r) {
			continue
		}
		select {
		case s.c <- Delivery{Record: r.copy(), DroppedBefore: s.dropped}:
			s.dropped = 0
		default:
			s.dropped++
		}
	}
}

func (r *Record) copy() Record {
	c := *r
	c.Candidates = append([]Candidate(nil), r.Candidates...)
	return c
}
