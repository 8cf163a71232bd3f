package route

import "math"

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
		c.balance(d, live, req.Prompt, req.Target)
		c.reach(d, live, req)
		if !d.Reached && !live[d.Chosen].TTFTKnown {
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
// that pools them absorbs them: a request goes abroad while that is
// faster round trip included. (Moves abroad were once allowed only off a
// cluster whose engines or this router's count confirmed a queue: before
// the prefill rules below, long-prompt traffic past saturation went
// abroad three times as often without that evidence and kept 96.0%
// within the SLO against 99.3%. With them, the evidence only held bursts
// at home: on the Azure code trace, without it, ILB's goodput within the
// SLO rose 0.2–2.3% past saturation on every fleet but one (outage fleet
// at 0.9: −0.7%), and the long-prompt workload was unchanged at 1.1 and
// 0.9% better at 1.3.)
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
// only off a queue — or, where the queues ahead are as long (none, on a
// light fleet), to a target that is nearer and prefills the prompt
// faster (Decision.Faster): better on every count, its first token comes
// sooner whatever the estimates' errors. Without it a long prompt the
// plan's shares sent abroad stayed abroad on an idle fleet, to a slower
// GPU as well: the long-prompt workload at 1.1 of the fleet's throughput
// had a p99 TTFT of 1.86 s against a least-work router's 1.68 s; with
// it, 1.79 s (at 0.3, 0.96 → 0.91 s). Nothing here is random: a session
// moves only when the loads change.
//
// A target is passed over for its prefill (Decision.Kept) when the
// prompt's prefill there is longer than the queue it saves (see slower)
// or, by itself, longer than the TTFT target while the chosen target's
// is not (see beyond; target in seconds, 0: none): the wait is an
// estimate, the prefill a measurement, and a request that may still
// begin in time where it is does not move to where it cannot.
func (c *Cell) balance(d *Decision, live []Signal, prompt, target float64) {
	wa, ok := c.wait(d.Chosen, live)
	if !ok {
		return
	}
	best, bestAt, bestWait := -1, c.rtt[d.Chosen]+wa, wa
	kept, keptAt, keptWait := -1, bestAt, wa // the soonest passed over for its prefill
	for i := range c.weights {
		if i == d.Chosen || live[i].Excluded || live[i].Saturated {
			continue
		}
		wb, okb := c.wait(i, live)
		if !okb || wb > wa || wb == wa && !(prefill(prompt, live[i]) < prefill(prompt, live[d.Chosen])) {
			continue // a longer queue, or as long without a faster prefill
		}
		if slower(prompt, live[d.Chosen], live[i], wa-wb) || beyond(prompt, target, live[i]) && !beyond(prompt, target, live[d.Chosen]) {
			if at := c.rtt[i] + wb; at < keptAt {
				kept, keptAt, keptWait = i, at, wb
			}
			continue
		}
		if at := c.rtt[i] + wb; at < bestAt {
			best, bestAt, bestWait = i, at, wb
		}
	}
	if best < 0 {
		if kept >= 0 {
			d.Compared, d.Alternative, d.WaitFirst, d.WaitAlternative, d.Kept = true, kept, wa, keptWait, true
			d.PrefillFirst, d.PrefillAlternative = prompt*live[d.Chosen].PrefillPerToken, prompt*live[kept].PrefillPerToken
		}
		return
	}
	d.Compared, d.Alternative, d.WaitFirst, d.WaitAlternative = true, best, wa, bestWait
	if bestWait == wa { // as long a queue: nearer, and a faster prefill
		d.Faster, d.PrefillFirst, d.PrefillAlternative = true, prefill(prompt, live[d.Chosen]), prefill(prompt, live[best])
	}
	d.BalancedFrom, d.Chosen, d.Balanced = d.Chosen, best, true
}

// prefill is how long a prompt of prompt tokens takes to prefill on a
// cluster measured as l, in seconds; +Inf when unknown (no prompt, or no
// prefill speed measured), so that an unknown prefill is never the
// faster one.
func prefill(prompt float64, l Signal) float64 {
	p := l.PrefillPerToken
	if prompt > 0 && p > 0 && !math.IsInf(p, 0) {
		return prompt * p
	}
	return math.Inf(1)
}

// slower reports whether a prompt of prompt tokens would get its first
// token later on cluster b than on a, a's wait ahead being saved more
// than b's (by saved seconds): its prefill on b is longer by more than
// that, by the clusters' measured prefill time per token
// (Signal.PrefillPerToken; false when either is unknown). It only stops
// a move: balancing never moves a request for its prefill's sake alone.
// Moved by their queues alone, the synthetic day's long prompts went
// from H100 to A100 clusters, whose prefill of a 4k-token prompt is
// twice as long, and made the p99 TTFT at 0.9 of the fleet 0.63 s
// against proportional's 0.54 s. Moving to faster clusters for their
// prefill as well let them keep queues as long as the difference, which
// on long prompts (tens of thousands of tokens) is seconds, and the
// long-prompt workload at 1.1 kept 75% of its requests within the SLO
// instead of 99%.
func slower(prompt float64, a, b Signal, saved float64) bool {
	if !(prompt > 0) || !(a.PrefillPerToken > 0) || !(b.PrefillPerToken > 0) || math.IsInf(a.PrefillPerToken, 0) || math.IsInf(b.PrefillPerToken, 0) {
		return false
	}
	return prompt*(b.PrefillPerToken-a.PrefillPerToken) >= saved
}

// beyond reports whether a prompt of prompt tokens takes longer than
// target seconds to prefill on a cluster measured as l, queue aside: a
// request sent there misses the TTFT target whatever the wait (false when
// the target or the prefill speed is unknown). The wait balancing
// compares is coarse — the work ahead at the cost of whole requests over
// the mix's sustainable throughput — and on long prompts it read 2–5 s
// ahead on H100 clusters whose first tokens came in 1 s: on a held-out
// trace of 15,000-token prompts it moved prompts of 50,000 tokens and
// more onto idle A100 clusters, whose prefill of them alone is past a
// 2 s target, and ILB's p99 TTFT was 1.15× a least-work router's
// (2.61 s against 2.26 s). With this rule and the pooled prefill speed
// (live.PrefillWindow): 1.04×.
func beyond(prompt, target float64, l Signal) bool {
	p := l.PrefillPerToken
	return target > 0 && prompt > 0 && p > 0 && !math.IsInf(p, 0) && prompt*p > target
}

// wait is when a request sent to target i now would begin there, in
// seconds, and whether it is known (a capacity and a serving replica):
// the larger of two views of the queue ahead of it. This router's: the
// work it sent there that has no first token yet, spread over the
// serving replicas' capacity (Work / (Capacity × Serving)), or, when
// shorter, those requests' prompts at the cluster's measured prefill
// time per token (Prompt × PrefillPerToken / Serving), counted only
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
//
// Both views of this router's requests bound the same thing, the
// prefill still ahead of a new request, from above: a request's whole
// cost at the rate the cluster sustains within the SLO counts its
// decode as well, and the measured prefill time per token counts the
// contention of the batch the prompts shared. The first is far above on
// long prompts — 2–5 s read ahead on H100 clusters that gave first
// tokens in 1 s, on a held-out trace of 12,000-token conversations —
// and it moved requests onto A100 clusters that looked idle (fewer
// awaiting than replicas) but were prefilling at their limit: the
// residency fleet at 0.9 of its throughput kept 95.3% within the SLO
// (p99 TTFT 3.92 s) against a least-work router's 96.0% (3.19 s); with
// the smaller of the two, 96.7% (3.05 s). The prefill view alone lost
// where the decode the first view counts is the queue, past saturation:
// on the Azure code trace at 0.9, 365.4 → 362.6 requests/s within the
// SLO; on the Azure conversation trace at 1.1 (residency fleet), a p99
// TTFT of 2.79 → 3.77 s. Taking the prefill view only while the
// engines queue nothing (a switch) made a cluster's wait jump between the
// two as its queue came and went, and requests herded onto it: on the
// held-out trace at 1.3 of the diurnal fleet's throughput ILB kept
// 0.95–0.98× a least-work router's goodput within the SLO against
// 1.02–1.03× (seeds 1–3). The smaller of the two costs the long-prompt
// workload at 1.1 a little of its tail on seed 1 (p99 TTFT 1.79 →
// 1.86 s), none on seeds 2 and 3 (1.73 → 1.72 s, 1.76 → 1.78 s).
func (c *Cell) wait(i int, live []Signal) (float64, bool) {
	l := live[i]
	if l.Excluded || l.Serving <= 0 || !(c.capacity[i] > 0) {
		return 0, false
	}
	var ahead float64
	if l.Awaiting >= int64(l.Serving) {
		ahead = max(l.Work, 0) / (c.capacity[i] * float64(l.Serving))
		if p := l.PrefillPerToken; p > 0 && !math.IsInf(p, 0) {
			ahead = min(ahead, max(l.Prompt, 0)*p/float64(l.Serving))
		}
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
