package envoysim

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Causes of an upstream request cancellation.
var (
	errRouteTimeout  = errors.New("upstream request timeout")
	errIdleTimeout   = errors.New("stream idle timeout")
	errPerTryTimeout = errors.New("upstream per try timeout")
	errOverflow      = errors.New("upstream overflow")
)

// Local reply bodies (source/common/router/router.cc,
// source/common/http/conn_manager_impl.cc).
const (
	bodyNoHealthyUpstream = "no healthy upstream"
	bodyUpstreamTimeout   = "upstream request timeout"
	bodyStreamTimeout     = "stream timeout"
	bodyResetPrefix       = "upstream connect error or disconnect/reset before headers. "
)

// router is the router filter's decodeHeaders: no route is a 404, a
// direct_response is answered locally, an unknown cluster gets
// cluster_not_found_response_code with an empty body, otherwise the request
// is proxied.
func (s *stream) router(ctx context.Context) {
	rt := s.route()
	if rt == nil {
		s.e.stats.update(func(st *Stats) { st.NoRoute++ })
		s.localReply(ctx, &localReply{status: http.StatusNotFound, details: "route_not_found"})
		return
	}
	if d := rt.route.direct; d != nil {
		s.localReply(ctx, &localReply{status: d.status, body: d.body, details: "direct_response", direct: true})
		return
	}
	cl := s.snap.clusters[rt.cluster]
	if cl == nil {
		s.e.stats.update(func(st *Stats) { st.NoCluster++ })
		s.localReply(ctx, &localReply{status: rt.route.notFoundCode, details: "cluster_not_found"})
		return
	}
	s.upstreamCluster = rt.cluster
	s.proxy(ctx, rt, cl)
}

// proxyRun is the router filter's state for one request.
type proxyRun struct {
	s       *stream
	route   *routeResult
	cl      *cluster
	h       *host
	rs      *retryState // nil: no retries (none configured, or abandoned)
	body    *requestBody
	retried bool // is_retry_
	start   time.Time
	timeout time.Duration // global route timeout, 0 disabled
	perTry  time.Duration // per_try_timeout, 0 disabled
}

// proxy sends the request to a host of cl and streams the response back,
// retrying per the route's retry policy. The route timeout
// (x-envoy-upstream-rq-timeout-ms overrides it) spans every attempt and
// back-off: before response headers it yields a 504 local reply, after them
// a stream reset. The idle timeout (the route's idle_timeout, else the HCM's
// stream_idle_timeout) restarts with every request or response body chunk.
func (s *stream) proxy(ctx context.Context, rt *routeResult, cl *cluster) {
	p := &proxyRun{s: s, route: rt, cl: cl, timeout: rt.route.timeout}
	if v, ok := s.req.first("x-envoy-upstream-rq-timeout-ms"); ok {
		if ms, ok := simpleAtoiU64(v); ok {
			p.timeout = time.Duration(ms) * time.Millisecond
		}
		s.req.remove("x-envoy-upstream-rq-timeout-ms")
	}
	s.req.remove("x-envoy-upstream-rq-per-try-timeout-ms")
	policy := rt.route.retry
	if policy != nil {
		p.perTry = policy.perTryTimeout
	}
	if p.perTry >= p.timeout && p.timeout != 0 {
		p.perTry = 0 // FilterUtility::finalTimeout
	}
	p.h = cl.chooseHost(s.e.rand, &lbContext{req: s.lbRequest()})
	if p.h == nil {
		p.noHealthyUpstream(ctx)
		return
	}
	rt.finalizeRequestHeaders(s.req, s.formatContext(), !s.hcm.suppressEnvoyHeaders)
	p.start = time.Now()
	p.setTimeoutHeaders(0)

	upCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if p.timeout > 0 {
		t := time.AfterFunc(p.timeout, func() { cancel(errRouteTimeout) })
		defer t.Stop()
	}
	idle := s.hcm.streamIdleTimeout
	if rt.route.idleTimeout != nil {
		idle = *rt.route.idleTimeout
	}
	touch := func() {}
	if idle > 0 {
		idleTimer := time.AfterFunc(idle, func() { cancel(errIdleTimeout) })
		var finished atomic.Bool // the body pump may still report reads afterwards
		defer func() {
			finished.Store(true)
			idleTimer.Stop()
		}()
		touch = func() {
			if !finished.Load() {
				idleTimer.Reset(idle)
			}
		}
	}
	if policy != nil && policy.retryOn != 0 {
		p.rs = newRetryState(policy, cl.rt)
		defer func() {
			if p.rs != nil {
				p.rs.release()
			}
		}()
	}
	p.body = s.newUpstreamBody(p.rs != nil, touch)
	defer p.body.stop()
	p.loop(ctx, upCtx, touch)
}

