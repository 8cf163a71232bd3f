package experiment

import (
	"math"
	"time"

	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/route"
	"github.com/ilbproject/ilb/tenant"

	"github.com/ilbproject/ilb/sim/replica"
	"github.com/ilbproject/ilb/weights"
)

// arrive routes request i at its source.
func (r *runner) arrive(i int) {
	q := &r.reqs[i]
	si, mi := r.sources[q.Source], r.models[q.Model]
	prio, _ := weights.ParsePriority(q.Priority)
	m := r.cfg.Models[mi]
	cost := m.TokenCost(float64(q.Prompt), float64(q.Output))

	var cluster int
	var predicted float64 // ILB's first token predicted at its decision
	if r.opts.Policy.LeastLoaded {
		if cluster = r.leastLoaded(si, mi); cluster < 0 {
			r.rec.finish(i, -1, noCapacity, 0, 0)
			return
		}
		r.book(i, prio, false)
	} else {
		var draw uint64
		if q.Session != "" {
			draw = extproc.SessionDraw(q.Session)
		} else {
			draw = r.rng.Uint64()
		}
		var out outcome
		var d route.Decision
		var rc *routeCell
		awaiting, work, prompts, scales := r.awaiting()
		est, prompt := r.limits[mi].Estimate(float64(q.Prompt), true, 0)
		target := r.slo.TTFTTarget.Std().Seconds()
		var tt *tenant.Table
		if r.tenants != nil {
			tt = r.tenants[si][mi]
		}
		cluster, out, d, rc = r.table.route(cellKey{si, mi}, route.Request{Priority: prio, Draw: draw, Uniform: r.rng.Float64(), Cost: est, Prompt: prompt, Target: target}, r.live, awaiting, work, prompts, scales, r.opts.Policy.FastLoop,
			tt, q.Tenant, epoch.Add(r.clock.now))
		predicted = d.FirstToken
		if r.records != nil {
			r.noteDecision(i, d, rc)
		}
		r.book(i, prio, out != routed)
		if out != routed {
			r.rec.finish(i, -1, out, 0, 0)
			return
		}
	}
	hp := r.pickFor(cluster, i)
	if hp.replica < 0 { // Envoy: no healthy upstream
		hp.ticket.Done()
		r.rec.finish(i, cluster, failed, 0, 0)
		return
	}
	miss := q.Adapter != "" && r.adapterMiss(hp.replica, q.Adapter)
	if q.Adapter != "" {
		r.adapterReqs++
		if miss {
			r.adapterMisses++
		}
	}
	if r.records != nil {
		x := &r.records[i]
		x.Replica, x.Adapter, x.AdapterTier, x.PastHolder = r.replicas[hp.replica].addr, q.Adapter, hp.tier, miss
	}
	pi := r.send(i, hp.replica, cost, false, r.clock.now+r.rtt[si][r.replicas[hp.replica].cluster]/2)
	r.inflight[pi].alt, r.inflight[pi].ticket, r.inflight[pi].predicted = hp.alt, hp.ticket, predicted
}

// claim is one request's demand as ext_proc books it: its estimate, and
// what is booked of it so far.
type claim struct {
	key          weights.DemandKey
	cost, booked float64
}

// book counts request i's provisional share at its decision (shed: ILB
// refused it, 429 or 503), as ext_proc does: the estimate from its prompt
// (ext_proc's is from the body; the workload's count here) and the
// default output, as the workload sends no max_tokens.
func (r *runner) book(i int, prio weights.Priority, shed bool) {
	q := &r.reqs[i]
	lim := r.limits[r.models[q.Model]]
	cost, _ := lim.Estimate(float64(q.Prompt), true, 0)
	k := weights.DemandKey{Source: q.Source, Model: q.Model, Priority: prio}
	c := claim{key: k, cost: cost, booked: lim.Provisional(cost, r.typical.Of(k))}
	if shed {
		c.booked = lim.Refused(cost, r.typical.Of(k))
	}
	r.meter.Add(c.key, c.booked, shed)
	r.claims[i] = c
}

// served books the rest of request i's claim once its engine answered,
// with the tokens it prefilled and generated, as ext_proc does when it
// follows the response.
func (r *runner) served(i int, res replica.Result) {
	c := &r.claims[i]
	total := r.limits[r.models[r.reqs[i].Model]].Served(c.cost, c.booked, float64(res.Prompt), float64(res.Output))
	if extra := total - c.booked; extra > 0 {
		r.meter.AddCost(c.key, extra)
		c.booked = total
	}
	r.typical.Observe(c.key, c.booked)
}

