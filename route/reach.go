package route

import "math"

// reach moves a request that the chosen target cannot begin within the
// TTFT target (Request.Target) to a target that can: the request's first
// token is predicted on each target, at its engines as the target is
// measured (network aside), as its wait (see wait) + its prompt's
// prefill there (Request.Prompt × Signal.PrefillPerToken),
// and when the chosen target's prediction is past the target while
// others' are within it, the request is drawn again (by weight, with
// its own draw) among those that are also sooner round trip included.
// Targets excluded, saturated or overloaded are never candidates, and
// nothing moves when either figure is unknown (no prefill speed
// measured, no capacity) or when no target can meet the target: a
// request that misses everywhere stays where the plan put it. Graded
// steering does not move a request afterwards.
//
// Balancing compares queues and only stops a move for a slower prefill
// (see slower): a long prompt drawn to a slower GPU stays there when no
// queue is ahead, and takes its prefill there — on an A100 cluster a
// 60,000-token prompt prefills in about 3 s, on an H100 in 1.5 s. Under
// a TTFT target of 2 s that request is lost where it was drawn and met
// elsewhere, whatever the load. On a held-out trace of long-prompt
// conversations (12,000 prompt tokens on average), the requests that
// missed the SLO at 0.3 of the fleet's throughput were mostly prompts of
// 32,000 tokens or more, sent to the A100 clusters by their share of the
// capacity (their mean TTFT there 2.6–3.0 s, against 1.3–1.4 s on the
// H100s), and ILB's p99 TTFT was 1.19× a least-work router's; moving
// them took it to 1.05×. Moving every long prompt to the faster GPUs
// (by prefill alone, or by a size-ranked assignment) made those keep
// queues that cost more than the prefill saved (docs/benchmarks.md):
// this rule moves only a request the chosen target cannot serve within
// the SLO, to a target that can.
func (c *Cell) reach(d *Decision, live []Signal, req Request) {
	if !(req.Target > 0) || !(req.Prompt > 0) {
		return
	}
	first, ok := c.firstToken(d.Chosen, live, req.Prompt)
	if !ok || !(first > req.Target) { // NaN: unknown, nothing moves
		return
	}
	var fit [8]int // most cells have fewer targets: no allocation
	within := fit[:0]
	weighted := 0
	for i := range c.weights {
		if i == d.Chosen || live[i].Excluded || live[i].Saturated || live[i].Overloaded {
			continue
		}
		// Within the target, and sooner round trip included: never later
		// for the client, where a farther cluster is only just faster.
		if at, ok := c.firstToken(i, live, req.Prompt); ok && at <= req.Target && c.rtt[i]+at < c.rtt[d.Chosen]+first {
			within = append(within, i)
			if c.weights[i] > 0 {
				weighted++
			}
		}
	}
	if len(within) == 0 {
		return
	}
	to, _ := c.pickAmong(within, req.Draw)
	at, _ := c.firstToken(to, live, req.Prompt)
	among := len(within)
	if weighted > 0 {
		among = weighted // the draw is by weight: spill targets only when none has any
	}
	d.Reached, d.ReachedFrom, d.FirstAt, d.ReachAt, d.ReachAmong = true, d.Chosen, first, at, among
	d.Chosen = to
}

// firstToken is when target i's engines would give a request of prompt
// tokens its first token if sent now, in seconds from its arrival there:
// wait + prefill; ok is false when the wait or the prefill speed is
// unknown.
func (c *Cell) firstToken(i int, live []Signal, prompt float64) (float64, bool) {
	w, ok := c.wait(i, live)
	p := live[i].PrefillPerToken
	if !ok || !(p > 0) || math.IsInf(p, 0) {
		return 0, false
	}
	return w + prompt*p, true
}
