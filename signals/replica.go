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
	// readySince is when it last became ready (the staleness clock starts
	// no earlier); warmStart when it started warming.
	readySince, warmStart time.Time
	lastGood              time.Time
	lastErr               string
	metrics               Metrics
	tokens                float64
	tokensAt              time.Time
	tokensKnown           bool
	saturated             bool
	transitions           []Transition
	nextAt                time.Time
	scrapes               uint64
	inFlight              bool
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
// documentation for the state machine).
func (m *Monitor) applyScrape(r *replica, res scrapeResult, at time.Time) {
	r.inFlight = false
	if r.cl.replicas[r.addr] != r {
		return // removed while the scrape ran
	}
	r.scrapes++
	m.prom.scrapes.WithLabelValues(r.cl.cfg.Name, res.result).Inc()
	m.prom.duration.WithLabelValues(r.cl.cfg.Name).Observe(res.duration.Seconds())
	m.dirty = true
	initial := r.initial && !r.probed
	r.probed, r.initial = true, false
	interval := time.Duration(float64(m.sig.Interval.Std()) * (1 + m.jitter(r.addr, r.scrapes)))
	if !res.alive {
		r.okRun = 0
		r.failRun++
		r.lastErr = "health probe: " + res.err
		r.nextAt = at.Add(interval)
		if r.state != StateUnhealthy && r.failRun < m.sig.UnhealthyAfter {
			r.nextAt = at.Add(m.sig.RetryDelay.Std())
		}
		if r.state != StateDraining && r.state != StateUnhealthy && r.failRun >= m.sig.UnhealthyAfter {
			m.transition(r, at, StateUnhealthy, fmt.Sprintf("health probe: %s (%d in a row)", res.err, r.failRun))
		}
		m.updateSaturation(r)
		return
	}
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
	rate := r.metrics.TokensPerSecond
	if x.tokensKnown {
		if r.tokensKnown && at.After(r.tokensAt) {
			delta := x.tokens - r.tokens
			if delta < 0 {
				delta = x.tokens // counter reset: it restarted from 0 within the interval
			}
			rate = delta / at.Sub(r.tokensAt).Seconds()
		}
		r.tokens, r.tokensAt = x.tokens, at
	}
	r.tokensKnown = x.tokensKnown
	if !x.tokensKnown {
		rate = 0
	}
	x.metrics.TokensPerSecond = rate
	r.metrics = x.metrics
	r.lastGood, r.lastErr = at, ""
	return true
}

// timeTransitions applies the transitions that depend on time alone:
// warmup done, and staleness of a ready replica without good metrics.
func (m *Monitor) timeTransitions(r *replica, now time.Time) {
	switch r.state {
	case StateWarming:
		if !now.Before(r.warmStart.Add(m.sig.Warmup.Std())) {
			m.transition(r, now, StateReady, "warmup done")
		}
	case StateReady:
		if !now.Before(m.staleAt(r)) {
			m.transition(r, now, StateStale, fmt.Sprintf("no good metrics for %d intervals: %s", m.sig.StaleAfter, r.lastErr))
			m.updateSaturation(r) // a stale replica's load is unknown
		}
	}
}

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
		t = m.staleAt(r)
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
		sat = x.Waiting >= m.sig.SaturationQueue*max(x.Running, 1) || (x.KVKnown && x.KVUsage >= m.sig.SaturationKV)
	}
	if sat != r.saturated {
		r.saturated = sat
		m.changed = true
	}
}
