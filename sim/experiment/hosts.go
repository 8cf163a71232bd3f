package experiment

import (
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"

	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/picker"
	"github.com/ilbproject/ilb/sim/workload"
)

// HostPolicy is how the replica inside the chosen cluster is picked.
type HostPolicy string

// Host policies the replica benchmark compares.
const (
	// HostLeastRequest is Envoy's LEAST_REQUEST with two random choices
	// (the default: what ILB leaves to Envoy without replica picking).
	HostLeastRequest HostPolicy = "least_request"
	// HostRoundRobin is Envoy's ROUND_ROBIN.
	HostRoundRobin HostPolicy = "round_robin"
	// HostSessionHash is consistent hashing on the session key (Envoy's
	// RING_HASH or MAGLEV with a header hash policy): a conversation's
	// turns go to one replica while it is up; requests without a session
	// go to a random one.
	HostSessionHash HostPolicy = "session_hash"
	// HostPrefixScorer is the Gateway API Inference Extension's endpoint
	// picker with its default scorers (llm-d): 2 × queue + 2 × KV cache +
	// 3 × prefix, each in [0, 1], the highest total wins. Queue and KV
	// usage are read live from the engines (the EPP scrapes every 50 ms);
	// the prefix score is the share of the prompt's blocks its routing
	// index places on the replica, stopping at the first miss.
	HostPrefixScorer HostPolicy = "prefix_scorer"
	// HostILB is ILB's replica picker (package picker), with the state
	// ILB has: its own requests in flight and the replicas' states and
	// saturation from the last scrape.
	HostILB HostPolicy = "ilb"
)

// HostPolicies are the replica-level policies, in report order.
func HostPolicies() []HostPolicy {
	return []HostPolicy{HostLeastRequest, HostRoundRobin, HostSessionHash, HostPrefixScorer, HostILB}
}

