package picker

import (
	"math"
	"sync"
)

// Cluster is the replica picker of one engine cluster: what ILB believes
// each replica's prefix cache holds, and the load ILB put on it. It is
// safe for concurrent use; a decision holds its lock for a few
// microseconds (binary searches of the prompt's blocks per replica, then
// recording them on the chosen one).
type Cluster struct {
	mu          sync.Mutex
	cacheBlocks int
	replicas    map[string]*replicaState
	terms       []Term // scratch, under mu
}

type replicaState struct {
	cache    *cache
	inFlight int
	awaiting int64 // prefill tokens of the requests without a first token
	queued   int   // those requests
}

// NewCluster returns a picker whose replicas' caches hold cacheTokens
// prompt tokens each (rounded up to whole blocks; at least one block).
func NewCluster(cacheTokens int) *Cluster {
	return &Cluster{cacheBlocks: max(1, (cacheTokens+BlockTokens-1)/BlockTokens), replicas: map[string]*replicaState{}}
}

// Request is what a decision needs of a request.
type Request struct {
	// Blocks are the prompt's block hashes (AppendBlocks); empty when it
	// has no full block: then only load decides.
	Blocks []uint64
	// PromptTokens is the prompt's estimated length, >= 0.
	PromptTokens int
	// Draw rotates the order replicas are considered in, so that ties
	// are broken evenly (a random or session-derived value).
	Draw uint64
}

// Decision is the replica chosen and why.
type Decision struct {
	// Hosts are the replicas to try in order (chosen first, then the
	// runner-up, then the third best), for Envoy's override-host list:
	// a retry takes the next. Empty when there was no candidate.
	Hosts []string
	// Chosen and RunnerUp are their terms; RunnerUp.Address is "" when
	// there was one candidate.
	Chosen, RunnerUp Term
	// Reason is ReasonPrefix, ReasonLoad or ReasonOnly.
	Reason string
}

// Why the runner-up lost (Decision.Lost).
const (
	// LostMoreWork: more prefill work ahead of the first token there.
	LostMoreWork = "more_work"
	// LostTie: equal work; more requests in flight, a saturated engine,
	// or later in the rotation.
	LostTie = "tie"
)

// Lost says why the runner-up was not chosen: LostMoreWork or LostTie
// ("" without a runner-up).
func (d *Decision) Lost() string {
	switch {
	case d.RunnerUp.Address == "":
		return ""
	case d.RunnerUp.Cost > d.Chosen.Cost:
		return LostMoreWork
	}
	return LostTie
}

// Pick chooses one of candidates (at least one) for req and books the
// request on it: its blocks are recorded in the chosen replica's cache
// and its load counted until the Ticket is settled. With no candidate it
// returns a Decision with no Hosts and a Ticket that does nothing.
func (c *Cluster) Pick(candidates []Replica, req Request) (Decision, Ticket) {
	if len(candidates) == 0 {
		return Decision{}, Ticket{}
	}
	prompt := max(req.PromptTokens, 0)
	c.mu.Lock()
	defer c.mu.Unlock()
	// A cache miss's prefill delays, besides this request, the requests
	// that queue behind it, wherever it goes: at least as many as wait
	// for a first token on the least-queued replica. So the prompt tokens
	// a replica does not hold weigh 1 + that shortest queue: 1 when some
	// replica is idle (the least work ahead wins), much more when every
	// replica has a queue, when a miss spends capacity all of them wait
	// for. The shortest, not a mean or median: the queue of a replica
	// holding a hot prefix must not raise the price of leaving it, or
	// that replica would never shed its load.
	shortest := math.MaxInt
	for _, cand := range candidates {
		shortest = min(shortest, c.state(cand.Address).queued)
	}
	missWeight := 1 + float64(shortest)
	terms := c.terms[:0]
	for _, cand := range candidates {
		st := c.replicas[cand.Address]
		// A prefill computes at least a block: the prompt's tail past its
		// last full block is never in the index, and an engine recomputes
		// the last token of a prompt it holds whole.
		cached := min(st.cache.match(req.Blocks)*BlockTokens, max(prompt-BlockTokens, 0))
		ramp := cand.Ramp
		if !(ramp > 0) || ramp > 1 {
			ramp = 1
		}
		terms = append(terms, Term{
			Address: cand.Address, Cached: cached, InFlight: st.inFlight, Awaiting: st.awaiting,
			Cost: (float64(st.awaiting) + missWeight*float64(prompt-cached)) / ramp, Saturated: cand.Saturated,
		})
	}
	c.terms = terms
	chosen, runnerUp, reason := score(terms, int(req.Draw%uint64(len(terms))))
	d := Decision{Chosen: terms[chosen], Reason: reason}
	d.Hosts = append(make([]string, 0, 3), terms[chosen].Address)
	if runnerUp >= 0 {
		d.RunnerUp = terms[runnerUp]
		d.Hosts = append(d.Hosts, terms[runnerUp].Address)
		if third := thirdBest(terms, chosen, runnerUp); third >= 0 {
			d.Hosts = append(d.Hosts, terms[third].Address)
		}
	}
	st := c.replicas[d.Chosen.Address]
	st.cache.record(req.Blocks)
	uncached := int64(prompt - d.Chosen.Cached)
	st.inFlight++
	st.awaiting += uncached
	st.queued++
	return d, Ticket{c: c, st: st, awaiting: uncached}
}

