package capacity

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ilbproject/ilb/config"
)

// Settings of an Estimator.
type Settings struct {
	// SaturationQueue and SaturationKV define a queue as the signals
	// monitor does: waiting ≥ SaturationQueue × max(running, 1), or KV
	// cache usage ≥ SaturationKV.
	SaturationQueue, SaturationKV float64
	// TTFTTarget is the engine-side time to first token requests should
	// get, and TTFTQuantile the share of them that should (0.99: p99);
	// TTFT evidence is used only when the engines export a TTFT histogram.
	TTFTTarget   time.Duration
	TTFTQuantile float64
	// TimeConstant weighs the evidence; 0: 60 s.
	TimeConstant time.Duration
	// SmoothTime is the window over which an interval's throughput, TTFT
	// and queue are judged; 0: DefaultSmoothTime.
	SmoothTime time.Duration
	// DrainTime is the time within which a standing queue must be served
	// for the plan to hold: the controller's tick (a plan lasts one tick,
	// and a queue standing at its start must be gone by the next). Under
	// overload the capacity is lowered, and the saturation throughput the
	// plan sheds against is reduced, by the backlog over DrainTime; 0: 5 s.
	DrainTime time.Duration
	// MaxChangePerMinute bounds the estimates' rate of change, > 1; 0: 2.
	MaxChangePerMinute float64
	// Range bounds the estimates around the prior, > 1; 0: 10.
	Range float64
}

// DefaultSmoothTime is the default Settings.SmoothTime.
const DefaultSmoothTime = 15 * time.Second

// LastingFor is how long a condition the engines' scrapes show (a queue,
// first tokens over the target) must be seen at every scrape before it is
// taken as lasting rather than a burst the engines admit within a few
// steps: a time, so that the rules that read it mean the same at any
// signals.interval. Two scrapes at the default interval of 1 s (jittered
// by ±10%) span it, four at 250 ms.
const LastingFor = 750 * time.Millisecond

// Lasting reports whether a condition seen at every scrape since since (the
// first of them; zero: not seen at the last) still seen at at has lasted
// LastingFor.
func Lasting(since, at time.Time) bool {
	return !since.IsZero() && at.Sub(since) >= LastingFor
}

// Since is the start of a run of scrapes that show a condition, after one
// at at that shows it (on) or not: was, the run's start before it, or at
// when it starts one; zero when it does not show it.
func Since(was time.Time, on bool, at time.Time) time.Time {
	switch {
	case !on:
		return time.Time{}
	case was.IsZero():
		return at
	}
	return was
}

// minFirstTokens is how many first tokens a window needs before its TTFT
// quantile is evidence: with fewer, one slow request is noise.
const minFirstTokens = 20

// Cluster is one engine cluster to learn.
type Cluster struct {
	Name string
	// Prior is the configured capacity per replica (token-cost/s), > 0.
	Prior float64
	// PromptCost and OutputCost are the token costs of the cluster's
	// models (their mean when it serves several), > 0.
	PromptCost, OutputCost float64
}

// Observation is one signals interval of one cluster: sums over its
// serving replicas whose load and token rates are known.
type Observation struct {
	At time.Time
	// Replicas is how many replicas the sums cover; 0: no evidence.
	Replicas         int
	Waiting, Running float64
	// KVUsage is their mean KV cache usage; KVKnown false when none
	// reports it.
	KVUsage float64
	KVKnown bool
	// PromptTokensPerSecond and GenerationTokensPerSecond are their token
	// throughputs.
	PromptTokensPerSecond, GenerationTokensPerSecond float64
	// FirstTokensPerSecond is the rate of requests that got their first
	// token, SlowFirstTokensPerSecond of those that got it after more than
	// the TTFT target; meaningful when TTFTKnown (the engines export a TTFT
	// histogram).
	FirstTokensPerSecond, SlowFirstTokensPerSecond float64
	TTFTKnown                                      bool
}

// Evidence kinds.
const (
	FromPrior    = "prior"    // no evidence yet: the configured profile
	FromOverload = "overload" // lowered: a queue, or TTFT over the target
	FromHeadroom = "headroom" // raised: served more than planned within the target
)

