package picker

import (
	"math"
	"sync"
	"time"
)

// Cluster is the replica picker of one engine cluster: what ILB believes
// each replica's prefix cache holds, and the load ILB put on it. It is
// safe for concurrent use; a decision holds its lock for a few
// microseconds (binary searches of the prompt's blocks per replica, then
// recording them on the chosen one).
type Cluster struct {
	mu          sync.Mutex
	cacheBlocks int
	maxSkew     int
	cpuLoras    int // adapters an engine keeps in CPU memory (Options.MaxCPULoras)
	replicas    map[string]*replicaState
	terms       []Term   // scratch, under mu
	sessChain   []uint64 // scratch, under mu
	// shares are the adapters' shares of the requests picked for (see
	// AdapterBusy), under mu.
	shares adapterShares
}

type replicaState struct {
	cache    *cache
	inFlight int
	awaiting int64   // prefill tokens of the requests without a first token
	queued   int     // those requests
	decode   float64 // decode work of ILB's requests in flight (until Done)
	// recent is the decode work of the requests ILB sent since scraped,
	// its engine's last scrape (which could not count them yet).
	recent  float64
	scraped time.Time
	// adapters counts ILB's requests in flight by LoRA adapter (nil until
	// the first); sentAdapters are the adapters ILB sent the replica since
	// scraped (see adapterTier).
	adapters     map[string]int
	sentAdapters []string
	// recentAdapters are the adapters ILB sent the replica, most recent
	// first (at most maxSentAdapters).
	recentAdapters []string
}

// Options configure a cluster's picker.
type Options struct {
	// CacheTokens is the prompt tokens each replica's prefix cache is
	// believed to hold (rounded up to whole blocks; at least one block).
	CacheTokens int
	// MaxQueueSkew, when > 0, bounds how much longer than the shortest
	// a replica's queue (ILB's requests there without a first token) may
	// be for it to be chosen at all, whatever it holds: SGLang's router's
	// balance threshold, as a hard guard over the cost rule. 0: the cost
	// rule alone.
	MaxQueueSkew int
	// MaxCPULoras is the LoRA adapters each replica's engine keeps in CPU
	// memory (vLLM's --max-cpu-loras): an adapter ILB sent a replica is
	// AdapterCached there only while among the last MaxCPULoras distinct
	// adapters it sent it. 0 or more than maxSentAdapters: the last
	// maxSentAdapters.
	MaxCPULoras int
}

// NewCluster returns the picker of one engine cluster.
func NewCluster(o Options) *Cluster {
	blocks := max(1, (o.CacheTokens+BlockTokens-1)/BlockTokens)
	cpu := o.MaxCPULoras
	if cpu <= 0 || cpu > maxSentAdapters {
		cpu = maxSentAdapters
	}
	return &Cluster{cacheBlocks: blocks, maxSkew: max(o.MaxQueueSkew, 0), cpuLoras: cpu, replicas: map[string]*replicaState{}}
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
	// Session is a hash of the client's session key (0: none), for a
	// request whose prompt ILB did not read (Blocks is then empty; the
	// caller passes it for no other). The session stands for the prompt's
	// prefix: a replica ILB sent the session's earlier requests to holds
	// a chain of session blocks as long as the longest of them (in
	// BlockTokens), ageing in its index like prompt blocks, and is
	// credited with what it still holds of this request's chain. A
	// conversation resends its history, so its last prompt is this one's
	// prefix; a client claiming another's session earns at most what its
	// own prompt's length would.
	Session uint64
	// DecodeWork is the request's expected decode work in prompt-token
	// equivalents (its expected output tokens × the model's output token
	// cost over its prompt token cost), >= 0; DecodeUnit a typical
	// request's (what each request an engine reports running counts
	// for). See Replica.Running.
	DecodeWork, DecodeUnit float64
	// Adapter is the LoRA adapter the request uses ("" the base model):
	// only the replicas of the best adapter tier are candidates (see
	// Term.Adapter).
	Adapter string
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
	// Reason is ReasonPrefix, ReasonSession, ReasonLoad or ReasonOnly.
	Reason string
	// Adapter is the adapter tier of the chosen replica (AdapterLoaded, AdapterSpread,
	// AdapterSlotWait, AdapterBusy, AdapterCached, AdapterSlot, AdapterFull): the best any
	// candidate had; "" for a request of the base model.
	Adapter string
}

// Why the runner-up lost (Decision.Lost).
const (
	// LostMoreWork: more work there (queued prefill, decode in flight, or
	// prompt tokens not cached).
	LostMoreWork = "more_work"
	// LostInFlight: equal work, more requests in flight.
	LostInFlight = "more_in_flight"
	// LostSaturated: equal work and requests in flight, a saturated
	// engine.
	LostSaturated = "saturated"
	// LostRotation: equal in every term, later in the request's rotation
	// (equal replicas share requests evenly).
	LostRotation = "rotation"
)

