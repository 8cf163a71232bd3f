package envoysim

import "time"

// syncMembers reconciles the runtime's hosts with specs, as
// BaseDynamicClusterImpl::updateDynamicHostList does (source/common/
// upstream/upstream_impl.cc): a host matched by address keeps its state and
// takes the new weight and EDS health; a new host starts FAILED_ACTIVE_HC
// when the cluster is health checked (and PENDING_ACTIVE_HC, excluded from
// load balancing, with ignore_new_hosts_until_first_hc); a host no longer
// listed is kept as PENDING_DYNAMIC_REMOVAL while health checking is on,
// ignore_health_on_host_removal is off and it is neither failing active
// health checks nor FAILED_EDS_HEALTH, and removed otherwise. A pending host
// that then fails its health check is removed at the next rebuild, as
// EdsClusterImpl::reloadHealthyHostsHelper does. The health checker and the
// outlier detector follow the membership.
func (rt *clusterRuntime) syncMembers(specs []hostSpec) []*hostState {
	rt.mu.Lock()
	hc := rt.cfg.hc != nil
	seen := make(map[string]bool, len(specs))
	final := make([]*hostState, 0, len(specs))
	var removed []*hostState
	for _, sp := range specs {
		if seen[sp.addr] {
			continue
		}
		seen[sp.addr] = true
		hs := rt.byAddr[sp.addr]
		if hs == nil {
			hs = &hostState{addr: sp.addr}
			if hc {
				hs.failedActiveHC = true
				hs.pendingActiveHC = rt.cfg.warmHosts
			}
		}
		hs.pendingRemoval = false
		hs.weight = sp.weight
		hs.eds = healthOf(sp.health)
		final = append(final, hs)
	}
	for _, hs := range rt.members {
		if seen[hs.addr] {
			continue
		}
		if hc && !rt.cfg.ignoreHealthOnRemoval && !hs.failedActiveHC && hs.eds != hostUnhealthy {
			hs.pendingRemoval = true
			final = append(final, hs)
			continue
		}
		removed = append(removed, hs)
	}
	rt.members = final
	clear(rt.byAddr)
	for _, hs := range final {
		rt.byAddr[hs.addr] = hs
	}
	first := !rt.membersKnown
	rt.membersKnown = true
	if rt.od != nil {
		rt.od.removedLocked(removed)
	}
	rt.mu.Unlock()
	if rt.hc != nil {
		rt.hc.setMembers(final, first)
	}
	return final
}

// hostView is a host as one snapshot sees it.
type hostView struct {
	st         *hostState
	weight     uint32
	health     hostHealth
	excluded   bool
	lastHCPass time.Time
}

// view reads the hosts' state for a snapshot at now, applying
// EdfLoadBalancerBase::recalculateHostsInSlowStart when slow start is on: a
// healthy host without a last health check pass time gets now, and the
// latest pass time within the window becomes latest_host_added_time_.
func (rt *clusterRuntime) view(now time.Time) (hosts []hostView, latestHostAdded time.Time) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	ss := rt.cfg.slowStart
	hosts = make([]hostView, 0, len(rt.members))
	for _, hs := range rt.members {
		v := hostView{st: hs, weight: hs.weight, health: hs.coarse(), excluded: hs.excluded()}
		if ss != nil && v.health == hostHealthy {
			passed := hs.lastHCPass
			if passed.IsZero() {
				passed = now
				hs.lastHCPass = now
			}
			if passed.After(rt.latestHostAdded) && now.Sub(passed) <= ss.window {
				rt.latestHostAdded = passed
			}
		}
		v.lastHCPass = hs.lastHCPass
		hosts = append(hosts, v)
	}
	return hosts, rt.latestHostAdded
}