// Estimate is what the estimator believes of one cluster.
type Estimate struct {
	Cluster string `json:"cluster"`
	// PerReplica is the capacity per replica the controller plans with:
	// the throughput (token-cost/s) of which the target utilization keeps
	// the engines' TTFT within the target, for the current mix.
	PerReplica float64 `json:"per_replica"`
	// Saturation is the learned throughput per replica at saturation: the
	// throughput of the intervals in which a request waited per replica
	// (the engines at their limit), averaged over SmoothTime of such
	// intervals, taken while they stay busy, and raised by any window
	// that served more; the prior until then. It is the most the cluster
	// can serve of the current mix. A window's mean under bursty traffic
	// is not it: on the Azure code trace the engines queued in bursts at
	// every load, and the window's mean (idle moments included) put it at
	// 87% of what they served while busy.
	Saturation float64 `json:"saturation"`
	// Backlog is the work waiting per replica, in token-cost: the queue
	// per replica over the window times the window's mean cost of a
	// request (0 when the engines export no TTFT histogram, the source of
	// the request rate).
	Backlog float64 `json:"backlog"`
	// Prior is the configured capacity_per_replica.
	Prior float64 `json:"prior"`
	// Confidence in [0, 1] is the share of PerReplica that rests on
	// measurements rather than the prior.
	Confidence float64 `json:"confidence"`
	// From is the kind of the latest evidence taken (FromPrior when none).
	From string `json:"from"`
	// Measured is the throughput per replica over the smoothing window,
	// Pressure the latest queued requests per running one, SlowShare the
	// share of first tokens over the TTFT target in the window (-1:
	// unknown).
	Measured  float64 `json:"measured"`
	Pressure  float64 `json:"pressure"`
	SlowShare float64 `json:"slow_share"`
	// Evidence says in words what the latest observation meant.
	Evidence string `json:"evidence"`
	// Samples counts the observations taken as evidence; Updated is when
	// the latest was.
	Samples int       `json:"samples"`
	Updated time.Time `json:"updated,omitzero"`
}

type state struct {
	c      Cluster
	est    Estimate
	lastAt time.Time
	// mean is the throughput per replica averaged over SmoothTime
	// (exponentially), first and slow the first-token rates likewise; calm is
	// how long the cluster has had no queue.
	mean, first, slow float64
	// vari is the variance of one interval's throughput (exponentially
	// weighted over SmoothTime).
	vari float64
	// waitPer is the queue per replica averaged over the window.
	waitPer float64
	// sustained is the throughput per replica averaged over TimeConstant:
	// the load the controller plans on (its demand is smoothed on that
	// scale), which overload is judged against. It is read debiased
	// (sustainedNow): an exponential average started from no weight,
	// divided by the weight its history has (1 − e^(−observed/τ)), so
	// the first minute is the mean of what was observed in it, not the
	// first interval's throughput weighted as a whole window. Started
	// from the first interval, a cluster that ramped up from idle (a
	// fleet starting, a cluster added) and queued in its first minute
	// learned a capacity of two thirds of what it then served for good
	// (no later interval gave evidence either way).
	sustained float64
	observed  time.Duration
	ttftKnown bool
	calm      time.Duration
	// busy is the throughput per replica averaged (exponentially, over
	// SmoothTime) over the busy intervals only (a request waiting per
	// replica), and busyTime how much of such intervals it has seen
	// (bounded): busy is read debiased, as sustained is. busySince and
	// queuedSince: the first of the run of observations, up to the last,
	// that were busy (queued); zero when the last was not.
	busy                   float64
	busyTime               time.Duration
	busySince, queuedSince time.Time
}

// Estimator learns every configured cluster's capacity.
type Estimator struct {
	s    Settings
	mu   sync.Mutex
	st   map[string]*state
	snap atomic.Pointer[map[string]Estimate]
}