// Lost says why the runner-up was not chosen, the first term of score's
// order that tells them apart: LostMoreWork, LostInFlight, LostSaturated
// or LostRotation ("" without a runner-up).
func (d *Decision) Lost() string {
	c, r := d.Chosen, d.RunnerUp
	switch {
	case r.Address == "":
		return ""
	case r.Cost > c.Cost:
		return LostMoreWork
	case r.InFlight > c.InFlight:
		return LostInFlight
	case r.Saturated && !c.Saturated:
		return LostSaturated
	}
	return LostRotation
}

// MaxHosts is the most hosts a Decision lists.
const MaxHosts = 3

// Pick chooses one of candidates (at least one) for req and books the
// request on it: its blocks are recorded in the chosen replica's cache
// and its load counted until the Ticket is settled. With no candidate it
// returns a Decision with no Hosts and a Ticket that does nothing.
func (c *Cluster) Pick(candidates []Replica, req Request) (Decision, Ticket) {
	return c.PickInto(candidates, req, make([]string, 0, MaxHosts))
}

// PickInto is Pick with the Decision's Hosts appended to hosts[:0]: a
// caller that keeps the list in memory of its own (capacity MaxHosts)
// spares Pick an allocation. hosts belongs to the Decision afterwards.
func (c *Cluster) PickInto(candidates []Replica, req Request, hosts []string) (Decision, Ticket) {
	if len(candidates) == 0 {
		return Decision{}, Ticket{}
	}
	prompt := max(req.PromptTokens, 0)
	c.mu.Lock()
	defer c.mu.Unlock()
	// The work a replica has before and beside this request: the prefill
	// of ILB's requests there still without a first token, and the decode
	// work of all its requests in flight (Dynamo's KV router weighs its
	// workers' active decode blocks the same way). Without the decode
	// term, a replica holding a prefix every new session shares (an
	// agent's instructions) took every new session while replicas that
	// did not hold it stayed idle: their prefill queues were empty, so
	// the shared prefix always outweighed them.
	//
	// A cache miss's prefill delays, besides this request, the requests
	// that queue behind it, wherever it goes: at least as many as wait
	// for a first token on the least-queued replica. So the prompt tokens
	// a replica does not hold weigh 1 + that shortest queue: 1 when some
	// replica is idle (the least work ahead wins), much more when every
	// replica has a queue, when a miss spends capacity all of them wait
	// for. The shortest, not a mean or median: the queue of a replica
	// holding a hot prefix must not raise the price of leaving it, or
	// that replica would never shed its load.
	// A request for an adapter has the replicas of its best adapter tier
	// for candidates (tier stays 0 for the base model: all are).
	// The adapter spreads beyond the replicas holding it while one of
	// those is compute-bound and either its share of the cluster's
	// requests asks for more replicas than hold it or that holder's queue
	// lasts (AdapterSpread); else a saturated holder keeps its requests
	// (AdapterBusy).
	c.shares.add(req.Adapter)
	tier, spread := 0, false
	if req.Adapter != "" {
		tier = len(adapterTiers)
		holders, bound, lasting := 0, false, false
		for _, cand := range candidates {
			st := c.state(cand.Address)
			st.scrapedAt(cand)
			if st.holds(cand, req.Adapter) {
				holders++
				if computeBound(cand.Adapters) {
					bound, lasting = true, lasting || cand.QueueLasting
				}
			}
		}
		spread = bound && (c.shares.share(req.Adapter)*float64(len(candidates)) > float64(holders) || lasting)
	}
	shortest := math.MaxInt
	for _, cand := range candidates {
		st := c.state(cand.Address)
		st.scrapedAt(cand)
		if req.Adapter != "" {
			t, _ := st.adapterTier(cand, req.Adapter, spread, c.cpuLoras)
			tier = min(tier, t)
		} else {
			shortest = min(shortest, st.queued)
		}
	}
	if req.Adapter != "" {
		for _, cand := range candidates {
			if t, _ := c.replicas[cand.Address].adapterTier(cand, req.Adapter, spread, c.cpuLoras); t == tier {
				shortest = min(shortest, c.replicas[cand.Address].queued)
			}
		}
	}
	missWeight := 1 + float64(shortest)
	// A session stands for the prefix of a prompt not read.
	blocks, bySession := req.Blocks, false
	if req.Session != 0 && len(blocks) == 0 {
		c.sessChain = sessionChain(c.sessChain[:0], req.Session, prompt/BlockTokens)
		blocks, bySession = c.sessChain, true
	}
	unit := finite(req.DecodeUnit)
	terms := c.terms[:0]
	for _, cand := range candidates {
		st := c.replicas[cand.Address]
		var at string
		if req.Adapter != "" {
			t, name := st.adapterTier(cand, req.Adapter, spread, c.cpuLoras)
			if t != tier {
				continue // a better tier has a replica
			}
			at = name
		}
		if c.maxSkew > 0 && st.queued-shortest > c.maxSkew {
			continue // the shortest queue's replica always stays
		}
		// A prefill computes at least a block: the prompt's tail past its
		// last full block is never in the index, and an engine recomputes
		// the last token of a prompt it holds whole.
		cached := min(Span(st.cache.match(blocks))*BlockTokens, max(prompt-BlockTokens, 0))
		ramp := cand.Ramp
		if !(ramp > 0) || ramp > 1 {
			ramp = 1
		}
		decode := st.decodeLoad(cand, unit)
		terms = append(terms, Term{
			Address: cand.Address, Cached: cached, Session: bySession && cached > 0, InFlight: st.inFlight, Awaiting: st.awaiting,
			Decode: decode, Cost: (float64(st.awaiting) + decode + missWeight*float64(prompt-cached)) / ramp, Saturated: cand.Saturated,
			Adapter: at,
		})
	}
	c.terms = terms
	chosen, runnerUp, reason := score(terms, int(req.Draw%uint64(len(terms))))
	d := Decision{Chosen: terms[chosen], Reason: reason}
	if req.Adapter != "" {
		d.Adapter = terms[chosen].Adapter
	}
	hosts = append(hosts[:0], terms[chosen].Address)
	d.Hosts = hosts
	if runnerUp >= 0 {
		d.RunnerUp = terms[runnerUp]
		d.Hosts = append(d.Hosts, terms[runnerUp].Address)
		if third := thirdBest(terms, chosen, runnerUp); third >= 0 {
			d.Hosts = append(d.Hosts, terms[third].Address)
		}
	}
	st := c.replicas[d.Chosen.Address]
	st.cache.record(blocks)
	uncached := int64(prompt - d.Chosen.Cached)
	decode := finite(req.DecodeWork)
	st.inFlight++
	st.awaiting += uncached
	st.queued++
	st.decode += decode
	st.recent += decode
	if req.Adapter != "" {
		st.noteAdapter(req.Adapter)
	}
	return d, Ticket{c: c, st: st, awaiting: uncached, decode: decode, adapter: req.Adapter}
}

