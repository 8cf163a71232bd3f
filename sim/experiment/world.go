package experiment

import (
	"math"
	"time"

	"github.com/ilbproject/ilb/capacity"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/signals"

	"github.com/ilbproject/ilb/sim/replica"
	"github.com/ilbproject/ilb/weights"
)

// change applies scenario change i.
func (r *runner) change(i int) {
	c := r.opts.Scenario.Changes[i]
	for ci, cl := range r.opts.Scenario.Fleet.Clusters {
		if cl.Name != c.Cluster && cl.Region != c.Region {
			continue
		}
		reps := r.clusters[ci].replicas
		n := len(reps)
		if c.Fraction > 0 {
			n = int(math.Ceil(c.Fraction * float64(len(reps))))
		}
		for _, ri := range reps[:n] {
			r.apply(ri, c.Action)
		}
	}
	r.rec.change(r.clock.now, c)
}

func (r *runner) apply(ri int, a Action) {
	rep := r.replicas[ri]
	now := r.clock.now
	switch a {
	case Fail:
		if rep.state == lcFailed {
			return
		}
		// Steps that end at this very instant completed before the crash.
		r.complete(rep.m.Advance(now, nil))
		rep.state, rep.since = lcFailed, now
		rep.scheduled = -1
		r.complete(rep.m.SetState(now, replica.Failed))
		r.clock.at(now+detectDelay, evLifecycle, ri)
	case Recover:
		if rep.state != lcFailed {
			return
		}
		rep.state, rep.since, rep.envoyUp = lcStarting, now, false
		rep.m.SetState(now, replica.Starting)
		r.clock.at(now+startupTime, evLifecycle, ri)
	case Drain:
		if rep.state == lcFailed || rep.state == lcDraining {
			return
		}
		rep.state, rep.since, rep.envoyUp = lcDraining, now, false
		rep.m.SetState(now, replica.Draining)
	case Restore:
		if rep.state != lcDraining {
			return
		}
		rep.state, rep.since, rep.envoyUp = lcReady, now, true
		rep.m.SetState(now, replica.Ready)
		r.schedule(ri)
	}
}

// lifecycle moves a replica along: Envoy notices a crash; a started
// replica warms up; a warm one is ready.
func (r *runner) lifecycle(ri int) {
	rep := r.replicas[ri]
	now := r.clock.now
	switch {
	case rep.state == lcFailed && now-rep.since >= detectDelay:
		rep.envoyUp = false
	case rep.state == lcStarting && now-rep.since >= startupTime:
		rep.state, rep.since, rep.envoyUp = lcWarming, now, true
		rep.m.SetState(now, replica.Warming)
		r.clock.at(now+warmupTime, evLifecycle, ri)
	case rep.state == lcWarming && now-rep.since >= warmupTime:
		rep.state, rep.since = lcReady, now
		rep.m.SetState(now, replica.Ready)
	}
}

// refreshSignals is one round of ILB's engine signals, as package signals
// sees the replicas: a crash is seen once a probe fails and its retry
// does too (probeRetry after the failure, at the first scrape after
// that); other changes at the next scrape. A cluster with no serving
// replica is excluded by the fast loop; one whose serving replicas are
// all saturated (waiting >= signals.saturation_queue × max(running, 1),
// or KV cache >= signals.saturation_kv) is saturated.
func (r *runner) refreshSignals() {
	sig := r.cfg.Signals
	now := r.clock.now
	for ci, c := range r.clusters {
		serving, saturated, busy := 0, 0, 0
		var waiting, running, kv, prompt, gen, first, slow float64
		var ttftSum time.Duration
		for _, ri := range c.replicas {
			rep := r.replicas[ri]
			if rep.state != lcFailed || now-rep.since >= probeRetry {
				rep.seen = rep.state
			}
			l := rep.m.Load()
			dPrompt, dGen := l.PromptTokens-rep.prompt, l.GenerationTokens-rep.gen
			rep.prompt, rep.gen = l.PromptTokens, l.GenerationTokens
			dFirst, dSlow, dSum := rep.first, rep.slow, rep.ttftSum
			rep.first, rep.slow, rep.ttftSum = 0, 0, 0
			if rep.state == lcReady || rep.state == lcWarming || (rep.state == lcDraining && l.Running+l.Waiting > 0) {
				busy++ // capacity that served in this interval, for the plots
			}
			rep.saturated, rep.scraped = false, false
			if rep.seen != lcReady && rep.seen != lcWarming {
				continue
			}
			rep.running, rep.scrapedAt, rep.scraped = float64(l.Running), now, true
			serving++
			waiting += float64(l.Waiting)
			running += float64(l.Running)
			kv += l.KVUsage
			prompt += float64(dPrompt)
			gen += float64(dGen)
			first += dFirst
			slow += dSlow
			ttftSum += dSum
			if sig.Saturated(float64(l.Waiting), float64(l.Running), true, l.KVUsage) { // the model always knows its KV
				rep.saturated = true
				saturated++
			}
		}
		lc := liveCluster{excluded: serving == 0, saturated: serving > 0 && saturated == serving, pressure: waiting / max(running, 1)}
		engineTTFT(&lc, r.live[ci], first, ttftSum, waiting, signalsInterval)
		r.live[ci] = lc
		if r.est != nil {
			secs := signalsInterval.Seconds()
			r.est.Observe(r.opts.Scenario.Fleet.Clusters[ci].Name, capacity.Observation{
				At: epoch.Add(now), Replicas: serving, Waiting: waiting, Running: running,
				KVUsage: kv / max(float64(serving), 1), KVKnown: serving > 0,
				PromptTokensPerSecond: prompt / secs, GenerationTokensPerSecond: gen / secs,
				FirstTokensPerSecond: first / secs, SlowFirstTokensPerSecond: slow / secs, TTFTKnown: true,
			})
		}
		r.rec.sample(ci, float64(busy)*signalsInterval.Seconds())
		if r.lastServing == nil {
			r.lastServing = make([]int, len(r.clusters))
			for i := range r.lastServing {
				r.lastServing[i] = -1 // the first round is the baseline
			}
		}
		if last := r.lastServing[ci]; last >= 0 && last != serving {
			r.trigger()
		}
		r.lastServing[ci] = serving
	}
}

