// Package route is ILB's per-request decision: given one (source, model)
// cell of a weights version, the engines' live state of its clusters and
// a request's priority and draws, it says whether the request is refused
// (503 no capacity, 429 shed or overloaded) or which cluster it goes to,
// and why.
//
// It is the only implementation of that decision: ext_proc calls it for
// every request, and the routing benchmark (sim/experiment) calls it for
// every simulated one. It is pure: no clock, no randomness, no I/O — the
// caller passes the draws — so the same inputs always give the same
// decision, which is what the parity test of the two callers checks.
//
// The order of the checks is the contract (see Decide):
//
//  1. No cluster left (none in the weights, or every one excluded by the
//     live state, spill targets included) is a 503 for every priority: a
//     429 would tell the client the fleet is merely busy. When every
//     cluster with weight is excluded, the spill targets (weight 0) not
//     excluded take the requests, drawn among with equal odds.
//  2. The planned shed fraction of the request's priority, made monotone
//     (sheddable ≥ standard ≥ critical), applies only when the engines
//     confirm overload: every cluster the request may go to is overloaded
//     in the SLO's terms (Signal.Overloaded: its engines miss the TTFT
//     target while requests wait, or it is saturated) — or the cluster it
//     would go to (step 4) is. A request that would land on a cluster
//     meeting the target is routed and the plan waived — unless the plan
//     also sheds a more important priority of the cell and one of the
//     clusters is overloaded: the room on the cluster meeting the target
//     goes first to the more important requests (sheddable ones took it
//     as often as standard ones, which were shed meanwhile: in an outage
//     of the conversation trace at 0.9, 32% of planned-shed sheddable
//     requests passed while 65% of standard ones were shed). Even then,
//     the plan refuses only a request that would begin past the TTFT
//     target where it goes (see late): one predicted to begin in time is
//     routed, the plan waived (Decision.WaivedAt).
//  3. A sheddable request is refused when every cluster it may go to is
//     saturated (measured overload), whatever the plan.
//  4. The weighted draw, as Envoy's weighted_clusters takes it; drawn
//     again among the remaining clusters when the drawn one is excluded;
//     moved to the cluster that would begin the request soonest, round
//     trip included, when that is sooner (balancing: join the shortest
//     queue, by the work this router sent there and the queue the
//     engines report); then, when the cluster it is going to would give
//     its first token past the TTFT target (Request.Target) by its wait
//     and the prompt's prefill there, drawn again among the clusters
//     predicted within it (see reach).
//
// With tenants (Request.Tenanted), the planned fraction of rule 2 is the
// tenant's share of the cell's (tenant.Table: those above their weighted
// fair share first); then (2b), under measured overload as rule 2 judges
// it, a standard or sheddable request is refused with the probability that cuts
// its tenant to an equal share by weight (Request.OverShare: nothing for
// a tenant at or below it or within the noise of its demand above it,
// nor when all ask alike); and rule 3 refuses
// only the tenants asking for at least an equal share.
package route

import (
	"slices"

	"github.com/ilbproject/ilb/weights"
)

// Outcome is what happens to a request.
type Outcome uint8

// Outcomes, in the order Decide checks them.
const (
	// Routed: the request goes to Decision.Chosen.
	Routed Outcome = iota
	// NoCapacity: no cluster can serve the request now (503).
	NoCapacity
	// Shed: the planned shed fraction of its priority, confirmed by the
	// engines (429).
	Shed
	// Overloaded: sheddable, and every cluster it may go to is saturated
	// (429).
	Overloaded
)

func (o Outcome) String() string {
	switch o {
	case Routed:
		return "routed"
	case NoCapacity:
		return "no_capacity"
	case Shed:
		return "shed"
	case Overloaded:
		return "overloaded"
	}
	return "unknown"
}

// Cell is one (source, model) of a weights version, indexed for the
// request path. It is immutable once built and safe for concurrent use.
type Cell struct {
	weights  []uint64  // per target, in Envoy's list order
	rtt      []float64 // per target, seconds
	capacity []float64 // per target, token-cost units per second per replica (0: unknown)
	ends     []uint64  // ends[i] = weights[0] + … + weights[i]
	total    uint64
	shed     weights.ShedFractions
}

// Target is one cluster of a cell.
type Target struct {
	// Cluster is the engine cluster's name (not used by Decide).
	Cluster string
	// Weight is its integer weight in Envoy's weighted_clusters; 0 for a
	// cluster the source may use but the weights give nothing: Envoy's
	// draw never takes it, balancing may move a request there (a spill
	// target, named in x-ilb-route-cluster).
	Weight uint64
	// RTT is the round trip from the source to the cluster, in seconds.
	RTT float64
	// Capacity is the sustainable throughput of one of its replicas, in
	// token-cost units per second (the profile's capacity_per_replica);
	// with the work this router has in flight there (Signal.Work) it
	// gives the wait balancing compares. 0: unknown (never balanced to or
	// from).
	Capacity float64
}

