package envoysim

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Causes of an upstream request cancellation.
var (
	errRouteTimeout = errors.New("upstream request timeout")
	errIdleTimeout  = errors.New("stream idle timeout")
)

// Local reply bodies of the router (source/common/router/router.cc).
const (
	bodyNoHealthyUpstream = "no healthy upstream"
	bodyConnectFailure    = "upstream connect error or disconnect/reset before headers. reset reason: connection failure"
	bodyConnectionReset   = "upstream connect error or disconnect/reset before headers. reset reason: connection termination"
	bodyUpstreamTimeout   = "upstream request timeout"
	bodyStreamTimeout     = "stream timeout"
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

// proxy sends the request to a host of cl and streams the response back.
// The route timeout (x-envoy-upstream-rq-timeout-ms overrides it) spans the
// whole upstream exchange: before response headers it yields a 504 local
// reply, after them a stream reset. The idle timeout (the route's
// idle_timeout, else the HCM's stream_idle_timeout) restarts with every body
// chunk and yields a 408 before response headers.
func (s *stream) proxy(ctx context.Context, rt *routeResult, cl *cluster) {
	c := s.hcm
	timeout := rt.route.timeout
	if v, ok := s.req.first("x-envoy-upstream-rq-timeout-ms"); ok {
		if ms, ok := simpleAtoiU64(v); ok {
			timeout = time.Duration(ms) * time.Millisecond
		}
		s.req.remove("x-envoy-upstream-rq-timeout-ms")
	}
	s.req.remove("x-envoy-upstream-rq-per-try-timeout-ms")
	h := cl.chooseHost(s.e.rand)
	if h == nil {
		s.e.stats.update(func(st *Stats) { st.NoHealthyUpstream++ })
		s.localReply(ctx, &localReply{status: http.StatusServiceUnavailable, body: bodyNoHealthyUpstream, details: "no_healthy_upstream"})
		return
	}
	rt.finalizeRequestHeaders(s.req, s.formatContext(), !c.suppressEnvoyHeaders)
	if !c.suppressEnvoyHeaders && timeout > 0 {
		s.req.set("x-envoy-expected-rq-timeout-ms", strconv.FormatInt(timeout.Milliseconds(), 10))
	}
	s.upstreamHost = h.addr

	upCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if timeout > 0 {
		t := time.AfterFunc(timeout, func() { cancel(errRouteTimeout) })
		defer t.Stop()
	}
	idle := c.streamIdleTimeout
	if rt.route.idleTimeout != nil {
		idle = *rt.route.idleTimeout
	}
	var idleTimer *time.Timer
	if idle > 0 {
		idleTimer = time.AfterFunc(idle, func() { cancel(errIdleTimeout) })
		defer idleTimer.Stop()
	}
	touch := func() {
		if idleTimer != nil {
			idleTimer.Reset(idle)
		}
	}

	h.active.Add(1)
	defer h.active.Add(-1)
	s.e.stats.upstreamRequest(cl.cfg.name, h.addr)
	start := time.Now()
	resp, err := cl.rt.transport.RoundTrip(s.upstreamRequest(upCtx, h.addr))
	if err != nil {
		s.upstreamFailure(ctx, upCtx, err)
		return
	}
	defer resp.Body.Close()
	touch()
	rh := &headerMap{}
	rh.add(":status", strconv.Itoa(resp.StatusCode))
	for _, k := range sortedKeys(resp.Header) {
		for _, v := range resp.Header[k] {
			rh.add(strings.ToLower(k), v)
		}
	}
	if !c.suppressEnvoyHeaders {
		rh.set("x-envoy-upstream-service-time", strconv.FormatInt(time.Since(start).Milliseconds(), 10))
	}
	rt.finalizeResponseHeaders(rh, s.formatContext())
	body := &responseBody{r: resp.Body, has: responseHasBody(resp, s.r.Method)}
	if !s.encode(ctx, rh, body) {
		return
	}
	complete, _ := s.writeResponse(rh, body, touch)
	if !complete {
		if errors.Is(context.Cause(upCtx), errRouteTimeout) {
			s.e.stats.update(func(st *Stats) { st.UpstreamTimeouts++ })
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

// upstreamFailure answers a failed upstream request before response headers.
func (s *stream) upstreamFailure(ctx, upCtx context.Context, err error) {
	if ctx.Err() != nil {
		panic(http.ErrAbortHandler) // downstream gone or envoysim stopping
	}
	switch cause := context.Cause(upCtx); {
	case errors.Is(cause, errRouteTimeout):
		s.e.stats.update(func(st *Stats) { st.UpstreamTimeouts++ })
		s.localReply(ctx, &localReply{status: http.StatusGatewayTimeout, body: bodyUpstreamTimeout, details: "upstream_response_timeout"})
	case errors.Is(cause, errIdleTimeout):
		s.localReply(ctx, &localReply{status: http.StatusRequestTimeout, body: bodyStreamTimeout, details: "stream_idle_timeout"})
	default:
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			s.e.stats.update(func(st *Stats) { st.UpstreamConnectFailures++ })
			s.localReply(ctx, &localReply{status: http.StatusServiceUnavailable, body: bodyConnectFailure, details: "upstream_reset_before_response_started{connection_failure}"})
			return
		}
		s.e.log.DebugContext(ctx, "upstream reset", "error", err)
		s.e.stats.update(func(st *Stats) { st.UpstreamResets++ })
		s.localReply(ctx, &localReply{status: http.StatusServiceUnavailable, body: bodyConnectionReset, details: "upstream_reset_before_response_started{connection_termination}"})
	}
}

// upstreamRequest builds the upstream request from the request headers:
// pseudo headers become method, path and Host; every other header is sent;
// no default User-Agent is added.
func (s *stream) upstreamRequest(ctx context.Context, addr string) *http.Request {
	u := &url.URL{Scheme: "http", Host: addr}
	p, q, hasQuery := strings.Cut(s.req.value(":path"), "?")
	if strings.HasPrefix(p, "//") {
		u.Path, u.RawPath = p, p
	} else {
		u.Opaque = p
	}
	u.RawQuery, u.ForceQuery = q, hasQuery && q == ""
	body, length := s.requestBody()
	req := &http.Request{
		Method:        s.req.value(":method"),
		URL:           u,
		Host:          s.req.value(":authority"),
		Header:        http.Header{},
		Body:          body,
		ContentLength: length,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
	}
	for _, e := range s.req.entries {
		switch {
		case strings.HasPrefix(e.key, ":"), e.key == "content-length", e.key == "transfer-encoding", e.key == "host":
			continue
		}
		req.Header.Add(e.key, e.value)
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""}
	}
	return req.WithContext(ctx)
}

// requestBody returns the upstream request body and its length (-1 for
// chunked).
func (s *stream) requestBody() (io.ReadCloser, int64) {
	n := contentLength(s.req)
	switch {
	case s.buffered:
		if len(s.body) == 0 && n <= 0 {
			return http.NoBody, 0
		}
		return io.NopCloser(bytes.NewReader(s.body)), n
	case !s.hasBody:
		return http.NoBody, 0
	default:
		return s.r.Body, n
	}
}

// responseHasBody reports whether a response carries a body, i.e. its
// headers do not end the stream.
func responseHasBody(resp *http.Response, method string) bool {
	if method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified || resp.StatusCode < 200 {
		return false
	}
	return resp.ContentLength != 0
}