// finite is v when it is a finite number >= 0, else 0.
func finite(v float64) float64 {
	if !(v > 0) || math.IsInf(v, 1) {
		return 0
	}
	return v
}

// decodeLoad is the decode work the replica has in service, as far as
// ILB can tell: its engine's requests running at its last scrape, at
// unit each, plus those ILB sent it since; or, when that is less (or the
// engine's count is unknown), the decode work of ILB's own requests
// whose ext_proc streams are still open. A stream ends at the first
// token when ILB follows nothing more of the response (a JSON
// response's headers, an event stream's first event), so ILB's own
// count ends there: the engine's count is what sees a request decode. A scrape newer than the last one
// seen replaces the picks counted since (it counts them itself). Under
// mu.
func (st *replicaState) decodeLoad(cand Replica, unit float64) float64 {
	if cand.ScrapedAt.IsZero() || !(cand.Running >= 0) || math.IsInf(cand.Running, 1) {
		return max(st.decode, 0)
	}
	return max(st.decode, cand.Running*unit+st.recent)
}

// scrapedAt notes the candidate's scrape: a newer one than the last seen
// counts what ILB sent before it (its decode work, its adapters). Under
// mu.
func (st *replicaState) scrapedAt(cand Replica) {
	if !cand.ScrapedAt.IsZero() && cand.ScrapedAt.After(st.scraped) {
		st.scraped, st.recent = cand.ScrapedAt, 0
		st.sentAdapters = st.sentAdapters[:0]
	}
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

// ForgetCache empties what ILB believes the replica's prefix cache holds
// (its engine may have restarted at the same address), keeping its load:
// its requests in flight still run there, or fail and settle.
func (c *Cluster) ForgetCache(address string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.replicas[address]; st != nil && st.cache.size() > 0 {
		st.cache = newCache(c.cacheBlocks)
	}
}

// Stats are a cluster picker's sizes.
type Stats struct {
	Replicas int // replicas known
	Blocks   int // blocks the hashes held cover, all replicas
	// Bytes estimates the memory of the caches: each hash costs a map
	// entry (~40 bytes) and two ring slots (24 bytes each).
	Bytes int64
}

// Stats reports the picker's sizes.
func (c *Cluster) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{Replicas: len(c.replicas)}
	for _, st := range c.replicas {
		s.Blocks += st.cache.held
		s.Bytes += int64(st.cache.size())*40 + int64(len(st.cache.ring))*24
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
	decode   float64
	adapter  string
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
	if t.adapter != "" {
		t.st.doneAdapter(t.adapter)
	}
	t.st.decode = max(t.st.decode-t.decode, 0)
	if t.st.inFlight == 0 {
		t.st.decode = 0 // no float drift once the replica is idle
	}
	t.c.mu.Unlock()
	t.done = true
}