// NewCell indexes a cell: targets in the order Envoy's weighted_clusters
// lists them (spill targets anywhere); shed is the controller's planned
// shed fraction per priority, made monotone here.
func NewCell(ts []Target, shed weights.ShedFractions) *Cell {
	c := &Cell{shed: Monotone(shed)}
	for _, t := range ts {
		c.weights = append(c.weights, t.Weight)
		c.rtt = append(c.rtt, max(t.RTT, 0))
		c.capacity = append(c.capacity, max(t.Capacity, 0))
		c.total += t.Weight
		c.ends = append(c.ends, c.total)
	}
	return c
}

// Len is the number of targets.
func (c *Cell) Len() int { return len(c.weights) }

// RTT is target i's round trip from the cell's source, in seconds.
func (c *Cell) RTT(i int) float64 { return c.rtt[i] }

// Total is the sum of the weights.
func (c *Cell) Total() uint64 { return c.total }

// Shed is the monotone planned shed fractions.
func (c *Cell) Shed() weights.ShedFractions { return c.shed }

// Monotone makes shedding follow importance: a priority is shed at least
// as much as any more important one (sheddable ≥ standard ≥ critical).
// The controller plans shed fractions from the demand it saw per
// priority; a priority it saw none of gets 0, which would let its first
// requests pass while more important ones are shed.
func Monotone(f weights.ShedFractions) weights.ShedFractions {
	for _, p := range weights.Priorities[1:] {
		f[p] = max(f[p], f[p-1])
	}
	return f
}

// Signal is the live state of one target cluster, from the engines'
// signals.
type Signal struct {
	// Excluded: no request may go there now (no serving replica).
	Excluded bool
	// Saturated: every serving replica has a long queue or a full KV
	// cache: measured overload.
	Saturated bool
	// Overloaded: its engines miss the TTFT target while requests wait
	// there, or it is Saturated: measured overload in the SLO's terms.
	Overloaded bool
	// Pressure is the cluster's queued requests per running request
	// (waiting / max(running, 1), summed over its serving replicas), ≥ 0;
	// by Little's law, the time a new request waits there before it is
	// admitted, in units of a request's time in service. Meaningful only
	// when PressureKnown (some serving replica's load is known).
	Pressure      float64
	PressureKnown bool
	// TTFT is the time to first token a request would get from the
	// cluster's engines now, in seconds: the larger of what its engines
	// measured over the last interval (their TTFT histogram) and the wait
	// of its queue (waiting / admission rate, Little's law), or of this
	// router's requests awaiting their first token there (PredictTTFT).
	// Meaningful when TTFTKnown; without it, graded steering by queue
	// pressure stands in for balancing's engine view (see grade).
	TTFT      float64
	TTFTKnown bool
	// QueueWait is how long the requests its engines queue take to be
	// admitted, in seconds (≥ 0): the requests waiting at its serving
	// replicas over the rate they give first tokens (Little's law), as
	// the last signals round saw them. It counts every router's requests,
	// where Work counts only this one's; 0 when no queue is known.
	QueueWait float64
	// PrefillPerToken is how long its engines take per prompt token to
	// give a first token, their queue aside, in seconds (≥ 0; 0:
	// unknown): a slower GPU, or a busier batch, shows a larger figure.
	// Balancing adds a request's prompt times it to the wait of each of
	// the two clusters it compares (see balance).
	PrefillPerToken float64
	// FirstTokenScale is how far the first tokens its engines give run
	// below this router's prediction of them (Calibration.Scale), in
	// (0, 1]; 0 counts as 1. The planned shed tests the prediction times
	// it (see late).
	FirstTokenScale float64
	// Serving is how many replicas may take requests there now.
	Serving int
	// Awaiting is how many of this router's requests await a first
	// token there (≥ 0); balancing counts their Work only while they are
	// at least as many as the serving replicas.
	Awaiting int64
	// Work is the cost of this router's requests in flight there that
	// have no first token yet, in token-cost units, as ext_proc estimated
	// each at its decision (0 ≤ Work): the work sent there and not yet
	// begun, which a burst raises request by request, an interval before
	// the engines' metrics show it. Balancing divides it by the target's
	// capacity (Target.Capacity × Serving).
	Work float64
	// Prompt is the prompt tokens of those same requests, as ext_proc
	// estimated each (0 ≤ Prompt): their prefill, at the cluster's
	// PrefillPerToken, is the other bound of the wait balancing takes
	// (see Cell.wait).
	Prompt float64
}

