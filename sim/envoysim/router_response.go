package envoysim

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// retryResponse handles an attempt's response headers before anything goes
// downstream (Filter::onUpstreamHeaders): outlier detection gets the status,
// x-envoy-immediate-health-check-fail fails the host's active health check,
// then the retry policy decides (shouldRetryHeaders, with the rate limited
// back-off parsed from the response). A retried response is reset and never
// reaches the client. Once a response is kept, retries end for the request.
// It reports whether the request is retried.
func (p *proxyRun) retryResponse(res attemptResult) bool {
	rt := p.cl.rt
	code := res.resp.StatusCode
	rt.putStatus(p.h.st, code)
	if _, ok := res.resp.Header["X-Envoy-Immediate-Health-Check-Fail"]; ok {
		rt.immediateHCFail(p.h.st)
	}
	if p.rs == nil {
		return false
	}
	rh := responseHeaders(res.resp)
	would := p.rs.wouldRetryFromHeaders(code, rh)
	if would {
		p.rs.noteRateLimit(rh, p.s.e.clock.Now())
	}
	if p.rs.shouldRetry(would) == retryYes {
		res.discard()
		return true
	}
	p.rs.release()
	p.rs = nil
	p.body.stopBuffering()
	return false
}

// retryFailure handles an attempt that ended before response headers
// (Filter::onUpstreamReset, onPerTryTimeout, onResponseTimeout): outlier
// detection gets the locally originated result (a connect failure or reset
// as 503, a timeout as 504; an overflow is not reported), then the retry
// policy decides (shouldRetryReset). It reports whether the request is
// retried.
func (p *proxyRun) retryFailure(res attemptResult) bool {
	rt := p.cl.rt
	var reason resetReason
	switch res.fail {
	case failConnect:
		p.s.e.stats.update(func(st *Stats) { st.UpstreamConnectFailures++ })
		rt.putStatus(p.h.st, http.StatusServiceUnavailable)
		reason = resetConnectFailure
	case failTermination:
		p.s.e.stats.update(func(st *Stats) { st.UpstreamResets++ })
		rt.putStatus(p.h.st, http.StatusServiceUnavailable)
		reason = resetTermination
	case failPerTry:
		p.s.e.stats.update(func(st *Stats) { st.UpstreamPerTryTimeouts++ })
		rt.putStatus(p.h.st, http.StatusGatewayTimeout)
		reason = resetLocal
	case failOverflow:
		reason = resetOverflow
	case failGlobalTimeout:
		rt.putStatus(p.h.st, http.StatusGatewayTimeout)
		return false
	default:
		return false
	}
	if p.rs == nil {
		return false
	}
	return p.rs.shouldRetry(p.rs.wouldRetryFromReset(reason)) == retryYes
}

// fail answers a request whose last attempt (or back-off) failed before
// response headers.
func (p *proxyRun) fail(ctx context.Context, kind failKind) {
	s := p.s
	switch kind {
	case failGlobalTimeout:
		s.e.stats.update(func(st *Stats) { st.UpstreamTimeouts++ })
		s.localReply(ctx, &localReply{status: http.StatusGatewayTimeout, body: bodyUpstreamTimeout, details: "upstream_response_timeout"})
	case failIdle:
		// ActiveStream::onIdleTimeout: Utility::maybeRequestTimeoutCode.
		s.e.stats.update(func(st *Stats) { st.StreamIdleTimeouts++ })
		code := http.StatusRequestTimeout
		if p.body.received() {
			code = http.StatusGatewayTimeout
		}
		s.localReply(ctx, &localReply{status: code, body: bodyStreamTimeout, details: "stream_idle_timeout"})
	case failPerTry:
		s.localReply(ctx, &localReply{status: http.StatusGatewayTimeout, body: bodyUpstreamTimeout, details: "upstream_per_try_timeout"})
	case failConnect:
		p.resetReply(ctx, "connection failure", "connection_failure", false)
	case failTermination:
		p.resetReply(ctx, "connection termination", "connection_termination", false)
	case failOverflow:
		p.resetReply(ctx, "overflow", "overflow", true)
	default:
		panic(http.ErrAbortHandler) // downstream gone or envoysim stopping
	}
}

