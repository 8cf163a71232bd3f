package signals

import (
	"time"
)

// applyDiscovery merges a discovery result into cl's replica set. On error
// the known replicas stay and the error is recorded. New targets start
// (starting, probed at once); targets flagged draining drain; known
// replicas missing from the result drain for one refresh, then go.
func (m *Monitor) applyDiscovery(cl *cluster, targets []Target, err error, at time.Time) {
	cl.discovering = false
	cl.nextDiscovery = at.Add(cl.refresh)
	m.wakeBy(cl.nextDiscovery)
	if err != nil {
		if msg := err.Error(); msg != cl.discErr {
			m.log.Warn("discovery failed: keeping the last known replicas", "cluster", cl.cfg.Name, "error", msg)
			cl.discErr = msg
			m.dirty = true
		}
		return
	}
	if cl.discErr != "" {
		cl.discErr = ""
		m.dirty = true
	}
	initial := !cl.discoveredOnce
	cl.discoveredOnce = true
	seen := make(map[string]bool, len(targets))
	for _, t := range targets {
		seen[t.Address] = true
		r := cl.replicas[t.Address]
		if r == nil {
			r = newReplica(cl, t.Address, at, initial)
			cl.replicas[t.Address] = r
			m.changed = true
			m.wakeBy(at)
			if t.Draining {
				r.state, r.reason = StateDraining, "discovery: draining"
			}
			continue
		}
		switch {
		case t.Draining:
			r.removeAt = time.Time{}
			m.transition(r, at, StateDraining, "discovery: draining")
		case r.state == StateDraining:
			reason := "discovery: no longer draining"
			if !r.removeAt.IsZero() {
				reason = "discovery: back"
			}
			r.removeAt = time.Time{}
			r.okRun = 0
			m.transition(r, at, StateStarting, reason)
			r.nextAt = at
			m.wakeBy(at)
		}
	}
	for addr, r := range cl.replicas {
		if seen[addr] || !r.removeAt.IsZero() {
			continue
		}
		r.removeAt = at.Add(cl.refresh)
		if r.state == StateDraining {
			r.reason, m.changed = "discovery: removed", true
		}
		m.transition(r, at, StateDraining, "discovery: removed")
		m.wakeBy(r.removeAt)
	}
	for _, r := range cl.replicas {
		m.updateSaturation(r)
	}
}
