package envoysim

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// hcOutcome is the outcome of one health check probe.
type hcOutcome int

const (
	hcSucceeded      hcOutcome = iota
	hcDegraded                 // x-envoy-degraded on an expected status
	hcFailed                   // ACTIVE failure: marks the host unhealthy at once
	hcRetriable                // ACTIVE failure with a retriable status: counts towards unhealthy_threshold
	hcNetworkFailure           // NETWORK: connection failure or reset
	hcNetworkTimeout           // NETWORK_TIMEOUT: no complete response within timeout
)

// hcResult is a probe's outcome and whether the response asked for an
// immediate exclusion (x-envoy-immediate-health-check-fail).
type hcResult struct {
	outcome       hcOutcome
	immediateFail bool
}

// transition is HealthTransition.
type transition int

const (
	unchanged transition = iota
	changed
	changePending
)

// healthChecker is HealthCheckerImplBase (source/extensions/health_checkers/
// common/health_checker_base_impl.cc): one session per host, started when
// the host joins the cluster and stopped when it leaves. Each session probes
// at once (initial_jitter 0), then after each result waits an interval
// chosen by HealthCheckerImplBase::interval.
type healthChecker struct {
	rt        *clusterRuntime
	cfg       *healthCheckConfig
	transport *http.Transport
	probe     func(ctx context.Context, addr string) hcResult

	notify chan struct{}

	mu          sync.Mutex
	desired     []*hostState
	pendingInit map[*hostState]bool // initial hosts without a first result yet
}

func newHealthChecker(rt *clusterRuntime) *healthChecker {
	hc := &healthChecker{rt: rt, cfg: rt.cfg.hc, notify: make(chan struct{}, 1)}
	hc.transport = hc.newTransport()
	if hc.cfg.kind == hcGRPC {
		hc.probe = hc.probeGRPC
	} else {
		hc.probe = hc.probeHTTP
	}
	return hc
}

// setMembers hands the current hosts to the session manager. The first
// membership is the set ClusterImplBase::onInitDone waits for: the cluster is
// initialized once each of them got a first result (or left); with no hosts
// it is initialized at once.
func (hc *healthChecker) setMembers(members []*hostState, first bool) {
	hc.mu.Lock()
	hc.desired = members
	if first {
		hc.pendingInit = make(map[*hostState]bool, len(members))
		for _, hs := range members {
			hc.pendingInit[hs] = true
		}
	}
	empty := first && len(members) == 0
	hc.mu.Unlock()
	if empty {
		hc.rt.mu.Lock()
		hc.rt.initialized = true
		hc.rt.mu.Unlock()
	}
	select {
	case hc.notify <- struct{}{}:
	default:
	}
}

// run starts and stops sessions as the membership changes, until ctx is
// done; it then stops every session and waits for them.
func (hc *healthChecker) run(ctx context.Context) {
	sessions := map[*hostState]context.CancelFunc{}
	var wg sync.WaitGroup
	defer func() {
		for _, cancel := range sessions {
			cancel()
		}
		wg.Wait()
		hc.transport.CloseIdleConnections()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hc.notify:
		}
		hc.mu.Lock()
		desired := hc.desired
		hc.mu.Unlock()
		want := make(map[*hostState]bool, len(desired))
		for _, hs := range desired {
			want[hs] = true
		}
		for hs, cancel := range sessions {
			if !want[hs] {
				cancel()
				delete(sessions, hs)
				if hc.firstResult(hs) {
					hc.rt.onChange()
				}
			}
		}
		for _, hs := range desired {
			if sessions[hs] == nil {
				sctx, cancel := context.WithCancel(ctx)
				sessions[hs] = cancel
				wg.Go(func() { hc.session(sctx, hs) })
			}
		}
	}
}

// hcSession is a session's counters (ActiveHealthCheckSession).
type hcSession struct {
	first        bool
	numHealthy   uint32
	numUnhealthy uint32
}

// session probes hs until ctx is done.
func (hc *healthChecker) session(ctx context.Context, hs *hostState) {
	s := &hcSession{first: true}
	name := hc.rt.cfg.name
	for {
		hc.rt.stats.cluster(name, func(c *ClusterStats) { c.HealthCheckAttempts++ })
		pctx, cancel := context.WithTimeout(ctx, hc.cfg.timeout)
		res := hc.probe(pctx, hs.addr)
		cancel()
		if ctx.Err() != nil {
			return
		}
		healthy, tr := hc.apply(hs, s, res)
		refresh := tr == changed
		if healthy && hc.unejectOnSuccess(hs) {
			refresh = true
		}
		if hc.firstResult(hs) {
			refresh = true
		}
		if refresh {
			hc.rt.onChange()
		}
		if err := hc.rt.clock.Sleep(ctx, hc.interval(healthy, tr)); err != nil {
			return
		}
	}
}

