package signals

import (
	"fmt"
	"strings"
	"time"
)

// maxTransitions is how many transitions a replica keeps.
const maxTransitions = 8

// replica is the loop's mutable view of one replica. Only the loop
// goroutine touches it.
type replica struct {
	cl     *cluster
	addr   string
	zone   string
	state  State
	reason string
	since  time.Time
	// initial: known at the monitor's first round (static endpoint or
	// first discovery); healthy on its first probe means ready at once.
	initial bool
	probed  bool
	// removeAt is set when the replica left discovery: it is removed then.
	removeAt time.Time
	okRun    int // consecutive good health probes
	failRun  int // consecutive failed health probes
	// The current failure streak (failRun > 0): when its first failure
	// was dispatched (restarted when blindness ends), whether the replica
	// took traffic before it, and whether every failure of it was silent.
	failSince     time.Time
	servingBefore bool
	silent        bool
	// readySince is when it last became ready (the staleness clock starts
	// no earlier); warmStart when it started warming.
	readySince, warmStart time.Time
	lastGood              time.Time
	lastErr               string
	metrics               Metrics
	tokens                float64
	tokensAt              time.Time
	tokensKnown           bool
	// firstTokens and fastFirstTokens are the TTFT histogram's counters
	// at ttftAt, the last good scrape that read them.
	firstTokens, fastFirstTokens, ttftSum float64
	ttftAt                                time.Time
	ttftKnown                             bool
	saturated                             bool
	transitions                           []Transition
	nextAt                                time.Time
	scrapes                               uint64
	inFlight                              bool
}

func newReplica(cl *cluster, addr string, now time.Time, initial bool) *replica {
	reason := "discovered"
	if cl.static {
		reason = "configured endpoint"
	}
	return &replica{cl: cl, addr: addr, state: StateStarting, reason: reason, since: now, initial: initial, nextAt: now}
}

// transition moves r to state to, recording why. Transitions are copied
// into a fresh slice so published snapshots never see a later append.
func (m *Monitor) transition(r *replica, at time.Time, to State, reason string) {
	if r.state == to {
		return
	}
	keep := r.transitions
	if len(keep) >= maxTransitions {
		keep = keep[len(keep)-maxTransitions+1:]
	}
	t := make([]Transition, 0, len(keep)+1)
	t = append(t, keep...)
	t = append(t, Transition{At: at, From: r.state, To: to, Reason: reason})
	r.transitions = t
	m.log.Info("replica state", "cluster", r.cl.cfg.Name, "address", r.addr, "from", string(r.state), "to", string(to), "reason", reason)
	r.state, r.reason, r.since = to, reason, at
	if to == StateReady {
		r.readySince = at
	}
	m.changed = true
}

// becomeServing moves a replica that proved healthy to warming, or to
// ready when there is no warmup.
func (m *Monitor) becomeServing(r *replica, at time.Time, reason string) {
	if m.sig.Warmup.Std() <= 0 {
		m.transition(r, at, StateReady, reason)
		return
	}
	r.warmStart = at
	m.transition(r, at, StateWarming, reason)
}

// applyScrape applies one scrape's outcome to r (see the package
// documentation for the state machine and blindness).
func (m *Monitor) applyScrape(r *replica, res scrapeResult, at time.Time) {
	r.inFlight = false
	if r.cl.replicas[r.addr] != r {
		return // removed while the scrape ran
	}
	r.scrapes++
	m.prom.scrapes.WithLabelValues(r.cl.cfg.Name, res.result).Inc()
	m.prom.duration.WithLabelValues(r.cl.cfg.Name).Observe(res.duration.Seconds())
	m.dirty = true
	interval := time.Duration(float64(m.sig.Interval.Std()) * (1 + m.jitter(r.addr, r.scrapes)))
	if res.slotWait > m.sig.Interval.Std() {
		m.noteLag(at.Add(res.slotWait), fmt.Sprintf("scrapes waited %s for a worker slot (concurrency %d, interval %s)",
			res.slotWait.Round(time.Millisecond), m.sig.Concurrency, m.sig.Interval))
		if !res.alive && res.silent {
			// ILB's own queue, not the replica: this probe is not held
			// against it.
			r.nextAt = at.Add(interval)
			return
		}
	}
	if !res.alive {
		m.applyFailure(r, res, at, interval)
		return
	}
	initial := r.initial && !r.probed
	r.probed, r.initial = true, false
	r.failRun = 0
	r.okRun++
	r.nextAt = at.Add(interval)
	good := m.applyMetrics(r, res, at)
	switch r.state {
	case StateStarting:
		if initial {
			m.transition(r, at, StateReady, "healthy on the first probe round")
		} else {
			m.becomeServing(r, at, "health probe ok")
		}
	case StateUnhealthy:
		if r.okRun >= m.sig.HealthyAfter {
			m.becomeServing(r, at, fmt.Sprintf("recovered: %d health probes ok in a row", r.okRun))
		}
	case StateStale:
		if good {
			m.transition(r, at, StateReady, "metrics back")
		}
	}
	m.timeTransitions(r, at)
	m.updateSaturation(r)
}