// ParseHostPolicy checks a host policy name.
func ParseHostPolicy(s string) (HostPolicy, error) {
	for _, p := range HostPolicies() {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("unknown host policy %q: want one of %v", s, HostPolicies())
}

// blockStride is how many of a workload's 16-token prefix blocks make
// one of the picker's 64-token blocks: the chained hash of the last of
// them identifies the whole prefix up to there, as the picker's hash of
// 256 prompt bytes does.
const blockStride = picker.BlockTokens / workload.BlockTokens

// pickerBlocks coarsens a request's prefix hashes to the picker's blocks
// (into r's scratch).
func (r *runner) pickerBlocks(prefix []uint64) []uint64 {
	b := r.blockBuf[:0]
	for i := blockStride - 1; i < len(prefix) && len(b) < picker.MaxBlocks; i += blockStride {
		if picker.Hashed(i / blockStride) { // the chain's shape: dense, then sparse
			b = append(b, prefix[i])
		}
	}
	r.blockBuf = b
	return b
}

// gieBlocks coarsens a request's prefix hashes to the prefix scorer's
// blocks: 64 tokens each, dense, at most DenseBlocks (into r's scratch).
func (r *runner) gieBlocks(prefix []uint64) []uint64 {
	b := r.blockBuf[:0]
	for i := blockStride - 1; i < len(prefix) && len(b) < picker.DenseBlocks; i += blockStride {
		b = append(b, prefix[i])
	}
	r.blockBuf = b
	return b
}

// hostPick is a replica choice: the replica, the next one a retry takes
// (-1: the fallback policy decides), and ILB's booking of it.
type hostPick struct {
	replica, alt int
	ticket       picker.Ticket
	tier         string // ILB's adapter tier of the replica ("" none)
}

// pickFor picks the replica of cluster for request i by the run's host
// policy; replica -1 when none is up.
func (r *runner) pickFor(cluster, i int) hostPick {
	q := &r.reqs[i]
	switch r.opts.Policy.Hosts {
	case HostRoundRobin:
		return hostPick{replica: r.roundRobin(cluster), alt: -1}
	case HostSessionHash:
		if q.Session != "" {
			return hostPick{replica: r.sessionHash(cluster, q.Session), alt: -1}
		}
		return hostPick{replica: r.randomUp(cluster), alt: -1}
	case HostPrefixScorer:
		return hostPick{replica: r.prefixScorer(cluster, q), alt: -1}
	case HostILB:
		return r.ilbPick(cluster, q)
	}
	return hostPick{replica: r.pickHost(cluster, -1), alt: -1}
}

// up lists the replicas of cluster Envoy sends to (into r's scratch).
func (r *runner) up(cluster int) []int {
	u := r.upBuf[:0]
	for _, ri := range r.clusters[cluster].replicas {
		if r.replicas[ri].envoyUp {
			u = append(u, ri)
		}
	}
	r.upBuf = u
	return u
}

func (r *runner) roundRobin(cluster int) int {
	u := r.up(cluster)
	if len(u) == 0 {
		return -1
	}
	c := r.clusters[cluster]
	c.rr++
	return u[c.rr%len(u)]
}

func (r *runner) randomUp(cluster int) int {
	u := r.up(cluster)
	if len(u) == 0 {
		return -1
	}
	return u[r.rng.IntN(len(u))]
}

// sessionHash is rendezvous hashing of the session over the replicas up:
// like a ring, only the sessions of a replica that leaves move.
func (r *runner) sessionHash(cluster int, session string) int {
	best, bestH := -1, uint64(0)
	k := xxhash.Sum64String(session) ^ r.opts.Seed
	for _, ri := range r.up(cluster) {
		v := k ^ uint64(ri+1)*0x9e3779b97f4a7c15
		v ^= v >> 31
		v *= 0xbf58476d1ce4e5b9
		v ^= v >> 29
		if best < 0 || v > bestH {
			best, bestH = ri, v
		}
	}
	return best
}

// prefixScorer is GIE's default scheduling profile (see HostPrefixScorer).
func (r *runner) prefixScorer(cluster int, q *workload.Request) int {
	u := r.up(cluster)
	if len(u) == 0 {
		return -1
	}
	blocks := r.gieBlocks(q.Prefix)
	minQ, maxQ := math.MaxInt, 0
	for _, ri := range u {
		w := r.replicas[ri].m.Load().ReportedWaiting
		minQ, maxQ = min(minQ, w), max(maxQ, w)
	}
	best, bestScore, ties := -1, math.Inf(-1), 0
	for _, ri := range u {
		rep := r.replicas[ri]
		l := rep.m.Load()
		queue := 1.0
		if maxQ > minQ {
			queue = float64(maxQ-l.ReportedWaiting) / float64(maxQ-minQ)
		}
		prefix := 0.0
		if len(blocks) > 0 {
			prefix = float64(rep.gie.match(blocks)) / float64(len(blocks))
		}
		// GIE's profile with its LoRA affinity scorer (weight 1): 1 when
		// the adapter runs there, 0.8 when a slot is free, 0.6 when it
		// only waits there, else 0 (loraaffinity.Score).
		s := 2*queue + 2*(1-l.KVUsage) + 3*prefix
		if q.Adapter != "" {
			s += r.loraAffinity(rep, q.Adapter)
		}
		switch {
		case s > bestScore:
			best, bestScore, ties = ri, s, 1
		case s == bestScore:
			ties++
			if r.rng.IntN(ties) == 0 {
				best = ri
			}
		}
	}
	r.replicas[best].gie.record(blocks)
	return best
}

// ilbPick asks package picker, with what ILB knows — the candidates and
// the request as ext_proc builds them (live.Cluster.Candidates,
// live.PickerRequest): replicas its signals see serving (ready or
// warming, with the warm-up ramp), their saturation and running requests
// at the last scrape, its own requests' load, a session's draw from its
// key.
func (r *runner) ilbPick(cluster int, q *workload.Request) hostPick {
	c := r.clusters[cluster]
	cands := r.live[cluster].Candidates(r.candBuf[:0])
	r.candBuf = cands
	if len(cands) == 0 { // no host listed: Envoy's fallback least request
		return hostPick{replica: r.pickHost(cluster, -1), alt: -1}
	}
	p := live.Prompt{Tokens: q.Prompt, Read: true, Blocks: r.pickerBlocks(q.Prefix), Adapter: q.Adapter}
	if q.Session != "" {
		p.Session = extproc.SessionDraw(q.Session)
	}
	d, t := c.picker.Pick(cands, live.PickerRequest(r.cfg.Models[r.models[q.Model]], r.cfg.ExtProc, p, r.rng.Uint64))
	hp := hostPick{replica: r.addrs[d.Chosen.Address], alt: -1, ticket: t, tier: d.Adapter}
	if d.RunnerUp.Address != "" {
		hp.alt = r.addrs[d.RunnerUp.Address]
	}
	return hp
}

// gieIndex is the endpoint picker's approximate prefix index of one
// replica: the blocks routed there, an LRU of capacity entries. GIE's
// prefix plugin sizes it from the model server's KV cache when it can
// (autoTune, on by default: the engine's cache blocks), else 31,250 per
// pod; sized from the cache, as its users run it, it believes a replica
// holds what the engine can (at 31,250 blocks of 64 tokens it believed
// 2M tokens where the engine held 420k, over-credited and herded).
type gieIndex struct {
	held     map[uint64]uint64 // block → last use
	tick     uint64
	capacity int // blocks
}

// match counts the leading blocks held, stopping at the first miss.
func (g *gieIndex) match(blocks []uint64) int {
	for i, b := range blocks {
		if _, ok := g.held[b]; !ok {
			return i
		}
	}
	return len(blocks)
}

func (g *gieIndex) record(blocks []uint64) {
	if g.held == nil {
		g.held = map[uint64]uint64{}
	}
	for _, b := range blocks {
		g.tick++
		g.held[b] = g.tick
	}
	if len(g.held) > g.capacity+g.capacity/8 { // evict the oldest eighth at once
		cut := g.tick - uint64(g.capacity)
		for b, t := range g.held {
			if t <= cut {
				delete(g.held, b)
			}
		}
	}
}

// ReplicaFigures are a run's replica-level figures.
type ReplicaFigures struct {
	// PrefixHit is the share of the prompt tokens of completed requests
	// that the replicas' prefix caches held (not prefilled).
	PrefixHit float64 `json:"prefix_hit"`
	// Imbalance is, averaged over clusters weighted by their requests,
	// the busiest replica's completed requests over the cluster's mean
	// per replica (1: perfectly even).
	Imbalance float64 `json:"imbalance"`
	// PickerBytes is the memory ILB's replica picker estimates its
	// prefix index takes at the end of the run (host policy ilb).
	PickerBytes int64 `json:"picker_bytes,omitempty"`
	// AdapterRequests is the requests naming a LoRA adapter; AdapterMisses
	// those sent to a replica whose engine did not hold the adapter in a
	// GPU slot while another replica of the cluster did and was not
	// saturated (read live at the decision).
	AdapterRequests int `json:"adapter_requests,omitempty"`
	AdapterMisses   int `json:"adapter_misses,omitempty"`
	// AdapterCost and AdapterWait are, per completed request of an
	// adapter, the mean time its engine spent loading adapters in the
	// steps that scheduled it and the mean time it waited for an adapter
	// slot (vLLM's max_loras), in seconds.
	AdapterCost float64 `json:"adapter_cost,omitempty"`
	AdapterWait float64 `json:"adapter_wait,omitempty"`
}

func (r *runner) replicaFigures() ReplicaFigures {
	f := ReplicaFigures{AdapterRequests: r.adapterReqs, AdapterMisses: r.adapterMisses}
	if r.adapterDone > 0 {
		f.AdapterCost = r.adapterCost.Seconds() / float64(r.adapterDone)
		f.AdapterWait = r.adapterWait.Seconds() / float64(r.adapterDone)
	}
	var prompt, cached int64
	var weighted, served float64
	for _, c := range r.clusters {
		total, most := 0, 0
		for _, ri := range c.replicas {
			rep := r.replicas[ri]
			prompt += rep.promptTokens
			cached += rep.cachedTokens
			total += rep.served
			most = max(most, rep.served)
		}
		if total > 0 {
			mean := float64(total) / float64(len(c.replicas))
			weighted += float64(total) * float64(most) / mean
			served += float64(total)
		}
		if r.opts.Policy.Hosts == HostILB {
			f.PickerBytes += c.picker.Stats().Bytes
		}
	}
	if prompt > 0 {
		f.PrefixHit = float64(cached) / float64(prompt)
	}
	if served > 0 {
		f.Imbalance = weighted / served
	}
	return f
}
