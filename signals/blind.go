package signals

import (
	"fmt"
	"strings"
	"time"
)

// maxBlindClusters is how many clusters a blind reason names; the rest
// are counted.
const maxBlindClusters = 3

// window is how close in time silent failures must be to count as "at
// once", and how long a silent failure streak must last before it makes
// a replica unhealthy: two intervals, so that every replica has been
// probed at least once (with its jitter and its timeout, Timeout <=
// Interval) since the first failure of the streak.
func (m *Monitor) window() time.Duration { return 2 * m.sig.Interval.Std() }

// noteLag records a sign that the monitor itself is behind (its loop woke
// late, or scrapes waited for a worker slot): it counts as blind for one
// window after now.
func (m *Monitor) noteLag(now time.Time, reason string) {
	m.lagUntil, m.lagReason = now.Add(m.window()), reason
	m.blindDirty = true
}

// evalBlind decides at now whether the monitor is blind, logs and
// publishes a change. Leaving blindness restarts the streak clock of every
// replica still held on silent failures: they go unhealthy only after one
// more window of silent failures seen with working eyes.
func (m *Monitor) evalBlind(now time.Time) {
	m.blindDirty = false
	var why []string
	if r := m.silentReason(now); r != "" {
		why = append(why, r)
	}
	if now.Before(m.lagUntil) {
		why = append(why, m.lagReason)
	}
	reason := strings.Join(why, "; ")
	switch {
	case reason != "" && m.blind == nil:
		m.blind = &Blind{Reason: reason, Since: now}
		m.changed = true
		m.log.Warn("signals blind: replicas failing silently keep their last known state and the controller keeps its weights",
			"reason", reason)
	case reason == "" && m.blind != nil:
		m.log.Info("signals no longer blind", "blind_for", now.Sub(m.blind.Since).String(), "was", m.blind.Reason)
		m.blind = nil
		m.changed = true
		for _, cl := range m.clusters {
			for _, r := range cl.replicas {
				if r.state.taking() && r.failRun > 0 && r.silent && r.failSince.Before(now) {
					r.failSince = now
					m.wakeBy(m.deadline(r))
				}
			}
		}
	case reason != "" && reason != m.blind.Reason:
		m.blind = &Blind{Reason: reason, Since: m.blind.Since}
		m.dirty = true
	}
}

// silentReason returns why rule (a) holds at now, or "": in at least two
// clusters, more than Signals.BlindFraction (or all) of the replicas that
// were serving are in a streak of silent failures. The replicas counted
// are those taking traffic now (serving or starting: replicas held while
// blind stay so) and those whose failure streak began within the window
// and which were taking traffic before it (a replica that has just gone
// unhealthy); a replica that went away long ago counts for nothing.
func (m *Monitor) silentReason(now time.Time) string {
	since := now.Add(-m.window())
	var parts []string
	for _, cl := range m.clusters {
		serving, silent := 0, 0
		for _, r := range cl.replicas {
			streak := r.failRun > 0 && r.servingBefore
			recent := streak && !r.failSince.Before(since) // has just gone unhealthy
			if !r.removeAt.IsZero() || r.state == StateDraining || (!r.state.taking() && !recent) {
				continue
			}
			serving++
			if streak && r.silent {
				silent++
			}
		}
		if silent > 0 && (silent == serving || float64(silent) > m.sig.BlindFraction*float64(serving)) {
			parts = append(parts, fmt.Sprintf("%d of %d of %s", silent, serving, cl.cfg.Name))
		}
	}
	if len(parts) < 2 {
		return ""
	}
	if n := len(parts); n > maxBlindClusters {
		parts = append(parts[:maxBlindClusters], fmt.Sprintf("and %d more clusters", n-maxBlindClusters))
	}
	return "silent health probe failures (timeouts, no answer) at once: " + strings.Join(parts, ", ")
}

// held reports whether r's failure streak is silent and has reached
// UnhealthyAfter without making it unhealthy: the monitor is blind, or
// the streak is younger than the window (it may yet turn out to be the
// monitor's own blindness).
func (m *Monitor) held(r *replica) bool {
	return r.state.taking() && r.failRun >= m.sig.UnhealthyAfter && r.silent
}

// silentDueAt is when r's silent streak makes it unhealthy, zero when it
// does not (not held, or blind).
func (m *Monitor) silentDueAt(r *replica) time.Time {
	if m.blind != nil || !m.held(r) {
		return time.Time{}
	}
	return r.failSince.Add(m.window())
}
