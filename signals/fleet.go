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
	if cl.rediscover { // the watch reported a change while this one ran
		cl.rediscover, cl.nextDiscovery = false, at
	}
	m.wakeBy(cl.nextDiscovery)
	if err != nil {
		if msg := err.Error(); msg != cl.discErr {
			m.log.Warn("discovery failed: keeping the last known replicas", "cluster", cl.cfg.Name, "error", msg)
			if cl.discErr == "" {
				cl.discErrSince = at
			}
			cl.discErr = msg
			m.dirty = true
		}
		return
	}
	if cl.discErr != "" {
		m.log.Info("discovery works again", "cluster", cl.cfg.Name, "failed_for", at.Sub(cl.discErrSince).Round(time.Millisecond))
		cl.discErr, cl.discErrSince = "", time.Time{}
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
			r.zone = t.Zone
			cl.replicas[t.Address] = r
			m.changed = true
			m.wakeBy(at)
			if t.Draining {
				r.state, r.reason = StateDraining, drainReason(t)
			}
			continue
		}
		if r.zone != t.Zone {
			r.zone, m.dirty = t.Zone, true
		}
		switch {
		case t.Draining:
			r.removeAt = time.Time{}
			if why := drainReason(t); r.state == StateDraining && r.reason != why {
				r.reason, m.changed = why, true // e.g. not ready, then terminating
			}
			m.transition(r, at, StateDraining, drainReason(t))
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

// drainReason is the reason of a replica that discovery drains.
func drainReason(t Target) string {
	if t.Why == "" {
		return "discovery: draining"
	}
	return "discovery: " + t.Why
}