// apply is ActiveHealthCheckSession::handleSuccess and setUnhealthy: the
// first result of a session moves a failed host to healthy at once, later
// ones need healthy_threshold consecutive successes; an ACTIVE failure (an
// unexpected status, a non-SERVING gRPC answer) fails a healthy host at once,
// NETWORK and NETWORK_TIMEOUT failures and retriable statuses need
// unhealthy_threshold consecutive ones. A success while failed records the
// last health check pass time (slow start). PENDING_ACTIVE_HC is cleared by
// any result. It reports whether the probe succeeded and the transition.
func (hc *healthChecker) apply(hs *hostState, s *hcSession, res hcResult) (healthy bool, tr transition) {
	rt := hc.rt
	now := rt.clock.Now()
	network := res.outcome == hcNetworkFailure || res.outcome == hcNetworkTimeout
	rt.mu.Lock()
	switch res.outcome {
	case hcSucceeded, hcDegraded:
		healthy = true
		s.numUnhealthy = 0
		if hs.failedActiveHC {
			if s.first {
				tr = changed
			} else if s.numHealthy++; s.numHealthy == hc.cfg.healthyThreshold {
				tr = changed
			} else {
				tr = changePending
			}
			if tr == changed {
				hs.immediateHCFail = false
				hs.failedActiveHC = false
			}
			hs.lastHCPass = now
		}
	default:
		if res.immediateFail {
			hs.immediateHCFail = true
		}
		s.numHealthy = 0
		if !hs.failedActiveHC {
			hard := !network && res.outcome != hcRetriable
			if hard {
				tr = changed
			} else if s.numUnhealthy++; s.numUnhealthy == hc.cfg.unhealthyThreshold {
				tr = changed
			} else {
				tr = changePending
			}
			if tr == changed {
				hs.failedActiveHC = true
			}
		}
	}
	if hs.pendingActiveHC {
		hs.pendingActiveHC = false
		tr = changed
	}
	if healthy {
		if degraded := res.outcome == hcDegraded; degraded != hs.degradedActiveHC {
			hs.degradedActiveHC = degraded
			if tr == unchanged {
				tr = changed
			}
		}
	}
	rt.mu.Unlock()
	s.first = false
	rt.stats.cluster(rt.cfg.name, func(c *ClusterStats) {
		if healthy {
			c.HealthCheckSuccesses++
			return
		}
		c.HealthCheckFailures++
		if network {
			c.HealthCheckNetworkFailures++
		}
	})
	return healthy, tr
}

// unejectOnSuccess is the outlier detector's host check callback
// (DetectorImpl::initialize, successful_active_health_check_uneject_host):
// a passing check unejects an ejected host that is not failing active health
// checks.
func (hc *healthChecker) unejectOnSuccess(hs *hostState) bool {
	od := hc.rt.od
	if od == nil || !od.cfg.successfulActiveHCUnejectHC {
		return false
	}
	hc.rt.mu.Lock()
	defer hc.rt.mu.Unlock()
	if hs.failedActiveHC || !hs.od.ejected {
		return false
	}
	od.unejectLocked(hs, hc.rt.clock.Now())
	return true
}

// firstResult accounts for hs in the cluster's initialization and reports
// whether that completed it.
func (hc *healthChecker) firstResult(hs *hostState) bool {
	hc.mu.Lock()
	if !hc.pendingInit[hs] {
		hc.mu.Unlock()
		return false
	}
	delete(hc.pendingInit, hs)
	done := len(hc.pendingInit) == 0
	hc.mu.Unlock()
	if done {
		hc.rt.mu.Lock()
		hc.rt.initialized = true
		hc.rt.mu.Unlock()
	}
	return done
}

// interval is HealthCheckerImplBase::interval: until the cluster made a
// connection, no_traffic_interval (no_traffic_healthy_interval after a
// success that is not pending a transition); afterwards interval or
// unhealthy_interval, or the edge intervals while a transition is pending.
// Jitter is refused by the policy.
func (hc *healthChecker) interval(healthy bool, tr transition) time.Duration {
	c := hc.cfg
	var d time.Duration
	switch {
	case !hc.rt.traffic.Load() && healthy && tr != changePending:
		d = c.noTrafficHealthyInterval
	case !hc.rt.traffic.Load():
		d = c.noTrafficInterval
	case !healthy && tr == changePending:
		d = c.unhealthyEdgeInterval
	case !healthy:
		d = c.unhealthyInterval
	case tr == changePending:
		d = c.healthyEdgeInterval
	default:
		d = c.interval
	}
	return max(d, time.Millisecond)
}
