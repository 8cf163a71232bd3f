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
//     requests passed while 65% of standard ones were shed).
//  3. A sheddable request is refused when every cluster it may go to is
//     saturated (measured overload), whatever the plan.
//  4. The weighted draw, as Envoy's weighted_clusters takes it; drawn
//     again among the remaining clusters when the drawn one is excluded;
//     moved to the cluster that would begin the request soonest, round
//     trip included, when that is sooner (balancing: join the shortest
//     queue, by the work this router sent there and the queue the
//     engines report).
//
// With tenants (Request.Tenanted), the planned fraction of rule 2 is the
// tenant's share of the cell's (tenant.Table: those above their weighted
// fair share first); then (2b), under measured overload as rule 2 judges
// it, a standard or sheddable request is refused with the probability that cuts
// its tenant to an equal share by weight (Request.OverShare: nothing for
// a tenant at or below it, nor when all ask alike); and rule 3 refuses
// only the tenants asking for at least an equal share.
package route

import (
	"math"
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
	// Queued: requests wait there — its engines report a queue, it is
	// overloaded or saturated, or more of this router's requests await a
	// first token there than its engines' figure explains (TTFT is then
	// Little's law's). Balancing moves a request abroad only off a queued
	// cluster: at light load a move abroad on a small difference of waits
	// costs a round trip for nothing.
	Queued bool
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
	// redrawn target). Compared only when some target is sooner.
	Compared, Balanced         bool
	Alternative, BalancedFrom  int
	WaitFirst, WaitAlternative float64
	// OverShare: refused (Overloaded) as part of its tenant's demand
	// above an equal share, under measured overload (Request.OverShare).
	OverShare bool
	// Waived is the planned shed fraction that applied to this request's
	// draw but was not enforced because a cluster was not overloaded (0 when
	// none was waived).
	Waived float64
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
	if planned && isOverloaded() {
		d.Outcome = Shed
		return d
	}
	if over && isOverloaded() {
		d.Outcome = Overloaded
		d.OverShare = true
		return d
	}
	if saturated && req.Priority == weights.Sheddable && (!req.Tenanted || req.Heavy) {
		d.Outcome = Overloaded
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
	// A cluster meets the target: the plan (or a tenant's cut) applies
	// only if the request would still land on an overloaded one.
	if planned || over {
		if ch := live[d.Chosen]; ch.Overloaded || ch.Saturated {
			out := Decision{Outcome: Shed, Remaining: d.Remaining, Spill: d.Spill, Drawn: -1, Chosen: -1, SteeredFrom: -1, Keep: 1}
			if !planned {
				out.Outcome, out.OverShare = Overloaded, true
			}
			return out
		}
		if planned && c.shedsAbove(req.Priority) && anyOverloaded(rem, live) {
			// The room on the cluster that meets the target goes first to
			// the more important priority the plan also sheds.
			return Decision{Outcome: Shed, Remaining: d.Remaining, Spill: d.Spill, Drawn: -1, Chosen: -1, SteeredFrom: -1, Keep: 1}
		}
		if planned {
			d.Waived = f
		}
	}
	return d
}

// choose moves d off the drawn target when the live state says so: a
// redraw off an excluded target, then balancing and steering.
func (c *Cell) choose(d *Decision, rem []int, live []Signal, req Request, saturated bool) {
	if live[d.Chosen].Excluded {
		d.Chosen, d.RedrawSlot = c.pickAmong(rem, req.Draw)
		d.Redrawn = true
	}
	if req.NoSteer {
		return
	}
	// Nothing moves while every cluster the request may use is saturated
	// (moving it would only trade one queue for another), and graded
	// steering (grade) is never all-or-nothing: moving every draw on a
	// saturation flag an interval old herded them onto the other
	// clusters, which then filled in turn (on bursty code-completion
	// traffic it cost 2.7 points of goodput within the SLO, and made a
	// proportional plan worse than with no steering).
	if !saturated {
		c.balance(d, live)
		if !live[d.Chosen].TTFTKnown {
			c.grade(d, rem, live, req.Draw)
		}
	}
}

// balance moves the request to the target that would begin it soonest:
// every target of the cell not excluded or saturated (spill targets,
// weight 0, included) is compared with the chosen one by its wait — when
// a request sent now would begin there (see wait) — and the request goes
// to the one with the least round trip plus wait, when that one is both
// sooner (wait) and sooner round trip included (RTT + wait) than the
// chosen one. It is join-the-shortest-queue over the cell's clusters, by
// work over capacity, as least-work routers do. Where no queue is ahead
// anywhere (an idle or evenly loaded fleet) nothing moves, so the
// weights' shares stand; a burst that piles onto one cluster moves,
// request by request, to the others while their queues are shorter. The
// plan keeps a source's traffic near home while the fleet is light, so
// each region would take its own source's bursts alone, while a router
// that pools them absorbs them: a request goes abroad only while that is
// faster round trip included, and only off a queued cluster
// (Signal.Queued: the engines or this router's own count confirm a queue
// there) — a move abroad costs a round trip if the estimate is wrong
// (without that evidence, long-prompt traffic past saturation went
// abroad three times as often and kept 96.0% within the SLO against
// 99.3%).
//
// Comparing every target, not a second one drawn at random (the power of
// two choices), is what the light-load tail needed: on the Azure code
// trace at 0.2 and 0.3 of the fleet's throughput, two choices left the
// p99 TTFT 10% above a least-work router's (0.60 s against 0.54 s), all
// targets brought it below (0.53 s). The engines' queue in the wait
// (Signal.QueueWait) keeps it safe where this router sees only part of
// the traffic: several ILB replicas, each counting only its own
// requests, would otherwise all send to the cluster that looks empty to
// each.
//
// The chosen target is compared on the same terms, so a request moves
// only off a queue. Nothing here is random: a session moves only when
// the loads change.
func (c *Cell) balance(d *Decision, live []Signal) {
	wa, ok := c.wait(d.Chosen, live)
	if !ok {
		return
	}
	best, bestAt, bestWait := -1, c.rtt[d.Chosen]+wa, wa
	for i := range c.weights {
		if i == d.Chosen || live[i].Excluded || live[i].Saturated {
			continue
		}
		if c.rtt[i] > c.rtt[d.Chosen] && !live[d.Chosen].Queued {
			continue // farther away: only off a queued cluster
		}
		wb, okb := c.wait(i, live)
		if !okb || wb >= wa {
			continue
		}
		if at := c.rtt[i] + wb; at < bestAt {
			best, bestAt, bestWait = i, at, wb
		}
	}
	if best < 0 {
		return
	}
	d.Compared, d.Alternative, d.WaitFirst, d.WaitAlternative = true, best, wa, bestWait
	d.BalancedFrom, d.Chosen, d.Balanced = d.Chosen, best, true
}

// wait is when a request sent to target i now would begin there, in
// seconds, and whether it is known (a capacity and a serving replica):
// the larger of two views of the queue ahead of it. This router's: the
// work it sent there that has no first token yet, spread over the
// serving replicas' capacity (Work / (Capacity × Serving)), counted only
// while those requests are at least as many as the replicas (fewer leave
// a replica free: counting them moved long prompts off a busy fast
// cluster onto an idle slow one, and the long-prompt workload's p99 TTFT
// at 0.3 load rose from 0.91 to 1.21 s). The engines': the queue they
// reported, an interval old (Signal.QueueWait), which counts every
// router's requests. The request's own prefill is left out: on this
// coarse scale (a request's whole cost over the mix's sustainable
// throughput, many times its prefill time) it let the fast clusters keep
// queues as long as it, and on long prompts at 1.1 load ILB kept 73% of
// requests within the SLO instead of 99%.
func (c *Cell) wait(i int, live []Signal) (float64, bool) {
	l := live[i]
	if l.Excluded || l.Serving <= 0 || !(c.capacity[i] > 0) {
		return 0, false
	}
	var ahead float64
	if l.Awaiting >= int64(l.Serving) {
		ahead = max(l.Work, 0) / (c.capacity[i] * float64(l.Serving))
	}
	if l.QueueWait > 0 && !math.IsInf(l.QueueWait, 0) {
		ahead = max(ahead, l.QueueWait)
	}
	return ahead, true
}

// grade is graded steering: a request drawn to a target with a queue
// moves to the targets with less pressure with probability 1 − k, where
// k = (1 + p_min) / (1 + p) is the ratio of the expected time in the
// system (its own service plus the queue ahead, in service times) on the
// least-pressed remaining target to that on the chosen one. Equal
// pressure moves nothing; a cluster twice as slow to admit sheds half of
// its draws to the others, by their weights. The move decision is a
// hash of the draw, so a session moves only when the pressures change.
func (c *Cell) grade(d *Decision, rem []int, live []Signal, draw uint64) {
	ch := live[d.Chosen]
	if !ch.PressureKnown || ch.Pressure <= 0 {
		return
	}
	pmin := ch.Pressure
	for _, i := range rem {
		if live[i].PressureKnown && !live[i].Saturated {
			pmin = min(pmin, live[i].Pressure)
		}
	}
	k := (1 + pmin) / (1 + ch.Pressure)
	d.Keep = k
	if k >= 1 || unit(mix(draw)) < k {
		return
	}
	cool := rem[:0:0]
	for _, i := range rem {
		if live[i].PressureKnown && !live[i].Saturated && live[i].Pressure < ch.Pressure {
			cool = append(cool, i)
		}
	}
	d.SteeredFrom = d.Chosen
	d.Chosen, d.SteerSlot = c.pickAmong(cool, draw)
	d.Steered, d.SteerAmong = true, len(cool)
}

// mix is the splitmix64 finalizer: a draw turned into an independent
// uniform value, so the move decision does not follow the slot.
func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// unit maps a uniform uint64 to [0, 1).
func unit(v uint64) float64 { return float64(v>>11) / (1 << 53) }

// pickAmong draws among the targets idx (non-empty) as Envoy would among
// them alone: slot = draw % their total, walked in order; among spill
// targets alone (no weight), with equal odds: slot = draw % len(idx).
func (c *Cell) pickAmong(idx []int, draw uint64) (int, uint64) {
	var total uint64
	for _, i := range idx {
		total += c.weights[i]
	}
	if total == 0 {
		slot := draw % uint64(len(idx))
		return idx[slot], slot
	}
	slot := draw % total
	var begin uint64
	for _, i := range idx {
		if slot < begin+c.weights[i] {
			return i, slot
		}
		begin += c.weights[i]
	}
	return idx[len(idx)-1], slot
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
