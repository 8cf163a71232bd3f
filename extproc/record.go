package extproc

import (
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
// the response headers come back; readers get copies.
type Log struct {
	mu   sync.Mutex
	ring []*Record
	next int
	byID map[string]*Record
}

// NewLog returns a log of size records (>= 1).
func NewLog(size int) *Log {
	return &Log{ring: make([]*Record, max(size, 1)), byID: make(map[string]*Record, size)}
}

// add stores r, evicting the oldest record when full. A record with the
// id of a kept one replaces it in the index.
func (l *Log) add(r *Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if old := l.ring[l.next]; old != nil && l.byID[old.RequestID] == old {
		delete(l.byID, old.RequestID)
	}
	l.ring[l.next] = r
	l.next = (l.next + 1) % len(l.ring)
	l.byID[r.RequestID] = r
}

// update applies f to the kept record r under the log's lock; records
// already evicted are updated harmlessly.
func (l *Log) update(r *Record, f func(*Record)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(r)
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
func (l *Log) Recent(n int) []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Record
	for i := 1; i <= len(l.ring) && len(out) < n; i++ {
		r := l.ring[(l.next-i+len(l.ring))%len(l.ring)]
		if r == nil {
			break
		}
		out = append(out, r.copy())
	}
	return out
}

func (r *Record) copy() Record {
	c := *r
	c.Candidates = append([]Candidate(nil), r.Candidates...)
	return c
}