// resetReply is the local reply of Filter::onUpstreamReset: 503, the body
// naming the reset reason ("retried and the latest" after a retry), and for
// an overflow x-envoy-overloaded: true unless suppress_envoy_headers
// (onUpstreamAbort with dropped).
func (p *proxyRun) resetReply(ctx context.Context, reason, detail string, dropped bool) {
	body := bodyResetPrefix
	if p.retried {
		body += "retried and the latest "
	}
	lr := &localReply{
		status:  http.StatusServiceUnavailable,
		body:    body + "reset reason: " + reason,
		details: "upstream_reset_before_response_started{" + detail + "}",
	}
	if dropped && !p.s.hcm.suppressEnvoyHeaders {
		lr.modify = func(h *headerMap) { h.add("x-envoy-overloaded", "true") }
	}
	p.s.localReply(ctx, lr)
}

// forward streams a kept response downstream. An upstream reset after the
// headers counts as a locally originated failure for outlier detection and
// resets the downstream stream; so does the route timeout.
func (p *proxyRun) forward(ctx, upCtx context.Context, res attemptResult, touch func()) {
	s, resp := p.s, res.resp
	defer res.done()
	defer resp.Body.Close()
	touch()
	rh := responseHeaders(resp)
	rh.add(":status", strconv.Itoa(resp.StatusCode))
	if !s.hcm.suppressEnvoyHeaders {
		rh.set("x-envoy-upstream-service-time", strconv.FormatInt(time.Since(p.start).Milliseconds(), 10))
	}
	p.route.finalizeResponseHeaders(rh, s.formatContext())
	body := &responseBody{r: resp.Body, has: responseHasBody(resp, s.r.Method), endFrame: resp.ProtoMajor == 1, trailers: func() bool { return hasTrailers(resp.Trailer) }}
	if !s.encode(ctx, rh, body) {
		return
	}
	complete, err := s.writeResponse(rh, body, touch)
	if !complete {
		cause := context.Cause(upCtx)
		switch {
		case errors.Is(cause, errRouteTimeout):
			s.e.stats.update(func(st *Stats) { st.UpstreamTimeouts++ })
		case errors.Is(cause, errIdleTimeout):
			s.e.stats.update(func(st *Stats) { st.StreamIdleTimeouts++ })
		case ctx.Err() == nil && errors.Is(err, errUpstreamBody) && !errors.Is(err, errDuplexFailed):
			p.cl.rt.putStatus(p.h.st, http.StatusServiceUnavailable)
		}
		panic(http.ErrAbortHandler) // reset the downstream stream
	}
	if s.r.ProtoMajor == 2 {
		for k, vs := range resp.Trailer {
			for _, v := range vs {
				s.w.Header().Add(http.TrailerPrefix+k, v)
			}
		}
	}
}

// responseHeaders converts upstream response headers to a header map with
// lower-case keys, in key order.
func responseHeaders(resp *http.Response) *headerMap {
	rh := &headerMap{}
	for _, k := range sortedKeys(resp.Header) {
		for _, v := range resp.Header[k] {
			rh.add(strings.ToLower(k), v)
		}
	}
	return rh
}

// responseHasBody reports whether a response carries a body, i.e. its
// headers do not end the stream.
func responseHasBody(resp *http.Response, method string) bool {
	if method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified || resp.StatusCode < 200 {
		return false
	}
	return resp.ContentLength != 0
}

// putStatus reports a response status, or a locally originated failure
// mapped to one, to outlier detection.
func (rt *clusterRuntime) putStatus(hs *hostState, code int) {
	if rt.od != nil {
		rt.od.putHTTPCode(hs, code)
	}
}

// immediateHCFail is HealthCheckerImplBase::setUnhealthyCrossThread for an
// upstream response carrying x-envoy-immediate-health-check-fail: the host
// is excluded (EXCLUDED_VIA_IMMEDIATE_HC_FAIL) and fails its active health
// check as a PASSIVE failure, which takes effect at once. Without active
// health checking the header is ignored.
func (rt *clusterRuntime) immediateHCFail(hs *hostState) {
	if rt.hc == nil {
		return
	}
	rt.mu.Lock()
	if rt.byAddr[hs.addr] != hs {
		rt.mu.Unlock()
		return
	}
	hs.immediateHCFail = true
	changed := !hs.failedActiveHC
	hs.failedActiveHC = true
	rt.mu.Unlock()
	rt.stats.cluster(rt.cfg.name, func(c *ClusterStats) { c.HealthCheckFailures++ })
	if changed {
		rt.onChange()
	}
}

// hasTrailers reports whether a response's trailers hold a value (keys
// announced in a Trailer header have none until the body ended).
func hasTrailers(t http.Header) bool {
	for _, vs := range t {
		if len(vs) > 0 {
			return true
		}
	}
	return false
}