// New checks the settings and starts every cluster at its prior.
func New(s Settings, clusters []Cluster) (*Estimator, error) {
	if s.TimeConstant == 0 {
		s.TimeConstant = time.Minute
	}
	if s.SmoothTime == 0 {
		s.SmoothTime = DefaultSmoothTime
	}
	if s.DrainTime == 0 {
		s.DrainTime = 5 * time.Second
	}
	if s.MaxChangePerMinute == 0 {
		s.MaxChangePerMinute = 2
	}
	if s.Range == 0 {
		s.Range = 10
	}
	var errs []error
	if !(s.SaturationQueue > 0) || !(s.SaturationKV > 0 && s.SaturationKV <= 1) {
		errs = append(errs, fmt.Errorf("capacity: saturation queue %v and KV %v, want > 0 and in (0, 1]", s.SaturationQueue, s.SaturationKV))
	}
	if !(s.TTFTQuantile > 0 && s.TTFTQuantile < 1) || s.TTFTTarget <= 0 {
		errs = append(errs, fmt.Errorf("capacity: TTFT target %v at quantile %v, want > 0 and in (0, 1)", s.TTFTTarget, s.TTFTQuantile))
	}
	if s.TimeConstant < 0 || s.SmoothTime < 0 || s.DrainTime < 0 || !(s.MaxChangePerMinute > 1) || !(s.Range > 1) {
		errs = append(errs, fmt.Errorf("capacity: time constant %v, smoothing %v, drain time %v, max change %v, range %v: want ≥ 0, ≥ 0, ≥ 0, > 1, > 1", s.TimeConstant, s.SmoothTime, s.DrainTime, s.MaxChangePerMinute, s.Range))
	}
	e := &Estimator{s: s, st: map[string]*state{}}
	for i, c := range clusters {
		if !(c.Prior > 0) || !(c.PromptCost > 0) || !(c.OutputCost > 0) || math.IsInf(c.Prior, 0) {
			errs = append(errs, fmt.Errorf("capacity: clusters[%d] %q: prior %v, costs %v/%v: want finite values > 0", i, c.Name, c.Prior, c.PromptCost, c.OutputCost))
			continue
		}
		e.st[c.Name] = &state{c: c, est: Estimate{
			Cluster: c.Name, PerReplica: c.Prior, Saturation: c.Prior, Prior: c.Prior, From: FromPrior, SlowShare: -1,
			Evidence: "no evidence yet: the configured profile",
		}}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	e.publish()
	return e, nil
}

// NewFromConfig learns every engine cluster of c, each from its profile's
// capacity_per_replica and its models' token costs, with the signals'
// definition of a queue and controller.capacity's settings. c must be
// validated.
func NewFromConfig(c *config.Config) (*Estimator, error) {
	cs := make([]Cluster, 0, len(c.Clusters))
	for _, e := range c.Clusters {
		p, _ := c.Profile(e.Profile)
		pc, oc := c.TokenCosts(e)
		cs = append(cs, Cluster{Name: e.Name, Prior: p.CapacityPerReplica, PromptCost: pc, OutputCost: oc})
	}
	cl := c.Controller.Capacity
	return New(Settings{
		SaturationQueue: c.Signals.SaturationQueue, SaturationKV: c.Signals.SaturationKV,
		TTFTTarget: cl.TTFTTarget.Std(), TTFTQuantile: cl.TTFTQuantile, TimeConstant: cl.TimeConstant.Std(),
		DrainTime: c.Controller.Tick.Std(),
	}, cs)
}

// Observe takes one interval of a cluster; unknown clusters and
// observations not newer than the last are ignored.
func (e *Estimator) Observe(name string, o Observation) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st, ok := e.st[name]
	if !ok || !o.At.After(st.lastAt) {
		return
	}
	if e.observe(st, o) {
		e.publish()
	}
}