// PredictTTFT is a cluster's time to first token for the next request,
// in seconds: the engines' figure (engine, an interval old), or, when
// more of this router's own requests await their first token there (their
// response headers) than that figure explains, what Little's law says of
// them: awaiting / the rate at which the cluster gives first tokens. A
// burst shows here at once, an interval before the engines' metrics do.
//
// The rate is the engines' measured one (firstTokensPerSecond); when they
// gave none over the last interval (an idle-looking cluster: the signals
// saw no first token, yet requests may be on their way), it is what the
// serving replicas give at the engines' own TTFT, one prompt at a time
// each: serving / engine. Dropping the awaiting requests then made such a
// cluster look as fast as its last TTFT while several of this router's
// requests already waited there, and steering herded onto it. With
// neither a rate nor a replica, the engines' figure stands.
func PredictTTFT(engine float64, awaiting int64, firstTokensPerSecond float64, serving int) float64 {
	if awaiting <= 0 {
		return engine
	}
	rate := firstTokensPerSecond
	if !(rate > 0) && serving > 0 && engine > 0 {
		rate = float64(serving) / engine
	}
	if !(rate > 0) {
		return engine
	}
	return max(engine, float64(awaiting)/rate)
}

// Request is what the decision needs of one request.
type Request struct {
	Priority weights.Priority
	// Draw is the weighted draw, as Envoy receives it in
	// x-ilb-route-draw: random, or the session key's hash (sticky).
	Draw uint64
	// Uniform is a uniform number in [0, 1) for the planned shed.
	Uniform float64
	// NoSteer keeps the request on the cluster Envoy's draw (or the redraw
	// off an excluded cluster) picked, however loaded (extproc.steering:
	// false).
	NoSteer bool
	// Cost is the request's own estimated cost, in token-cost units
	// (≥ 0): what the tenant table counts of its tenant's demand
	// (tenant.Table.Route). Balancing leaves it out (see wait).
	Cost float64
	// Prompt is its prompt's estimated tokens (≥ 0): with each cluster's
	// Signal.PrefillPerToken, how long its prefill takes there.
	Prompt float64
	// Target is the time to first token the engines should give the
	// request, in seconds, network aside (controller.capacity.ttft_target;
	// 0: none): a request the chosen cluster cannot serve within it moves
	// to one that can (see reach).
	Target float64
	// Tenanted: ShedFraction, in [0, 1], is the planned shed fraction of
	// this request's tenant in place of the cell's for its priority: the
	// cell's spread over its tenants, those above their weighted fair
	// share first (tenant.Table.Shed). The engines must still confirm
	// the overload.
	Tenanted     bool
	ShedFraction float64
	// Heavy, when Tenanted: the tenant asks for at least an equal share,
	// by weight, of its priority's demand in the cell. Measured overload
	// (rule 3) refuses only heavy tenants' sheddable requests: a flood's
	// first, before any plan sized it.
	Heavy bool
	// OverShare, when Tenanted: the part of the tenant's requests above
	// an equal share, by weight, of its priority's demand in the cell,
	// in [0, 1) (0 for a tenant at or below it). Measured overload
	// refuses that part of a standard or sheddable tenant's requests
	// (rule 2b): a flood is cut to the others' level at once, before
	// the plan sized the overload.
	OverShare float64
}

