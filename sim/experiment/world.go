package experiment

import (
	"math"
	"time"

	"github.com/ilbproject/ilb/capacity"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/live"
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

// signalsEvery is how often ILB's view of the replicas (the fast loop's
// exclusions and saturation, the controller's cluster states) is
// refreshed: one scrape interval, the configuration's signals.interval
// (unjittered).
func (r *runner) signalsEvery() time.Duration { return r.cfg.Signals.Interval.Std() }

// refreshSignals is one round of ILB's engine signals, as package signals
// sees the replicas: a crash is seen once a probe fails and its retry
// does too (signals.retry_delay after the failure, at the first scrape
// after that); other changes at the next scrape. Each replica's scrape (the
// network edge: what its engine's /metrics says) is read from its model;
// from there on, the product's code: the snapshot's summaries
// (signals.NewSnapshot), the fast loop's live state (live.FromSignals),
// the capacity estimator's observation and, at the next tick, the
// controller's cluster states (signals.Snapshot.ClusterStatesWith).
func (r *runner) refreshSignals() {
	now := r.clock.now
	at := epoch.Add(now)
	secs := r.signalsEvery().Seconds()
	reps := r.snapBuf
	for ci, c := range r.clusters {
		reps[ci] = reps[ci][:0]
		busy := 0
		for _, ri := range c.replicas {
			rep := r.replicas[ri]
			if rep.state != lcFailed || now-rep.since >= r.cfg.Signals.RetryDelay.Std() {
				rep.seen = rep.state
			}
			if rep.state == lcReady || rep.state == lcWarming || (rep.state == lcDraining && rep.m.Load().Running+rep.m.Load().Waiting > 0) {
				busy++ // capacity that served in this interval, for the plots
			}
			reps[ci] = append(reps[ci], r.scrape(rep, at, secs))
		}
		r.rec.sample(ci, float64(busy)*secs)
	}
	r.observe(signals.NewSnapshot(at, r.clusterNames, reps))
}

// observe takes a signals snapshot as app's signals hook does: the fast
// loop's live state, the capacity estimator's observations, and a
// controller tick when a cluster's serving replicas changed.
func (r *runner) observe(snap *signals.Snapshot) {
	r.snap = snap
	ls := live.FromSignals(snap, r.slo, r.liveState)
	r.liveState = ls
	for ci, name := range r.clusterNames {
		r.live[ci] = ls.Clusters[name]
		c := snap.Clusters[name]
		if r.est != nil {
			r.est.Observe(name, c.Observation(snap.At))
		}
		serving := c.Ready + c.Warming + c.Stale
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

// scrape is replica rep as ILB's signals monitor sees it at at: its state
// (a replica failing probes or restarting is unhealthy), its warm-up
// ramp, and, while it serves, its engine's metrics over the interval of
// secs seconds since the last round, with their saturation.
func (r *runner) scrape(rep *simReplica, at time.Time, secs float64) signals.Replica {
	l := rep.m.Load()
	dPrompt, dGen := l.PromptTokens-rep.prompt, l.GenerationTokens-rep.gen
	rep.prompt, rep.gen = l.PromptTokens, l.GenerationTokens
	dFirst, dSlow, dSum := rep.first, rep.slow, rep.ttftSum
	rep.first, rep.slow, rep.ttftSum = 0, 0, 0
	if dFirst > 0 {
		rep.ttftMean, rep.ttftKnown = dSum.Seconds()/dFirst, true // kept through intervals without first tokens
	}
	sr := signals.Replica{Address: rep.addr}
	switch rep.seen {
	case lcReady:
		sr.State, sr.Ramp = signals.StateReady, 1
	case lcWarming:
		sr.State, sr.Ramp = signals.StateWarming, signals.WarmupRamp(r.clock.now-rep.since, warmupTime)
	case lcDraining:
		sr.State = signals.StateDraining
	default: // failed, or restarting: its probes fail
		sr.State = signals.StateUnhealthy
	}
	if sr.State != signals.StateReady && sr.State != signals.StateWarming {
		return sr
	}
	sr.LastScrape = at
	sr.Metrics = signals.Metrics{
		Waiting: float64(l.ReportedWaiting), Running: float64(l.Running), KVUsage: l.KVUsage, KVKnown: true, // the model always knows its KV
		PromptTokens: float64(l.PromptTokens), GenerationTokens: float64(l.GenerationTokens),
		TokensPerSecond:       float64(dPrompt+dGen) / secs,
		PromptTokensPerSecond: float64(dPrompt) / secs, GenerationTokensPerSecond: float64(dGen) / secs, RatesKnown: true,
		FirstTokensPerSecond: dFirst / secs, SlowFirstTokensPerSecond: dSlow / secs, TTFTKnown: true,
		TTFTMeanSeconds: rep.ttftMean, TTFTMeanKnown: rep.ttftKnown,
	}
	sr.Saturated = r.cfg.Signals.Saturated(sr.Metrics.Waiting, sr.Metrics.Running, true, l.KVUsage)
	sr.Metrics.LoRA = r.loraReport(rep)
	return sr
}

// trigger asks for a controller tick now, at most one a second after the
// last one, unless one is already due sooner.
func (r *runner) trigger() {
	if r.ctl == nil {
		return
	}
	at := max(r.clock.now, r.lastTick+controller.DefaultMinResolveGap)
	if at < r.nextTick {
		r.nextTick = at
		r.clock.at(at, evTick, 0)
	}
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

// clusterStates is what ILB's signals tell the controller: the last
// snapshot's (signals.Snapshot.ClusterStatesWith), with the learned
// capacity when the policy learns it, the calibrated one otherwise.
func (r *runner) clusterStates() map[string]weights.ClusterState {
	per := func(name string) (float64, float64, bool) {
		if r.est != nil {
			return r.est.Learned(name)
		}
		return r.clusters[r.cnames[name]].capacity, 0, true
	}
	return r.snap.ClusterStatesWith(r.cfg, per) // run takes a round before the first tick
}

// takeDemand returns the demand metered since the last call as rates,
// as ext_proc reports it over LRS.
func (r *runner) takeDemand() weights.Demand {
	counts, d := r.meter.Flush(epoch.Add(r.clock.now))
	out := weights.Demand{}
	if secs := d.Seconds(); secs > 0 {
		for k, c := range counts {
			out[k] = weights.Rate{RequestsPerSecond: float64(c.Requests) / secs, CostPerSecond: c.TokenCost / secs}
		}
	}
	return out
}
