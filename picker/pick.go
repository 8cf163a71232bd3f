package picker

import (
	"math"
	"time"
)

// Replica is a replica the request may go to, as ILB's signals see it.
type Replica struct {
	// Address is host:port as Envoy's EDS names it.
	Address string
	// Ramp is the share of a ready replica's capacity it counts for, in
	// (0, 1]: 1 when ready, less while it warms up. Envoy's slow start
	// does not apply to a host chosen for it, so ILB weighs a warming
	// replica's load by 1/Ramp itself.
	Ramp float64
	// Saturated: its engine reported a long queue or a full KV cache at
	// the last scrape. It only breaks ties: the scrape is up to an
	// interval old and says yes or no, and excluding saturated replicas
	// herded every request of that interval onto the few that were not
	// (in the replica benchmark, at 1.3× the fleet's capacity, a fifth
	// of the goodput was lost that way). ILB's own count of the work it
	// queued on each replica is live and graded: that is what keeps a
	// replica holding a popular prefix from being overloaded.
	Saturated bool
	// Running is the requests its engine reported running (in its batch)
	// at its last scrape, taken at ScrapedAt; the zero ScrapedAt means
	// unknown (never scraped, or its metrics are stale). Each counts
	// Request.DecodeUnit of decode work, plus the decode work of the
	// requests ILB sent it since.
	Running   float64
	ScrapedAt time.Time
	// Adapters is its engine's report of its LoRA adapters at ScrapedAt.
	Adapters Adapters
	// QueueLasting: its engine reported requests waiting (a queue its
	// step left unadmitted) at every scrape for a while (the live state's
	// capacity.LastingFor; two scrapes at the default interval), no fewer
	// at each than at the one before:
	// a queue that lasts and does not drain — the engine admits less than
	// comes —, which a burst of arrivals admitted within a few steps never
	// makes (see AdapterSpread).
	QueueLasting bool
}

// Term is one replica's side of a decision: what it holds of the prompt
// and the load it carries, from ILB's own requests in flight there.
type Term struct {
	Address string `json:"address"`
	// Cached is the prompt tokens ILB believes the replica holds in its
	// prefix cache (matched blocks × BlockTokens, at most the prompt).
	Cached int `json:"cached_tokens"`
	// Session: Cached is credited through the client's session key (the
	// prompt was not read), not through the prompt's blocks.
	Session bool `json:"session,omitempty"`
	// InFlight is ILB's requests on the replica without a response end;
	// Awaiting the prefill tokens of those still without a first token
	// (response headers).
	InFlight int   `json:"in_flight"`
	Awaiting int64 `json:"awaiting_tokens"`
	// Decode is the decode work the replica has in service, in
	// prompt-token equivalents: its engine's running requests at the last
	// scrape and ILB's requests since (Replica.Running), or ILB's own
	// requests in flight when that is more or the engine's count unknown.
	Decode float64 `json:"decode_work"`
	// Cost is the work, in prompt-token equivalents, the request adds to
	// and finds on the replica: Awaiting plus Decode plus the prompt
	// tokens not cached weighted by 1 + the shortest queue among the
	// candidates, over Ramp.
	Cost      float64 `json:"cost"`
	Saturated bool    `json:"saturated,omitempty"`
	// Adapter is the replica's adapter tier for a request of a LoRA
	// adapter (AdapterLoaded, AdapterSpread, AdapterSlotWait, AdapterBusy,
	// AdapterCached, AdapterSlot, AdapterFull); "" for the base model.
	Adapter string `json:"adapter,omitempty"`
}

// Reasons a replica was chosen.
const (
	// ReasonPrefix: the chosen replica holds more of the prompt than the
	// least-loaded one, and that cache hit outweighs its extra load.
	ReasonPrefix = "prefix"
	// ReasonLoad: the least work, with no better cache hit
	// elsewhere (including ties on the cached prefix).
	ReasonLoad = "load"
	// ReasonSession: as ReasonPrefix, for a request whose prompt ILB did
	// not read: the chosen replica served the client's session last.
	ReasonSession = "session"
	// ReasonOnly: one replica may serve.
	ReasonOnly = "only"
)

// score chooses among terms (one per candidate, Cost filled): the least
// cost, ties broken by fewer requests in flight, then by an unsaturated
// replica, then by the rotation start (a per-request draw, so equal
// replicas share requests evenly). It returns the chosen and runner-up
// indexes (-1 when there is one candidate) and the reason.
func score(terms []Term, start int) (chosen, runnerUp int, reason string) {
	n := len(terms)
	if n == 1 {
		return 0, -1, ReasonOnly
	}
	better := func(a, b int) bool { // a strictly preferred over b
		ta, tb := &terms[a], &terms[b]
		switch {
		case ta.Cost != tb.Cost:
			return ta.Cost < tb.Cost
		case ta.InFlight != tb.InFlight:
			return ta.InFlight < tb.InFlight
		}
		return !ta.Saturated && tb.Saturated
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
	reason = ReasonLoad
	if terms[chosen].Cached > minCached(terms) {
		reason = ReasonPrefix
		if terms[chosen].Session {
			reason = ReasonSession
		}
	}
	return chosen, runnerUp, reason
}

// minCached is the fewest cached tokens among the terms.
func minCached(terms []Term) int {
	m := math.MaxInt
	for i := range terms {
		m = min(m, terms[i].Cached)
	}
	return m
}

// DecodeWork estimates a request's decode work for Request.DecodeWork:
// its expected output tokens — defaultOutput, or maxTokens when the
// client caps its answer lower (a cap is a bound, not an expectation) —
// times outputCost over promptCost (the model's token costs; the
// controller's units). It is 0 when the costs are not positive.
func DecodeWork(maxTokens, defaultOutput int, promptCost, outputCost float64) float64 {
	if !(promptCost > 0) || !(outputCost > 0) {
		return 0
	}
	out := max(defaultOutput, 0)
	if maxTokens > 0 {
		out = min(out, maxTokens)
	}
	return float64(out) * outputCost / promptCost
}
