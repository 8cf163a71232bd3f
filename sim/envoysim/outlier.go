package envoysim

import (
	"context"
	"time"
)

// ejectionType is envoy.data.cluster.v3.OutlierEjectionType.
type ejectionType int

const (
	ejectConsecutive5xx ejectionType = iota
	ejectGatewayFailure
	ejectSuccessRate
	ejectFailurePercentage
)

// outlierHost is DetectorHostMonitorImpl's state. Guarded by
// clusterRuntime.mu.
type outlierHost struct {
	ejected        bool // FAILED_OUTLIER_CHECK
	consecutive5xx uint64
	consecutiveGW  uint64
	numEjections   uint32
	backoff        uint32 // eject_time_backoff_
	lastEjection   time.Time
	lastUnejection time.Time
	jitter         time.Duration
	cur, backup    srBucket // SuccessRateAccumulator buckets
}

type srBucket struct{ success, total uint64 }

// outlierDetector is DetectorImpl (source/common/upstream/
// outlier_detection_impl.cc) with split_external_local_origin_errors false:
// every result is an HTTP status, locally originated failures mapped by
// resultToHttpCode (connect failure and reset 503, timeout 504). Its state
// is guarded by clusterRuntime.mu.
type outlierDetector struct {
	cfg    *outlierConfig
	rt     *clusterRuntime
	active int // ejections_active
}

// run is the interval timer, until ctx is done.
func (od *outlierDetector) run(ctx context.Context) {
	for {
		if err := od.rt.clock.Sleep(ctx, od.cfg.interval); err != nil {
			return
		}
		od.rt.mu.Lock()
		changed := od.onIntervalLocked(od.rt.clock.Now())
		od.rt.mu.Unlock()
		if changed {
			od.rt.onChange()
		}
	}
}

// putHTTPCode is DetectorHostMonitorImpl::putHttpResponseCode: a 5xx
// counts towards consecutive_5xx, and a 502, 503 or 504 towards
// consecutive_gateway_failure (any other 5xx resets that one); anything else
// resets both and counts as a success for the success rate. Reaching a
// threshold (exactly, as Envoy compares with ==) is handled as
// onConsecutiveErrorWorker does, gateway failure first. Results for a host
// no longer in the cluster are dropped.
func (od *outlierDetector) putHTTPCode(hs *hostState, code int) {
	rt := od.rt
	rt.mu.Lock()
	if rt.byAddr[hs.addr] != hs {
		rt.mu.Unlock()
		return
	}
	o := &hs.od
	o.cur.total++
	var detected []ejectionType
	if code >= 500 && code <= 599 {
		if code == 502 || code == 503 || code == 504 {
			if o.consecutiveGW++; o.consecutiveGW == od.cfg.consecutiveGatewayFailure {
				detected = append(detected, ejectGatewayFailure)
			}
		} else {
			o.consecutiveGW = 0
		}
		if o.consecutive5xx++; o.consecutive5xx == od.cfg.consecutive5xx {
			detected = append(detected, ejectConsecutive5xx)
		}
	} else {
		o.cur.success++
		o.consecutive5xx, o.consecutiveGW = 0, 0
	}
	changed := false
	for _, t := range detected {
		if o.ejected {
			continue // onConsecutiveErrorWorker ignores ejected hosts, counters kept
		}
		od.detected(t)
		changed = od.ejectLocked(hs, t) || changed
		if t == ejectGatewayFailure {
			o.consecutiveGW = 0
		} else {
			o.consecutive5xx = 0
		}
	}
	rt.mu.Unlock()
	if changed {
		rt.onChange()
	}
}