// applyFailure applies a failed health probe. A definite failure counts
// as it always has: UnhealthyAfter in a row make the replica unhealthy. A
// streak of silent failures makes it unhealthy only once it has lasted a
// window and the monitor is not blind; until then the replica keeps its
// state (held), and a starting replica stays one that may be ready at
// once.
func (m *Monitor) applyFailure(r *replica, res scrapeResult, at time.Time, interval time.Duration) {
	if r.failRun == 0 {
		r.failSince, r.servingBefore, r.silent = at, r.state.taking(), true
	}
	r.silent = r.silent && res.silent
	if !r.silent {
		// A silent failure says nothing about the replica: one that
		// answers after it is still ready on its first good probe.
		r.probed, r.initial = true, false
	}
	r.okRun = 0
	r.failRun++
	r.lastErr = "health probe: " + res.err
	r.nextAt = at.Add(interval)
	if r.state != StateUnhealthy && r.failRun < m.sig.UnhealthyAfter {
		r.nextAt = at.Add(m.sig.RetryDelay.Std())
	}
	if r.silent {
		m.blindDirty = true
		if m.held(r) {
			if m.blind == nil {
				m.evalBlind(at) // a streak may be due: decide with this result counted
			}
			m.timeTransitions(r, at)
		}
	} else if r.state != StateDraining && r.state != StateUnhealthy && r.failRun >= m.sig.UnhealthyAfter {
		m.transition(r, at, StateUnhealthy, m.unhealthyReason(r))
	}
	m.updateSaturation(r)
}

// unhealthyReason is the reason of a transition to unhealthy, e.g.
// "health probe: HTTP 500 (2 in a row)".
func (m *Monitor) unhealthyReason(r *replica) string {
	return fmt.Sprintf("%s (%d in a row)", r.lastErr, r.failRun)
}

// applyMetrics stores the metrics of a live replica's scrape and reports
// whether they were good (load known). Bad metrics keep the last good
// values (their age is LastScrape) and replace Problems.
func (m *Monitor) applyMetrics(r *replica, res scrapeResult, at time.Time) bool {
	if res.x == nil {
		r.lastErr = "metrics: " + res.err
		r.metrics.Problems = []string{r.lastErr}
		return false
	}
	x := *res.x
	if !x.good {
		r.lastErr = "metrics unusable: " + strings.Join(x.metrics.Problems, "; ")
		r.metrics.Problems = x.metrics.Problems
		return false
	}
	rate, pRate, gRate := r.metrics.TokensPerSecond, r.metrics.PromptTokensPerSecond, r.metrics.GenerationTokensPerSecond
	known := r.metrics.RatesKnown
	if x.tokensKnown {
		if r.tokensKnown && at.After(r.tokensAt) {
			known = true
			secs := at.Sub(r.tokensAt).Seconds()
			pRate = counterDelta(r.metrics.PromptTokens, x.metrics.PromptTokens) / secs
			gRate = counterDelta(r.metrics.GenerationTokens, x.metrics.GenerationTokens) / secs
			rate = counterDelta(r.tokens, x.tokens) / secs
		}
		r.tokens, r.tokensAt = x.tokens, at
	}
	r.tokensKnown = x.tokensKnown
	if !x.tokensKnown {
		rate, pRate, gRate, known = 0, 0, 0, false
	}
	x.metrics.RatesKnown = known
	r.ttftRates(&x, at)
	x.metrics.TokensPerSecond = rate
	x.metrics.PromptTokensPerSecond, x.metrics.GenerationTokensPerSecond = pRate, gRate
	r.metrics = x.metrics
	r.lastGood, r.lastErr = at, ""
	return true
}