// loop runs attempts until a response is forwarded or a local reply sent.
func (p *proxyRun) loop(ctx, upCtx context.Context, touch func()) {
	for {
		p.s.upstreamHost = p.h.addr
		if p.rs != nil {
			p.rs.attempted = append(p.rs.attempted, p.h.addr) // onHostAttempted
		}
		res := p.s.attempt(ctx, upCtx, p.cl, p.h, p.body, p.perTry)
		if p.body.takeAbandoned() && p.rs != nil {
			p.s.e.stats.cluster(p.cl.cfg.name, func(c *ClusterStats) { c.RetryOrShadowAbandoned++ })
			p.rs.release()
			p.rs = nil
		}
		if res.resp != nil {
			if p.retryResponse(res) {
				if !p.next(ctx, upCtx) {
					return
				}
				continue
			}
			p.forward(ctx, upCtx, res, touch)
			return
		}
		if !p.retryFailure(res) {
			p.fail(ctx, res.fail)
			return
		}
		if !p.next(ctx, upCtx) {
			return
		}
	}
}

// next waits the retry back-off and picks the host of the next attempt from
// the current snapshot (Filter::doRetry): without the cluster or a host the
// request gets "no healthy upstream". It reports false when it answered the
// request instead.
func (p *proxyRun) next(ctx, upCtx context.Context) bool {
	s := p.s
	if err := s.e.retrySleep(upCtx, p.rs.backoff()); err != nil {
		p.fail(ctx, abortCause(ctx, upCtx))
		return false
	}
	p.retried = true
	cl := s.e.snap.Load().clusters[p.cl.cfg.name]
	var h *host
	if cl != nil {
		lc := p.rs.lbContext()
		lc.req = s.lbRequest()
		h = cl.chooseHost(s.e.rand, lc)
	}
	if h == nil {
		p.noHealthyUpstream(ctx)
		return false
	}
	p.cl, p.h = cl, h
	p.setTimeoutHeaders(time.Since(p.start).Truncate(time.Millisecond))
	return true
}

// abortCause is why upCtx ended without an attempt in flight.
func abortCause(ctx, upCtx context.Context) failKind {
	switch cause := context.Cause(upCtx); {
	case ctx.Err() != nil:
		return failDownstream
	case errors.Is(cause, errRouteTimeout):
		return failGlobalTimeout
	case errors.Is(cause, errIdleTimeout):
		return failIdle
	}
	return failDownstream
}

func (p *proxyRun) noHealthyUpstream(ctx context.Context) {
	p.s.e.stats.update(func(st *Stats) { st.NoHealthyUpstream++ })
	p.s.localReply(ctx, &localReply{status: http.StatusServiceUnavailable, body: bodyNoHealthyUpstream, details: "no_healthy_upstream"})
}

// setTimeoutHeaders is FilterUtility::setTimeoutHeaders:
// x-envoy-expected-rq-timeout-ms is the per try timeout, else the global
// one, capped by what is left of the global one after elapsed (at least
// 1 ms).
func (p *proxyRun) setTimeoutHeaders(elapsed time.Duration) {
	if p.s.hcm.suppressEnvoyHeaders {
		return
	}
	expected := p.perTry
	if expected == 0 {
		expected = p.timeout
	}
	if expected <= 0 {
		return
	}
	if p.timeout > 0 {
		if elapsed >= p.timeout {
			expected = time.Millisecond
		} else {
			expected = min(expected, p.timeout-elapsed)
		}
	}
	p.s.req.set("x-envoy-expected-rq-timeout-ms", strconv.FormatInt(expected.Milliseconds(), 10))
}