// send puts request i on its way to replica rep, where it arrives at
// deliverAt, and returns its pending slot.
func (r *runner) send(i, rep int, cost float64, retried bool, deliverAt time.Duration) int {
	si := r.sources[r.reqs[i].Source]
	cl := r.replicas[rep].cluster
	rtt := r.rtt[si][cl]
	var pi int
	if n := len(r.free); n > 0 {
		pi, r.free = r.free[n-1], r.free[:n-1]
	} else {
		pi = len(r.inflight)
		r.inflight = append(r.inflight, pending{})
	}
	q := &r.reqs[i]
	est, prompt := r.limits[r.models[q.Model]].Estimate(float64(q.Prompt), true, 0)
	r.inflight[pi] = pending{req: i, replica: rep, rtt: rtt, retried: retried, alt: -1, est: est, prompt: prompt}
	r.replicas[rep].active++
	r.clusters[cl].outstanding += cost
	r.clusters[cl].estimated += est
	r.clusters[cl].awaiting++
	r.clusters[cl].awaitingWork += est
	r.clusters[cl].awaitingPrompt += prompt
	r.clock.at(deliverAt, evDeliver, pi)
	return pi
}

// deliver hands a request to its replica, or retries it when the replica
// crashed (Envoy's connect-failure retry to another host).
func (r *runner) deliver(pi int) {
	p := r.inflight[pi]
	rep := r.replicas[p.replica]
	if rep.state == lcFailed || rep.state == lcStarting {
		r.retryOrFail(pi)
		return
	}
	q := &r.reqs[p.req]
	r.inflight[pi].reached = r.clock.now
	rep.m.Submit(r.clock.now, replica.Request{ID: uint64(pi), Prompt: q.Prompt, Output: q.Output, Prefix: q.Prefix, Adapter: q.Adapter})
	r.schedule(p.replica)
}

// retryOrFail: a request whose replica failed before its first token is
// retried once on another host of the cluster (previous_hosts): the
// failure travels back to Envoy (half a round trip), Envoy backs off
// (25 ms, its base interval) and sends again (half a round trip).
// Otherwise it fails.
func (r *runner) retryOrFail(pi int) {
	p := r.inflight[pi]
	cost := r.release(pi)
	if !p.retried {
		other := p.alt // override-host: a retry takes the next listed host
		if other < 0 || r.replicas[other].state == lcFailed {
			other = r.pickHost(r.replicas[p.replica].cluster, p.replica)
		}
		if other >= 0 {
			r.send(p.req, other, cost, true, r.clock.now+p.rtt+25*time.Millisecond)
			return
		}
	}
	r.rec.finish(p.req, r.replicas[p.replica].cluster, failed, 0, 0)
}

// awaiting is, per cluster, the requests routed there without a first
// token yet, their estimated cost and their prompts' estimated tokens,
// and the calibration of ILB's first-token predictions there (scratch
// slices, valid until the next call).
func (r *runner) awaiting() ([]int, []float64, []float64, []float64) {
	r.waitBuf, r.workBuf, r.promptBuf, r.scaleBuf = r.waitBuf[:0], r.workBuf[:0], r.promptBuf[:0], r.scaleBuf[:0]
	for _, c := range r.clusters {
		r.waitBuf = append(r.waitBuf, c.awaiting)
		r.workBuf = append(r.workBuf, max(c.awaitingWork, 0))
		r.promptBuf = append(r.promptBuf, max(c.awaitingPrompt, 0))
		r.scaleBuf = append(r.scaleBuf, c.calib.Scale())
	}
	return r.waitBuf, r.workBuf, r.promptBuf, r.scaleBuf
}

// firstToken counts a first token of replica ri, for the engine TTFT
// histogram the capacity estimator reads.
func (r *runner) firstToken(ri, pi int, at time.Duration) {
	rep := r.replicas[ri]
	rep.first++
	rep.ttftSum += at - r.inflight[pi].reached
	r.clusters[rep.cluster].calib.Observe(r.inflight[pi].predicted, (at - r.inflight[pi].reached).Seconds(), r.slo.TTFTTarget.Std().Seconds())
	r.inflight[pi].first = true
	// ext_proc's stream ends at the first token (a JSON response's
	// headers, an event stream's first event, after which ILB ends it):
	// ILB's picker hears of the request's end then.
	r.inflight[pi].ticket.FirstToken()
	r.inflight[pi].ticket.Done()
	r.clusters[rep.cluster].awaiting--
	r.clusters[rep.cluster].awaitingWork -= r.inflight[pi].est
	r.clusters[rep.cluster].awaitingPrompt -= r.inflight[pi].prompt
	if at-r.inflight[pi].reached > r.ttftTarget {
		rep.slow++
	}
}

