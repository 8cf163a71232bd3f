package picker

import "math"

// Replica is a replica the request may go to, as ILB's signals see it.
type Replica struct {
	// Address is host:port as Envoy's EDS names it.
	Address string
	// Ramp is the share of a ready replica's capacity it counts for, in
	// (0, 1]: 1 when ready, less while it warms up. Envoy's slow start
	// does not apply to a host chosen for it, so ILB weighs a warming
	// replica's load by 1/Ramp itself.
	Ramp float64
	// Saturated: its engine reports a long queue or a full KV cache.
	// Affinity never sends a request there while another replica is not.
	Saturated bool
}

// Term is one replica's side of a decision: what it holds of the prompt
// and the load it carries, from ILB's own requests in flight there.
type Term struct {
	Address string `json:"address"`
	// Cached is the prompt tokens ILB believes the replica holds in its
	// prefix cache (matched blocks × BlockTokens, at most the prompt).
	Cached int `json:"cached_tokens"`
	// InFlight is ILB's requests on the replica without a response end;
	// Awaiting the prefill tokens of those still without a first token
	// (response headers).
	InFlight int   `json:"in_flight"`
	Awaiting int64 `json:"awaiting_tokens"`
	// Cost is the prefill work, in tokens, before this request's first
	// token there: Awaiting plus the prompt tokens not cached, over Ramp.
	Cost      float64 `json:"cost"`
	Saturated bool    `json:"saturated,omitempty"`
}

// Reasons a replica was chosen.
const (
	// ReasonPrefix: the chosen replica holds more of the prompt than the
	// least-loaded one, and that cache hit outweighs its extra load.
	ReasonPrefix = "prefix"
	// ReasonLoad: the least prefill work ahead, with no better cache hit
	// elsewhere (including ties on the cached prefix).
	ReasonLoad = "load"
	// ReasonOnly: one replica may serve.
	ReasonOnly = "only"
	// ReasonSaturated: every replica is saturated; the least work wins.
	ReasonSaturated = "all_saturated"
)

// score chooses among terms (one per candidate, Cost filled): the
// least cost among the unsaturated replicas (all of them when every one
// is saturated), ties broken by fewer requests in flight, then by the
// rotation start (a per-request draw, so equal replicas share requests
// evenly). It returns the chosen and runner-up indexes (-1 when there is
// one candidate) and the reason.
func score(terms []Term, start int) (chosen, runnerUp int, reason string) {
	n := len(terms)
	if n == 1 {
		return 0, -1, ReasonOnly
	}
	allSat := true
	for i := range terms {
		if !terms[i].Saturated {
			allSat = false
			break
		}
	}
	better := func(a, b int) bool { // a strictly preferred over b
		ta, tb := &terms[a], &terms[b]
		if !allSat && ta.Saturated != tb.Saturated {
			return !ta.Saturated
		}
		if ta.Cost != tb.Cost {
			return ta.Cost < tb.Cost
		}
		return ta.InFlight < tb.InFlight
	}
	chosen, runnerUp = -1, -1
	for k := range n {
		i := (start + k) % n
		switch {
		case chosen < 0 || better(i, chosen):
			chosen, runnerUp = i, chosen
		case runnerUp < 0 || better(i, runnerUp):
			runnerUp = i
		}
	}
	switch {
	case allSat:
		reason = ReasonSaturated
	case terms[chosen].Cached > minCached(terms):
		reason = ReasonPrefix
	default:
		reason = ReasonLoad
	}
	return chosen, runnerUp, reason
}

// minCached is the fewest cached tokens among the unsaturated terms (all
// when every one is saturated).
func minCached(terms []Term) int {
	m, any := math.MaxInt, false
	for i := range terms {
		if !terms[i].Saturated {
			m, any = min(m, terms[i].Cached), true
		}
	}
	if !any {
		for i := range terms {
			m = min(m, terms[i].Cached)
		}
	}
	return m
}