// observe updates st and reports whether its estimate changed.
func (e *Estimator) observe(st *state, o Observation) bool {
	first := st.lastAt.IsZero()
	dt := o.At.Sub(st.lastAt)
	st.lastAt = o.At
	if o.Replicas <= 0 || !finiteNonNeg(o.Waiting, o.Running, o.KVUsage, o.PromptTokensPerSecond, o.GenerationTokensPerSecond, o.FirstTokensPerSecond, o.SlowFirstTokensPerSecond) {
		// No evidence: a queue's run starts again, a busy one goes on
		// (as when both were counted in intervals).
		st.calm, st.queuedSince = 0, time.Time{}
		return false
	}
	n := float64(o.Replicas)
	x := (o.PromptTokensPerSecond*st.c.PromptCost + o.GenerationTokensPerSecond*st.c.OutputCost) / n
	pressure := o.Waiting / max(o.Running, 1)
	queued := config.Signals{SaturationQueue: e.s.SaturationQueue, SaturationKV: e.s.SaturationKV}.Saturated(o.Waiting, o.Running, o.KVKnown, o.KVUsage)
	st.queuedSince = Since(st.queuedSince, queued, o.At)
	est := &st.est
	est.Pressure = pressure
	if first {
		st.mean, st.waitPer, st.ttftKnown = x, o.Waiting/n, o.TTFTKnown
		if o.TTFTKnown {
			st.first, st.slow = o.FirstTokensPerSecond, min(o.SlowFirstTokensPerSecond, o.FirstTokensPerSecond)
		}
		est.Measured = x
		return true // the first interval has no predecessor to confirm a queue
	}
	dt = min(dt, 4*e.s.TimeConstant) // a gap is not more evidence
	w := 1 - math.Exp(-dt.Seconds()/e.s.SmoothTime.Seconds())
	st.waitPer += w * (o.Waiting/n - st.waitPer)
	st.sustained += (1 - math.Exp(-dt.Seconds()/e.s.TimeConstant.Seconds())) * (x - st.sustained)
	st.observed = min(st.observed+dt, 8*e.s.TimeConstant)
	d := x - st.mean
	st.mean += w * d
	st.vari = (1 - w) * (st.vari + w*d*d)
	// The window mean less two standard errors (an exponential window of
	// time constant SmoothTime holds about 2 × SmoothTime / dt independent
	// intervals): evidence that only raises an estimate must not follow
	// the noise of the mean.
	lowMean := max(0, st.mean-2*math.Sqrt(st.vari*dt.Seconds()/(2*e.s.SmoothTime.Seconds())))
	if o.TTFTKnown != st.ttftKnown { // the engines changed: start the window again
		st.first, st.slow, st.ttftKnown = 0, 0, o.TTFTKnown
	}
	if o.TTFTKnown {
		st.first += w * (o.FirstTokensPerSecond - st.first)
		st.slow += w * (min(o.SlowFirstTokensPerSecond, o.FirstTokensPerSecond) - st.slow)
	}
	// Busy: a request waits per replica, so the engines run at their
	// limit (KV cache, or max_num_seqs, where the queue per running
	// request stays small: config.CapacityLearning.OverTarget); their
	// throughput is then the saturation throughput of the mix.
	busy := queued || o.Waiting/n >= 1
	st.busySince = Since(st.busySince, busy, o.At)
	if busy {
		st.busy += w * (x - st.busy)
		st.busyTime = min(st.busyTime+dt, 8*e.s.SmoothTime)
	}
	est.Measured, est.SlowShare = st.mean, -1
	est.Backlog = 0
	if st.first > 0 {
		est.Backlog = st.waitPer * st.mean * n / st.first // queue × token-cost per request
	}
	windowFirst := st.first * e.s.SmoothTime.Seconds() // first tokens in a window
	ttftJudged := st.ttftKnown && windowFirst >= minFirstTokens
	slowShare := 0.0
	if ttftJudged {
		slowShare = st.slow / st.first
		est.SlowShare = slowShare
	}
	overTarget := ttftJudged && config.CapacityLearning{TTFTQuantile: e.s.TTFTQuantile}.OverTarget(st.first, st.slow, st.waitPer)
	// Overload is judged in the SLO's terms wherever the engines' first
	// tokens can be judged: first tokens over the target while requests
	// wait (config.CapacityLearning.OverTarget). A long queue alone is
	// overload only for engines without a TTFT histogram, or a window
	// with too few first tokens to judge: the queue per running request
	// says nothing of the wait where few requests run at once (an engine
	// of 4 sequences with 2 waiting is "saturated" by saturation_queue
	// 0.5 while its queue waits 0.3 s against a 2 s target, and taking
	// that for overload lowered the capacity at 87% of the load the
	// engines serve within the target, then held it there: a plan at the
	// capacity never shows the headroom that raises it).
	overload, long := overTarget, overTarget // long: this interval breaks a calm window
	if !ttftJudged {
		overload, long = Lasting(st.queuedSince, o.At), queued
	}
	if long {
		st.calm = 0
	} else {
		st.calm += dt
	}
	alpha := 1 - math.Exp(-dt.Seconds()/e.s.TimeConstant.Seconds())
	step := math.Pow(e.s.MaxChangePerMinute, dt.Minutes())
	lo, hi := st.c.Prior/e.s.Range, st.c.Prior*e.s.Range
	move := func(from, to float64) float64 {
		next := from + alpha*(to-from)
		next = min(max(next, from/step), from*step)
		return min(max(next, lo), hi)
	}
	// The saturation throughput is what the engines served while busy for
	// LastingFor or more, averaged over SmoothTime of busy intervals (one
	// interval's alone is lumpy: an engine counts a prompt's tokens when
	// its first token comes, so an interval in a long prefill shows
	// little of the work done, and long-prompt traffic learned its
	// saturation 30% low from such intervals); and at least what any
	// window served.
	switch {
	case Lasting(st.busySince, o.At):
		est.Saturation = move(est.Saturation, st.busyNow(e.s.SmoothTime))
	case lowMean > est.Saturation:
		est.Saturation = move(est.Saturation, lowMean)
	}
	var kind, why string
	switch {
	case overload:
		// The capacity within the TTFT target is at most the sustained
		// load at which it broke: under bursty arrivals the wait grows
		// with their variability (Kingman: W ≈ ρ/(1−ρ) · (C²a + C²s)/2 ·
		// E[S]), so a cluster breaks at a lower mean load than under
		// smooth ones, and the plan must leave room for the bursts.
		// Under a standing queue the engines serve their saturation
		// throughput whatever the load, and a plan that keeps the load
		// there keeps the queue: the capacity within the target is below
		// it by what serving the backlog within DrainTime takes (at most
		// halved by one window).
		at := min(st.mean, st.sustainedNow(e.s.TimeConstant))
		at = max(at-est.Backlog/e.s.DrainTime.Seconds(), at/2)
		if at < est.PerReplica {
			kind = FromOverload
			if ttftJudged {
				why = fmt.Sprintf("%.1f%% of first tokens over the %v TTFT target with %.1f requests waiting per replica, at a sustained %.0f token-cost/s per replica: capacity at most that", 100*slowShare, e.s.TTFTTarget, st.waitPer, at)
			} else {
				why = fmt.Sprintf("queued for %v (%.2f waiting per running) at a sustained %.0f token-cost/s per replica: capacity at most that", o.At.Sub(st.queuedSince).Round(time.Millisecond), pressure, at)
			}
			est.PerReplica = min(est.PerReplica, move(est.PerReplica, at))
		}
	case st.calm >= e.s.SmoothTime:
		// A calm window: the cluster served lowMean (at least) without
		// overload, so it can.
		if lowMean > est.PerReplica {
			kind = FromHeadroom
			calm := "without a queue"
			if ttftJudged {
				calm = fmt.Sprintf("within the %v TTFT target", e.s.TTFTTarget)
				if slowShare > 1-e.s.TTFTQuantile {
					// Past the target with no queue: the prompts' own
					// prefill (config.CapacityLearning.OverTarget).
					calm = fmt.Sprintf("with %.1f%% of first tokens over the %v TTFT target but %.1f requests waiting per replica", 100*slowShare, e.s.TTFTTarget, st.waitPer)
				}
			}
			why = fmt.Sprintf("served %.0f token-cost/s per replica (at least %.0f, two standard errors down) over %v %s, more than the %.0f planned with: capacity at least that", st.mean, lowMean, e.s.SmoothTime, calm, est.PerReplica)
			est.PerReplica = max(est.PerReplica, move(est.PerReplica, lowMean))
		}
	}
	if kind == "" {
		est.Evidence = fmt.Sprintf("no evidence: %.0f token-cost/s per replica, %.2f waiting per running", st.mean, pressure)
		return true
	}
	est.Confidence += alpha * (1 - est.Confidence)
	est.From, est.Evidence = kind, why
	est.Samples++
	est.Updated = o.At
	return true
}

