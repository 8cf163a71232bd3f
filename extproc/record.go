package extproc

import (
	"context"
	"sync"
	"time"
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
	// SessionHash is a hash of the session key (never the key itself).
	SessionHash string `json:"session_hash,omitempty"`
	SessionFrom string `json:"session_from,omitempty"` // header, user or prompt_cache_key
	Stream      bool   `json:"stream"`
	// TokenCost is the request's estimated token-cost units: its demand.
	TokenCost    float64 `json:"token_cost,omitempty"`
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
	// Mismatch says the served cluster is not the chosen one (Envoy had
	// another weights version, or a route without ILB's headers matched).
	Mismatch bool `json:"mismatch,omitempty"`

	// DecisionMicros is the time from the message that carried what ILB
	// needed (headers or body) to the answer, in microseconds.
	DecisionMicros int64 `json:"decision_us"`
	// TotalMillis is the time from request headers to response headers.
	TotalMillis float64 `json:"total_ms,omitempty"`
	Complete    bool    `json:"complete"`
}

// Candidate is one cluster that serves the model of a request.
type Candidate struct {
	Cluster  string  `json:"cluster"`
	Weight   uint32  `json:"weight"`
	Share    float64 `json:"share"`
	Excluded string  `json:"excluded,omitempty"`
	// Saturated: the cluster was saturated when the request came.
	Saturated bool `json:"saturated,omitempty"`
}

// Log keeps the last N decision records, indexed by request id. Safe for
// concurrent use. A record is stored when ILB decides and completed when
// the response headers come back; readers get copies. Subscribers get
// each record once, when it completes (see Subscribe).
type Log struct {
	mu    sync.Mutex
	ring  []*Record
	next  int
	added uint64 // records ever stored: the sequence number of the newest
	byID  map[string]*Record
	subs  map[*Subscription]struct{}
}

// NewLog returns a log of size records (>= 1).
func NewLog(size int) *Log {
	return &Log{
		ring: make([]*Record, max(size, 1)), byID: make(map[string]*Record, size),
		subs: map[*Subscription]struct{}{},
	}
}

// add stores r, evicting the oldest record when full. A record with the
// id of a kept one replaces it in the index. A record added complete (ILB
// answered it itself) goes to the subscribers now.
func (l *Log) add(r *Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if old := l.ring[l.next]; old != nil && l.byID[old.RequestID] == old {
		delete(l.byID, old.RequestID)
	}
	l.ring[l.next] = r
	l.next = (l.next + 1) % len(l.ring)
	l.added++
	l.byID[r.RequestID] = r
	if r.Complete {
		l.publish(r)
	}
}

// update applies f to the kept record r under the log's lock; records
// already evicted are updated harmlessly. When f completes r, it goes to
// the subscribers.
func (l *Log) update(r *Record, f func(*Record)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	was := r.Complete
	f(r)
	if r.Complete && !was {
		l.publish(r)
	}
}

// Get returns a copy of the record of a request id.
func (l *Log) Get(id string) (Record, bool) {
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
// first, complete or not.
func (l *Log) Find(f Filter, n int) []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Record
	for i := 1; i <= len(l.ring) && len(out) < n; i++ {
		r := l.ring[(l.next-i+len(l.ring))%len(l.ring)]
		if r == nil {
			break
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