// trigger asks for a controller tick now, at most one a second after the
// last one, unless one is already due sooner.
func (r *runner) trigger() {
	if r.ctl == nil {
		return
	}
	at := max(r.clock.now, r.lastTick+weights.DefaultMinResolveGap)
	if at < r.nextTick {
		r.nextTick = at
		r.clock.at(at, evTick, 0)
	}
}

// engineTTFT sets a cluster's time to first token now, as signals
// derives it from the engines' TTFT histograms and queues
// (signals.Cluster.TTFTSeconds): the larger of the interval's mean TTFT
// (the last measured one when no first token came) and the wait of its
// queue (waiting / first tokens per second; one admission per second
// when none came).
func engineTTFT(lc *liveCluster, last liveCluster, first float64, sum time.Duration, waiting float64, interval time.Duration) {
	lc.mean, lc.ttftKnown = last.mean, last.ttftKnown
	rate := first / interval.Seconds()
	if first > 0 {
		lc.mean, lc.ttftKnown = sum.Seconds()/first, true
	}
	lc.ttft, lc.rate = signals.TTFTNow(lc.mean, waiting, rate), rate
}

// newEstimator learns every cluster's capacity as app does, from the
// configuration the run built: its profiles hold the calibrated
// capacities (the prior), and the engines' TTFT target is their share of
// the SLO.
func newEstimator(cfg *config.Config, ttftTarget time.Duration) (*capacity.Estimator, error) {
	c := *cfg
	c.Controller.Capacity.TTFTTarget = config.Duration(ttftTarget)
	c.Controller.Capacity.TTFTQuantile = ttftQuantile
	return capacity.NewFromConfig(&c)
}

// clusterStates is what ILB's signals tell the controller.
func (r *runner) clusterStates() map[string]weights.ClusterState {
	out := make(map[string]weights.ClusterState, len(r.clusters))
	now := r.clock.now
	for ci, c := range r.clusters {
		ready, draining, unhealthy := 0, 0, 0
		var warming []float64
		for _, ri := range c.replicas {
			rep := r.replicas[ri]
			switch rep.seen {
			case lcReady:
				ready++
			case lcWarming:
				warming = append(warming, signals.WarmupRamp(now-rep.since, warmupTime)) // as ILB's signals monitor counts it
			case lcDraining:
				draining++
			default:
				unhealthy++
			}
		}
		name := r.opts.Scenario.Fleet.Clusters[ci].Name
		perReplica := c.capacity
		if r.est != nil {
			perReplica, _ = r.est.PerReplica(name)
		}
		out[name] = weights.NewClusterState(perReplica, ready, warming, draining, unhealthy)
	}
	return out
}

// takeDemand returns the demand metered since the last call as rates,
// as ext_proc reports it over LRS.
func (r *runner) takeDemand() weights.Demand {
	d := weights.Demand{}
	secs := (r.clock.now - r.meterAt).Seconds()
	if secs <= 0 {
		return d
	}
	for k, v := range r.meter {
		d[k] = weights.Rate{RequestsPerSecond: v.RequestsPerSecond / secs, CostPerSecond: v.CostPerSecond / secs}
	}
	clear(r.meter)
	r.meterAt = r.clock.now
	return d
}