// ejectLocked is DetectorImpl::ejectHost: refused (ejections_overflow) when
// 100 × (active + 1) / hosts exceeds max_ejection_percent, unless
// always_eject_one_host and nothing is ejected; then subject to the
// enforcing percentage. An ejection lasts
// min(base_ejection_time × backoff, max_ejection_time) + jitter, the backoff
// growing with each ejection while base × backoff < max + base.
func (od *outlierDetector) ejectLocked(hs *hostState, t ejectionType) bool {
	rt, c := od.rt, od.cfg
	pct := 100 * float64(od.active+1) / float64(len(rt.members))
	should := pct <= float64(c.maxEjectionPercent) || (c.alwaysEjectOneHost && od.active == 0)
	if !should {
		rt.stats.cluster(rt.cfg.name, func(s *ClusterStats) { s.OutlierEjectionsOverflow++ })
		return false
	}
	if !od.enforce(t) {
		return false
	}
	od.active++
	o := &hs.od
	o.ejected = true
	o.numEjections++
	o.lastEjection = rt.clock.Now()
	o.jitter = 0
	if j := c.maxEjectionTimeJitter.Milliseconds(); j > 0 {
		o.jitter = time.Duration(rt.rand()%uint64(j+1)) * time.Millisecond
	}
	if time.Duration(o.backoff)*c.baseEjectionTime < c.maxEjectionTime+c.baseEjectionTime {
		o.backoff++
	}
	rt.stats.cluster(rt.cfg.name, func(s *ClusterStats) {
		s.OutlierEjectionsEnforced++
		s.OutlierEjectionsActive = uint64(od.active)
	})
	return true
}

// enforce is enforceEjection: runtime featureEnabled with the enforcing
// percentage (random % 100 < percent; 100 always, 0 never).
func (od *outlierDetector) enforce(t ejectionType) bool {
	pct := [...]uint64{
		ejectConsecutive5xx:    od.cfg.enforcingConsecutive5xx,
		ejectGatewayFailure:    od.cfg.enforcingGatewayFailure,
		ejectSuccessRate:       od.cfg.enforcingSuccessRate,
		ejectFailurePercentage: od.cfg.enforcingFailurePercentage,
	}[t]
	switch {
	case pct >= 100:
		return true
	case pct == 0:
		return false
	}
	return od.rt.rand()%100 < pct
}

func (od *outlierDetector) detected(t ejectionType) {
	od.rt.stats.cluster(od.rt.cfg.name, func(s *ClusterStats) {
		switch t {
		case ejectConsecutive5xx:
			s.OutlierDetectedConsecutive5xx++
		case ejectGatewayFailure:
			s.OutlierDetectedGatewayFailure++
		case ejectSuccessRate:
			s.OutlierDetectedSuccessRate++
		case ejectFailurePercentage:
			s.OutlierDetectedFailurePercentage++
		}
	})
}

// unejectLocked is DetectorImpl::unejectHost: the consecutive counters are
// reset so that a few new errors do not eject the host again at once.
func (od *outlierDetector) unejectLocked(hs *hostState, now time.Time) {
	od.active--
	o := &hs.od
	o.ejected = false
	o.consecutive5xx, o.consecutiveGW = 0, 0
	o.lastUnejection = now
	od.rt.stats.cluster(od.rt.cfg.name, func(s *ClusterStats) { s.OutlierEjectionsActive = uint64(od.active) })
}

// removedLocked forgets removed hosts (the member update callback).
func (od *outlierDetector) removedLocked(removed []*hostState) {
	for _, hs := range removed {
		if hs.od.ejected {
			od.active--
		}
	}
	od.rt.stats.cluster(od.rt.cfg.name, func(s *ClusterStats) { s.OutlierEjectionsActive = uint64(od.active) })
}

// onIntervalLocked is DetectorImpl::onIntervalTimer: unejects hosts whose
// ejection time elapsed, rotates the success rate buckets, runs success rate
// and failure percentage detection on the interval that just ended, and
// decrements the ejection backoff of hosts that stayed unejected for an
// interval. It reports whether any host changed.
func (od *outlierDetector) onIntervalLocked(now time.Time) bool {
	c := od.cfg
	changed := false
	for _, hs := range od.rt.members {
		o := &hs.od
		if o.ejected && min(c.baseEjectionTime*time.Duration(o.backoff), c.maxEjectionTime)+o.jitter <= now.Sub(o.lastEjection) {
			od.unejectLocked(hs, now)
			changed = true
		}
		o.backup, o.cur = o.cur, srBucket{}
	}
	changed = od.successRateLocked() || changed
	for _, hs := range od.rt.members {
		o := &hs.od
		if !o.ejected && !o.lastUnejection.IsZero() && now.Sub(o.lastUnejection) >= c.interval && o.backoff > 0 {
			o.backoff--
		}
	}
	return changed
}