// Decision is what Decide says of one request.
type Decision struct {
	Outcome Outcome
	// Remaining is how many targets with weight the live state leaves
	// (when Spill, how many spill targets).
	Remaining int
	// Drawn is the target Envoy's draw takes (-1 when refused before the
	// draw), and Slot the draw's slot in the cell's total weight.
	Drawn int
	Slot  uint64
	// Chosen is the target the request goes to (-1 unless Routed).
	Chosen int
	// Redrawn: Drawn is excluded; the request was drawn again, with the
	// same value, among the Remaining targets, at RedrawSlot.
	Redrawn    bool
	RedrawSlot uint64
	// Spill: every target with weight is excluded, so the Remaining
	// targets are the spill targets (weight 0), drawn among with equal
	// odds (RedrawSlot is then the index among them).
	Spill bool
	// Steered: the target chosen, SteeredFrom, whose engines give no
	// TTFT, is under more queue pressure than another; the request was
	// drawn again among the SteerAmong targets with less, at SteerSlot
	// (see grade).
	Steered bool
	// Keep is the probability the steering gave the chosen target of
	// keeping the request: k of graded steering (see grade), 1 when no
	// steering applied.
	Keep        float64
	SteeredFrom int
	SteerAmong  int
	SteerSlot   uint64
	// Compared: Alternative, the target that would begin the request
	// soonest, round trip included, was compared with the chosen one by
	// their waits, WaitFirst and WaitAlternative (seconds; see balance).
	// Balanced: it took the request from BalancedFrom (the drawn or
	// redrawn target). Compared only when some target is sooner. Faster:
	// the two waits were equal, and Alternative is nearer and prefills
	// the prompt faster (PrefillFirst and PrefillAlternative, seconds;
	// PrefillFirst +Inf when not measured).
	Compared, Balanced, Faster bool
	Alternative, BalancedFrom  int
	WaitFirst, WaitAlternative float64
	// Kept: Alternative was sooner by its queue but stayed out, its
	// prefill of the request's prompt longer by more than the queue it
	// saved: PrefillFirst and PrefillAlternative (seconds) are the
	// prompt's prefill on the chosen target and on it (also set when
	// Faster).
	Kept                             bool
	PrefillFirst, PrefillAlternative float64
	// Reached: the request's first token was predicted at FirstAt
	// seconds on ReachedFrom (the target drawn, redrawn or balanced to),
	// past Request.Target, and within it on ReachAmong others; it was
	// drawn among those, and is predicted at ReachAt on Chosen (see
	// reach).
	Reached          bool
	ReachedFrom      int
	ReachAmong       int
	FirstAt, ReachAt float64
	// OverShare: refused (Overloaded) as part of its tenant's demand
	// above an equal share, under measured overload (Request.OverShare).
	OverShare bool
	// Waived is the planned shed fraction that applied to this request's
	// draw but was not enforced (0 when none was waived): a cluster was
	// not overloaded, or, with WaivedAt > 0, the request was predicted to
	// begin within its TTFT target on Chosen, at WaivedAt seconds (see
	// late), WaivedScale the calibration (Signal.FirstTokenScale) that
	// scaled the prediction.
	Waived, WaivedAt, WaivedScale float64
	// FirstToken is the request's first token predicted on Chosen when
	// routed, in seconds from its arrival there, network aside: the wait
	// there plus the prompt's prefill, unscaled (see firstToken); 0 when
	// unknown (no live state, prompt, capacity or prefill speed). The
	// caller observes it against the first token that came
	// (Calibration.Observe).
	FirstToken float64
}

// Decide decides one request on cell c. live holds one Signal per target
// (same order), or is nil when there is no live state (signals off or
// stale): then nothing is excluded, steered or confirmed as overloaded,
// so no planned shed applies either.
func Decide(c *Cell, live []Signal, req Request) Decision {
	d := Decision{Drawn: -1, Chosen: -1, SteeredFrom: -1, Keep: 1}
	var rem []int // targets left, with weight (or the spill targets); nil when all are
	if live != nil {
		for i, w := range c.weights {
			if w > 0 && !live[i].Excluded {
				rem = append(rem, i)
			}
		}
		if len(rem) == 0 && c.total > 0 {
			// Every weighted target is out (a crash between ticks): the
			// spill targets the source may use take the requests until the
			// controller's next plan, rather than a 503 for all.
			for i, w := range c.weights {
				if w == 0 && !live[i].Excluded {
					rem = append(rem, i)
				}
			}
			d.Spill = len(rem) > 0
		}
		d.Remaining = len(rem)
	} else {
		for _, w := range c.weights {
			if w > 0 {
				d.Remaining++
			}
		}
	}
	if d.Remaining == 0 {
		d.Outcome = NoCapacity
		return d
	}
	saturated := live != nil && allSaturated(rem, live)
	f := c.shed[req.Priority]
	if req.Tenanted {
		f = req.ShedFraction
	}
	overloaded := -1 // unknown until needed: 0 no, 1 yes
	isOverloaded := func() bool {
		if overloaded < 0 {
			overloaded = 0
			if saturated || live != nil && allOverloaded(rem, live) {
				overloaded = 1
			}
		}
		return overloaded == 1
	}
	planned := f > 0 && req.Uniform < f
	over := req.Tenanted && req.Priority != weights.Critical && req.Uniform < req.OverShare
	confirmed := planned && isOverloaded() // shed unless it would begin in time (see late)
	overConfirmed := over && isOverloaded()
	if overConfirmed && !planned { // else after the plan's test (below)
		d.Outcome = Overloaded
		d.OverShare = true
		return d
	}
	if saturated && req.Priority == weights.Sheddable && (!req.Tenanted || req.Heavy) {
		d.Outcome = Overloaded
		if confirmed {
			d.Outcome = Shed // the plan's refusal, which the saturation confirms
		}
		return d
	}
	d.Slot = req.Draw % c.total
	d.Drawn, _ = slices.BinarySearch(c.ends, d.Slot+1) // first end > slot
	d.Chosen = d.Drawn
	if live == nil {
		if planned {
			d.Waived = f
		}
		return d
	}
	c.choose(&d, rem, live, req, saturated)
	shed := Decision{Outcome: Shed, Remaining: d.Remaining, Spill: d.Spill, Drawn: -1, Chosen: -1, SteeredFrom: -1, Keep: 1}
	if planned {
		// The plan applies on confirmed overload (every cluster, or the
		// one the request lands on, overloaded; or, while it sheds a more
		// important priority too, any of them: the room goes first to
		// that one) — and then only to a request that would begin late.
		ch := live[d.Chosen]
		if confirmed || ch.Overloaded || ch.Saturated || c.shedsAbove(req.Priority) && anyOverloaded(rem, live) {
			at, late := c.late(d.Chosen, live, req)
			if late {
				return shed
			}
			d.WaivedAt, d.WaivedScale = at, scale(live[d.Chosen])
		}
	}
	// A tenant's cut applies under overload every cluster confirms, or
	// if the request would land on an overloaded cluster.
	if over {
		if ch := live[d.Chosen]; overConfirmed || ch.Overloaded || ch.Saturated {
			shed.Outcome, shed.OverShare = Overloaded, true
			return shed
		}
	}
	if planned {
		d.Waived = f
	}
	if req.Prompt > 0 {
		if at, ok := c.firstToken(d.Chosen, live, req.Prompt); ok {
			d.FirstToken = at
		}
	}
	return d
}