// ttftRates turns the TTFT histogram's counters into rates between the
// last good scrape that read them and this one (at).
func (r *replica) ttftRates(x *extraction, at time.Time) {
	prevKnown, prevAt := r.ttftKnown, r.ttftAt
	prevAll, prevFast, prevSum := r.firstTokens, r.fastFirstTokens, r.ttftSum
	r.ttftKnown = x.ttftKnown
	if !x.ttftKnown {
		return
	}
	r.firstTokens, r.fastFirstTokens, r.ttftSum, r.ttftAt = x.firstTokens, x.fastFirstTokens, x.ttftSum, at
	// The mean TTFT stays the last measured one through intervals without
	// first tokens: an idle engine is as fast as it last was.
	x.metrics.TTFTMeanSeconds, x.metrics.TTFTMeanKnown = r.metrics.TTFTMeanSeconds, r.metrics.TTFTMeanKnown
	if !prevKnown || !at.After(prevAt) {
		return
	}
	secs := at.Sub(prevAt).Seconds()
	all := counterDelta(prevAll, x.firstTokens)
	slow := all - min(counterDelta(prevFast, x.fastFirstTokens), all)
	x.metrics.FirstTokensPerSecond, x.metrics.SlowFirstTokensPerSecond = all/secs, slow/secs
	x.metrics.TTFTKnown = true
	if all > 0 && x.firstTokens >= prevAll {
		if d := x.ttftSum - prevSum; d >= 0 {
			x.metrics.TTFTMeanSeconds, x.metrics.TTFTMeanKnown = d/all, true
		}
	}
}

// counterDelta is how much a counter grew from prev to now; a counter
// that went down was reset (the engine restarted within the interval) and
// counted from 0.
func counterDelta(prev, now float64) float64 {
	if now < prev {
		return now
	}
	return now - prev
}

// timeTransitions applies the transitions that depend on time alone: a
// silent failure streak that has lasted a window while the monitor is not
// blind, warmup done, and staleness of a ready replica without good
// metrics (see staleDue).
func (m *Monitor) timeTransitions(r *replica, now time.Time) {
	if due := m.silentDueAt(r); !due.IsZero() && !now.Before(due) {
		m.transition(r, now, StateUnhealthy, m.unhealthyReason(r))
		m.updateSaturation(r)
		return
	}
	switch r.state {
	case StateWarming:
		if !now.Before(r.warmStart.Add(m.sig.Warmup.Std())) {
			m.transition(r, now, StateReady, "warmup done")
		}
	case StateReady:
		if m.staleDue(r) && !now.Before(m.staleAt(r)) {
			m.transition(r, now, StateStale, fmt.Sprintf("no good metrics for %d intervals: %s", m.sig.StaleAfter, r.lastErr))
			m.updateSaturation(r) // a stale replica's load is unknown
		}
	}
}

// staleDue reports whether a ready replica may go stale: its latest
// health probe answered (stale is "alive without good metrics"; a failing
// one goes unhealthy, or is held) and the monitor is not blind (the last
// known state holds).
func (m *Monitor) staleDue(r *replica) bool { return r.failRun == 0 && m.blind == nil }

// staleAt is when a ready replica without new good metrics goes stale.
func (m *Monitor) staleAt(r *replica) time.Time {
	ref := r.readySince
	if r.lastGood.After(ref) {
		ref = r.lastGood
	}
	return ref.Add(time.Duration(m.sig.StaleAfter) * m.sig.Interval.Std())
}

// deadline is the next time r needs the loop: a scrape, a removal, or a
// time transition.
func (m *Monitor) deadline(r *replica) time.Time {
	var d time.Time
	switch {
	case !r.removeAt.IsZero():
		return r.removeAt
	case !r.inFlight:
		d = r.nextAt
	}
	var t time.Time
	switch r.state {
	case StateWarming:
		t = r.warmStart.Add(m.sig.Warmup.Std())
	case StateReady:
		if m.staleDue(r) {
			t = m.staleAt(r)
		}
	}
	if due := m.silentDueAt(r); !due.IsZero() && (t.IsZero() || due.Before(t)) {
		t = due
	}
	if d.IsZero() || (!t.IsZero() && t.Before(d)) {
		d = t
	}
	return d
}

// updateSaturation recomputes r's saturation mark; a flip is a state
// change of the snapshot.
func (m *Monitor) updateSaturation(r *replica) {
	sat := false
	if (r.state == StateReady || r.state == StateWarming) && !r.lastGood.IsZero() {
		x := r.metrics
		sat = m.sig.Saturated(x.Waiting, x.Running, x.KVKnown, x.KVUsage)
	}
	if sat != r.saturated {
		r.saturated = sat
		m.changed = true
	}
}