// release frees a pending slot and returns the request's cost.
func (r *runner) release(pi int) float64 {
	r.inflight[pi].ticket.Done()
	p := r.inflight[pi]
	q := &r.reqs[p.req]
	m := r.cfg.Models[r.models[q.Model]]
	cost := m.TokenCost(float64(q.Prompt), float64(q.Output))
	rep := r.replicas[p.replica]
	rep.active--
	r.clusters[rep.cluster].outstanding -= cost
	r.clusters[rep.cluster].estimated -= p.est
	if !p.first {
		r.clusters[rep.cluster].awaiting--
		r.clusters[rep.cluster].awaitingWork -= p.est
		r.clusters[rep.cluster].awaitingPrompt -= p.prompt
	}
	r.free = append(r.free, pi)
	return cost
}

// schedule makes sure the replica's next step end is in the queue.
func (r *runner) schedule(ri int) {
	rep := r.replicas[ri]
	at, busy := rep.m.Next()
	if !busy || (rep.scheduled >= 0 && rep.scheduled <= at) {
		return
	}
	rep.scheduled = at
	r.clock.at(at, evStep, ri)
}

// step runs the replica's steps that end now and records what finished.
func (r *runner) step(ri int) {
	rep := r.replicas[ri]
	if rep.scheduled != r.clock.now {
		return // stale: rescheduled since
	}
	rep.scheduled = -1
	r.results = rep.m.Advance(r.clock.now, r.results[:0])
	r.complete(r.results)
	r.schedule(ri)
}

func (r *runner) complete(results []replica.Result) {
	for _, res := range results {
		pi := int(res.ID)
		p := r.inflight[pi]
		if res.Failed {
			if res.FirstToken == 0 {
				r.retryOrFail(pi)
				continue
			}
			r.release(pi)
			r.served(p.req, res) // its stream ended: what it generated counts
			r.rec.finish(p.req, r.replicas[p.replica].cluster, failed, 0, 0)
			continue
		}
		r.release(pi)
		r.served(p.req, res)
		rep := r.replicas[p.replica]
		rep.served++
		rep.promptTokens += int64(res.Prompt)
		rep.cachedTokens += int64(res.CachedPrompt)
		q := &r.reqs[p.req]
		if q.Adapter != "" {
			r.adapterDone++
			r.adapterCost += res.AdapterCost
			r.adapterWait += res.AdapterWait
		}
		ttft := res.FirstToken + p.rtt/2 - q.At
		var tpot time.Duration
		if res.Output > 1 {
			tpot = (res.Done - res.FirstToken) / time.Duration(res.Output-1)
		}
		r.rec.finish(p.req, r.replicas[p.replica].cluster, routed, ttft, tpot)
	}
}

// pickHost is Envoy's LEAST_REQUEST with two choices over the hosts it
// sends to; -1 when there is none.
func (r *runner) pickHost(cluster, exclude int) int {
	c := r.clusters[cluster]
	up := 0
	for _, ri := range c.replicas {
		if ri != exclude && r.replicas[ri].envoyUp {
			up++
		}
	}
	if up == 0 {
		return -1
	}
	nth := func(n int) int {
		for _, ri := range c.replicas {
			if ri != exclude && r.replicas[ri].envoyUp {
				if n == 0 {
					return ri
				}
				n--
			}
		}
		return -1
	}
	a := nth(r.rng.IntN(up))
	if up == 1 {
		return a
	}
	b := nth(r.rng.IntN(up))
	if r.replicas[b].active < r.replicas[a].active {
		return b
	}
	return a
}

// leastLoaded is the greedy reference: the eligible cluster with the
// least round trip plus outstanding work over its serving capacity. The
// oracle (least_loaded) knows every request's true cost, its output
// included, and which replicas Envoy sends to at each instant; the
// deployable one (Policy.Seen: least_loaded_seen) knows what ILB knows:
// the requests in flight at ext_proc's estimate of their cost, and the
// serving replicas of the signals monitor's last round.
func (r *runner) leastLoaded(si, mi int) int {
	best, bestScore := -1, math.Inf(1)
	for ci, c := range r.clusters {
		if !c.models[mi] || !r.allowed[si][ci] {
			continue
		}
		up, work := 0, c.outstanding
		if r.opts.Policy.Seen {
			up, work = r.live[ci].Serving, c.estimated
			if r.live[ci].Excluded != "" {
				up = 0
			}
		} else {
			for _, ri := range c.replicas {
				if r.replicas[ri].envoyUp {
					up++
				}
			}
		}
		if up == 0 {
			continue
		}
		score := r.rtt[si][ci].Seconds() + work/(c.capacity*float64(up))
		if score < bestScore {
			best, bestScore = ci, score
		}
	}
	return best
}