// late reports whether a request sent to target i now would begin past
// its TTFT target there (Request.Target), and when it is predicted to
// begin (seconds; see firstToken) when not: the test a planned shed
// passes before it refuses a request (Decide, rule 2). The prediction is
// an upper bound (its wait is), so a request predicted in time would
// almost surely meet the SLO, and refusing it loses a request within the
// SLO to save a queue that is not there. With the overload flag alone,
// on bursty code-completion traffic at 0.9 of the fleet's throughput the
// plan shed 11% of the sheddable requests, and nine in ten of the ones
// it shed would have met the SLO (a run without the shed, same seed):
// the flag is an interval old, and the burst that raised it had drained.
// ILB then kept 0.977× a least-work router's goodput within the SLO
// (364.7 against 373.4 requests/s); shedding only the requests predicted
// late, 0.989× (369.3), and past saturation, where the plan matters
// most, 1.21× its own goodput with the flag alone on the Azure
// conversation trace at 1.3 (412.7 against 341.2 requests/s), with
// critical and standard requests still ahead of sheddable ones. Without
// a target, a prompt or a prediction (no capacity or prefill speed
// measured) it is late: the plan stands.
//
// The prediction is scaled by the cluster's calibration
// (Signal.FirstTokenScale, see Calibration): the upper bound brought
// down to the 0.9 quantile of the first tokens the cluster gave against
// it, so that it still bounds nine in ten.
func (c *Cell) late(i int, live []Signal, req Request) (float64, bool) {
	if !(req.Target > 0) || !(req.Prompt > 0) {
		return 0, true
	}
	at, ok := c.firstToken(i, live, req.Prompt)
	at *= scale(live[i])
	if !ok || !(at <= req.Target) {
		return 0, true
	}
	return at, false
}

// scale is l's calibration of first-token predictions, in
// [MinFirstTokenScale, 1] (1 when none, or out of range).
func scale(l Signal) float64 {
	if s := l.FirstTokenScale; s >= MinFirstTokenScale && s <= 1 {
		return s
	}
	return 1
}

func allOverloaded(idx []int, live []Signal) bool {
	for _, i := range idx {
		if !live[i].Overloaded && !live[i].Saturated {
			return false
		}
	}
	return true
}

func anyOverloaded(idx []int, live []Signal) bool {
	for _, i := range idx {
		if live[i].Overloaded || live[i].Saturated {
			return true
		}
	}
	return false
}

// shedsAbove reports whether the plan sheds a priority more important
// than p.
func (c *Cell) shedsAbove(p weights.Priority) bool {
	for _, q := range weights.Priorities[:p] {
		if c.shed[q] > 0 {
			return true
		}
	}
	return false
}

func allSaturated(idx []int, live []Signal) bool {
	for _, i := range idx {
		if !live[i].Saturated {
			return false
		}
	}
	return true
}