// thirdBest is the term of least cost other than a and b (-1 when
// none).
func thirdBest(terms []Term, a, b int) int {
	best := -1
	for i := range terms {
		if i == a || i == b {
			continue
		}
		if best < 0 || terms[i].Cost < terms[best].Cost {
			best = i
		}
	}
	return best
}

// state returns the replica's state, created on first sight. Under mu.
func (c *Cluster) state(addr string) *replicaState {
	st := c.replicas[addr]
	if st == nil {
		st = &replicaState{cache: newCache(c.cacheBlocks)}
		c.replicas[addr] = st
	}
	return st
}

// Retain forgets every replica not in keep (left the cluster): its cache
// and its load. Tickets of requests still on it settle harmlessly.
func (c *Cluster) Retain(keep func(address string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for addr := range c.replicas {
		if !keep(addr) {
			delete(c.replicas, addr)
		}
	}
}

// Stats are a cluster picker's sizes.
type Stats struct {
	Replicas int // replicas known
	Blocks   int // blocks held, all replicas
	// Bytes estimates the memory of the caches: each block costs a map
	// entry (~40 bytes) and two ring slots (16 bytes each).
	Bytes int64
}

// Stats reports the picker's sizes.
func (c *Cluster) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{Replicas: len(c.replicas)}
	for _, st := range c.replicas {
		s.Blocks += st.cache.size()
		s.Bytes += int64(st.cache.size())*40 + int64(len(st.cache.ring))*16
	}
	return s
}

// Ticket is one request's load on its replica. FirstToken ends its
// prefill (its tokens no longer count as work ahead of others); Done
// ends it. Both are idempotent; Done without FirstToken does both. A
// Ticket belongs to its request: one goroutine at a time calls its
// methods (they lock the Cluster, not the Ticket). The zero Ticket does
// nothing.
type Ticket struct {
	c        *Cluster
	st       *replicaState
	awaiting int64
	first    bool
	done     bool
}

// FirstToken notes the request's first response bytes.
func (t *Ticket) FirstToken() {
	if t.c == nil || t.first || t.done {
		return
	}
	t.c.mu.Lock()
	t.st.awaiting -= t.awaiting
	t.st.queued--
	t.c.mu.Unlock()
	t.first = true
}

// Done notes the request's end.
func (t *Ticket) Done() {
	if t.c == nil || t.done {
		return
	}
	t.c.mu.Lock()
	if !t.first {
		t.st.awaiting -= t.awaiting
		t.st.queued--
	}
	t.st.inFlight--
	t.c.mu.Unlock()
	t.done = true
}
