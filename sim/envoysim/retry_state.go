package envoysim

import (
	"slices"
	"time"
)

// resetReason is the Http::StreamResetReason of a failed attempt.
type resetReason int

const (
	resetConnectFailure resetReason = iota // LocalConnectionFailure, RemoteConnectionFailure, ConnectionTimeout
	resetTermination                       // ConnectionTermination
	resetLocal                             // LocalReset (per try timeout)
	resetOverflow                          // Overflow (circuit breaker)
)

// retryStatus is RetryStatus.
type retryStatus int

const (
	retryNo retryStatus = iota
	retryYes
	retryNoOverflow
	retryNoLimitExceeded
)

// retryState is RetryStateImpl (source/common/router/retry_state_impl.cc)
// for one request: the retries left, the retry resource it holds while a
// retry is scheduled or in flight, the back-off strategies and the hosts
// attempted (the previous_hosts predicate).
type retryState struct {
	p         *retryPolicy
	rt        *clusterRuntime
	remaining uint32
	next      time.Duration // JitteredExponentialBackOffStrategy::next_interval_
	rateLimit time.Duration // a pending JitteredLowerBoundBackOffStrategy interval
	armed     bool          // backoff_callback_ is set: a retry resource is held
	attempted []string
}

func newRetryState(p *retryPolicy, rt *clusterRuntime) *retryState {
	return &retryState{p: p, rt: rt, remaining: p.numRetries, next: p.baseInterval}
}

// wouldRetryFromHeaders is RetryStateImpl::wouldRetryFromHeaders: a response
// with x-envoy-ratelimited only with envoy-ratelimited; 5xx; gateway-error
// (502, 503, 504); retriable-4xx (409); retriable-status-codes.
func (r *retryState) wouldRetryFromHeaders(status int, h *headerMap) bool {
	on := r.p.retryOn
	if h.has("x-envoy-ratelimited") {
		return on&retryOnEnvoyRateLimited != 0
	}
	switch {
	case on&retryOn5xx != 0 && status >= 500 && status <= 599,
		on&retryOnGatewayError != 0 && (status == 502 || status == 503 || status == 504),
		on&retryOnRetriable4xx != 0 && status == 409:
		return true
	}
	return on&retryOnRetriableStatusCodes != 0 && slices.Contains(r.p.statusCodes, uint32(status))
}

// wouldRetryFromReset is RetryStateImpl::wouldRetryFromReset: never an
// overflow; a connect failure with connect-failure; any reset with reset,
// 5xx or gateway-error.
func (r *retryState) wouldRetryFromReset(reason resetReason) bool {
	on := r.p.retryOn
	switch {
	case reason == resetOverflow:
		return false
	case reason == resetConnectFailure && on&retryOnConnectFailure != 0:
		return true
	}
	return on&(retryOnReset|retryOn5xx|retryOnGatewayError) != 0
}

// noteRateLimit is the rate limited part of shouldRetryHeaders: the first
// reset header whose interval is at most the rate limited max_interval, if
// longer than 1 ms, sets the next back-off (an interval above max_interval
// is ignored, not capped).
func (r *retryState) noteRateLimit(h *headerMap, now time.Time) {
	for _, rh := range r.p.resetHeaders {
		d, ok := parseResetInterval(rh, h, now)
		if ok && d <= r.p.resetMaxInterval {
			if d > time.Millisecond {
				r.rateLimit = d
			}
			return
		}
	}
}

// parseResetInterval is ResetHeaderParserImpl::parseInterval: the first
// value, an absl::SimpleAtoi number of seconds (SECONDS), or a Unix time in
// seconds not in the past (UNIX_TIMESTAMP).
func parseResetInterval(rh resetHeader, h *headerMap, now time.Time) (time.Duration, bool) {
	v, ok := h.first(rh.name)
	if !ok {
		return 0, false
	}
	n, ok := simpleAtoiU64(v)
	if !ok {
		return 0, false
	}
	if rh.timestamp {
		ts := uint64(now.Unix())
		if n < ts {
			return 0, false
		}
		n -= ts
	}
	return time.Duration(n) * time.Second, true
}

// shouldRetry is RetryStateImpl::shouldRetry: a scheduled retry that is not
// followed by another one counts as a retry success; then the retries left
// (upstream_rq_retry_limit_exceeded) and the circuit breaker's retry
// resource or budget (upstream_rq_retry_overflow) are checked; a retry holds
// the resource until its outcome is known.
func (r *retryState) shouldRetry(would bool) retryStatus {
	name := r.rt.cfg.name
	if r.armed && !would {
		r.rt.stats.cluster(name, func(c *ClusterStats) { c.RetrySuccess++ })
	}
	r.release()
	if !would {
		return retryNo
	}
	if r.remaining == 0 {
		r.rt.stats.cluster(name, func(c *ClusterStats) { c.RetryLimitExceeded++ })
		return retryNoLimitExceeded
	}
	r.remaining--
	if !r.rt.resources.tryRetry() {
		r.rt.stats.cluster(name, func(c *ClusterStats) { c.RetryOverflow++ })
		return retryNoOverflow
	}
	r.armed = true
	r.rt.stats.cluster(name, func(c *ClusterStats) { c.RetryTotal++ })
	return retryYes
}

// release gives back the retry resource (resetRetry).
func (r *retryState) release() {
	if r.armed {
		r.armed = false
		r.rt.resources.releaseRetry()
	}
}

// backoff is RetryStateImpl::enableBackoffTimer: a rate limited interval
// (JitteredLowerBoundBackOffStrategy: random in [d, 1.5 d), used once) or
// else the fully jittered exponential back-off
// (JitteredExponentialBackOffStrategy: random % next, next doubling up to
// max_interval once it reaches max_interval / 2), in whole milliseconds.
func (r *retryState) backoff() time.Duration {
	rnd := r.rt.rand()
	name := r.rt.cfg.name
	if d := r.rateLimit.Milliseconds(); d > 0 {
		r.rateLimit = 0
		r.rt.stats.cluster(name, func(c *ClusterStats) { c.RetryBackoffRatelimited++ })
		return time.Duration(rnd%uint64(d>>1)+uint64(d)) * time.Millisecond
	}
	cur := r.next.Milliseconds()
	if maxMs := r.p.maxInterval.Milliseconds(); cur < maxMs/2 {
		r.next = 2 * r.next
	} else {
		r.next = r.p.maxInterval
	}
	r.rt.stats.cluster(name, func(c *ClusterStats) { c.RetryBackoffExponential++ })
	return time.Duration(rnd%uint64(cur)) * time.Millisecond
}

// lbContext is the router's load balancer context for a retry, with the
// previous_hosts predicate when configured.
func (r *retryState) lbContext() *lbContext {
	lc := &lbContext{retry: true, maxAttempts: r.p.hostSelection}
	if r.p.previousHosts {
		lc.avoid = func(addr string) bool { return slices.Contains(r.attempted, addr) }
	}
	return lc
}
