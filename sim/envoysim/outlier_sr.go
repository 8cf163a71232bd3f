package envoysim

import "math"

// hostRate is a host's success rate (percent) over the last interval.
type hostRate struct {
	hs   *hostState
	rate float64
}

// successRateLocked is DetectorImpl::processSuccessRateEjections for the
// external origin monitor (the only one fed without the local origin split).
// Hosts not ejected with a request volume over the last interval take part:
// with at least success_rate_minimum_hosts of volume
// success_rate_request_volume, a host whose rate is below
// mean − stdev × success_rate_stdev_factor / 1000 is ejected; with at least
// failure_percentage_minimum_hosts of volume
// failure_percentage_request_volume, a host whose failure percentage is at
// least failure_percentage_threshold is. Both are subject to their
// enforcing percentages (success rate 100 and failure percentage 0 by
// default). It reports whether a host was ejected.
func (od *outlierDetector) successRateLocked() bool {
	c := od.cfg
	n := uint64(len(od.rt.members))
	if n < c.successRateMinimumHosts && n < c.failurePercentageMinHosts {
		return false
	}
	var sr, fp []hostRate
	sum := 0.0
	for _, hs := range od.rt.members {
		b := hs.od.backup
		if hs.od.ejected || b.total == 0 {
			continue
		}
		rate := float64(b.success) * 100 / float64(b.total)
		if b.total >= c.successRateRequestVolume {
			sr = append(sr, hostRate{hs: hs, rate: rate})
			sum += rate
		}
		if b.total >= c.failurePercentageReqVolume {
			fp = append(fp, hostRate{hs: hs, rate: rate})
		}
	}
	changed := false
	if len(sr) > 0 && uint64(len(sr)) >= c.successRateMinimumHosts {
		mean := sum / float64(len(sr))
		variance := 0.0
		for _, r := range sr {
			variance += (r.rate - mean) * (r.rate - mean)
		}
		variance /= float64(len(sr))
		threshold := mean - float64(c.successRateStdevFactor)/1000*math.Sqrt(variance)
		for _, r := range sr {
			if r.rate < threshold && !r.hs.od.ejected {
				od.detected(ejectSuccessRate)
				changed = od.ejectLocked(r.hs, ejectSuccessRate) || changed
			}
		}
	}
	if len(fp) > 0 && uint64(len(fp)) >= c.failurePercentageMinHosts {
		for _, r := range fp {
			if 100-r.rate >= float64(c.failurePercentageThreshold) && !r.hs.od.ejected {
				od.detected(ejectFailurePercentage)
				changed = od.ejectLocked(r.hs, ejectFailurePercentage) || changed
			}
		}
	}
	return changed
}