// busyNow is the debiased throughput while queued (see state.busy).
func (st *state) busyNow(window time.Duration) float64 {
	w := 1 - math.Exp(-st.busyTime.Seconds()/window.Seconds())
	if !(w > 0) {
		return st.mean
	}
	return st.busy / w
}

// sustainedNow is the debiased sustained throughput (see state.sustained).
func (st *state) sustainedNow(tau time.Duration) float64 {
	w := 1 - math.Exp(-st.observed.Seconds()/tau.Seconds())
	if !(w > 0) {
		return st.mean
	}
	return st.sustained / w
}

func finiteNonNeg(vs ...float64) bool {
	for _, v := range vs {
		if !(v >= 0) || math.IsInf(v, 1) {
			return false
		}
	}
	return true
}

func (e *Estimator) publish() {
	m := make(map[string]Estimate, len(e.st))
	for name, st := range e.st {
		m[name] = st.est
	}
	e.snap.Store(&m)
}

// PerReplica is the capacity per replica to plan cluster name with; false
// for a cluster the estimator does not know.
func (e *Estimator) PerReplica(name string) (float64, bool) {
	est, ok := (*e.snap.Load())[name]
	return est.PerReplica, ok
}

// Learned is the capacity per replica to plan cluster name with
// (Estimate.PerReplica) and the saturation throughput per replica to plan
// its shedding against: Estimate.Saturation less the backlog served
// within DrainTime (at most halved), as a standing queue must drain
// within a tick (token-cost/s); false for a cluster the estimator does
// not know.
func (e *Estimator) Learned(name string) (perReplica, saturation float64, ok bool) {
	est, ok := (*e.snap.Load())[name]
	sat := max(est.Saturation-est.Backlog/e.s.DrainTime.Seconds(), est.Saturation/2)
	return est.PerReplica, sat, ok
}

// Estimates returns every cluster's estimate, by name.
func (e *Estimator) Estimates() []Estimate {
	m := *e.snap.Load()
	out := make([]Estimate, 0, len(m))
	for _, est := range m {
		out = append(out, est)
	}
	slices.SortFunc(out, func(a, b Estimate) int { return strings.Compare(a.Cluster, b.Cluster) })
	return out
}
