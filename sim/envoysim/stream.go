package envoysim

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// stream is one HTTP request going through a listener's HTTP connection
// manager, its HTTP filters and the router (Envoy's ActiveStream and
// FilterManager, source/common/http/conn_manager_impl.cc and
// filter_manager.cc). It lives on the request's goroutine.
type stream struct {
	e      *Envoy
	snap   *snapshot
	lc     *listenerConfig
	hcm    *hcmConfig
	table  *routeTable
	w      http.ResponseWriter
	r      *http.Request
	random uint64 // the stream's random value (stream id)

	req      *headerMap
	hasBody  bool   // the request has a body (no end_stream on headers)
	body     []byte // the buffered request body
	buffered bool
	// upBody is the body the router's attempts read (nil before the
	// router ran): it owns the downstream body from then on.
	upBody *requestBody
	// duplexBody is the request body as a full-duplex ext_proc exchange
	// streams it back (nil: none); it owns the downstream body.
	duplexBody *duplex
	// closing: the response went before the request was complete, so
	// the HTTP/1 connection closes after it.
	closing bool

	routeCached bool
	rt          *routeResult
	cleared     bool // the route cache was cleared since the last computation

	filters         []httpFilter
	upstreamHost    string
	upstreamCluster string
	responded       bool       // response headers were sent downstream
	info            streamInfo // dynamic metadata and LB filter state (metadata.go)
}

// serveHTTP handles one request on rl with the current snapshot. Like
// Envoy's codecs, HTTP/1.1 streams are full duplex: a response may start
// before the request body was read (net/http would otherwise wait for the
// rest of the body before writing response headers).
func (e *Envoy) serveHTTP(rl *runningListener, w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 {
		_ = http.NewResponseController(w).EnableFullDuplex()
	}
	snap := e.snap.Load()
	lc := snap.listeners[rl.name]
	if lc == nil {
		lc = rl.cfg.Load()
	}
	s := &stream{e: e, snap: snap, lc: lc, hcm: lc.hcm, w: w, r: r, random: e.rand()}
	s.table = lc.hcm.inline
	if s.table == nil {
		s.table = snap.routes[lc.hcm.rdsName]
	}
	for _, cfg := range lc.hcm.filters {
		s.filters = append(s.filters, cfg.newFilter(s))
	}
	s.run(r.Context())
}

func (s *stream) run(ctx context.Context) {
	defer s.closeFilters()
	defer s.endRead()
	if lr := s.decodeHeadersHCM(); lr != nil {
		s.replyBeforeFilters(lr)
		return
	}
	for _, f := range s.filters {
		if lr := f.decode(ctx); lr != nil {
			s.localReply(ctx, lr)
			return
		}
	}
	s.router(ctx)
}

// closeFilters destroys the filters: every ext_proc stream still open is
// reset (Filter::onDestroy) and its receiver waited for.
func (s *stream) closeFilters() {
	for _, f := range s.filters {
		f.destroy()
	}
}

// decodeHeadersHCM builds the request header map and applies what the
// connection manager does before the filter chain: path normalisation
// (maybeNormalizePath, path_normalize.go), early header mutations,
// ConnectionManagerUtility::mutateRequestHeaders and maybeNormalizeHost.
// It returns the local reply to send instead when the path is refused or
// redirected.
func (s *stream) decodeHeadersHCM() *localReply {
	r := s.r
	h := &headerMap{}
	h.add(":authority", r.Host)
	path := r.RequestURI
	if !strings.HasPrefix(path, "/") {
		path = r.URL.RequestURI()
	}
	h.add(":path", path)
	h.add(":method", r.Method)
	for _, k := range sortedKeys(r.Header) {
		for _, v := range r.Header[k] {
			h.add(strings.ToLower(k), v)
		}
	}
	s.req = h
	s.hasBody = r.ContentLength != 0
	if lr := s.normalizePath(); lr != nil {
		return lr
	}
	for _, m := range s.hcm.early {
		m.apply(h)
	}
	s.mutateRequestHeaders()
	s.normalizeHost()
	return nil
}

// mutateRequestHeaders is ConnectionManagerUtility::mutateRequestHeaders for
// a plaintext connection and no internal address configuration (every
// request is external): hop-by-hop headers removed; with
// use_remote_address the peer is appended to x-forwarded-for and
// x-forwarded-proto is overwritten; x-forwarded-proto and :scheme set when
// absent; internal x-envoy-* headers and internal_only_headers removed;
// via appended; x-envoy-external-address set on edge requests; x-request-id
// generated when absent (or always on an edge request unless
// preserve_external_request_id); x-forwarded-client-cert removed.
func (s *stream) mutateRequestHeaders() {
	h, c := s.req, s.hcm
	stripHopByHop(h)
	remoteIP, _, _ := net.SplitHostPort(s.r.RemoteAddr)
	if c.useRemoteAddress {
		if !c.skipXffAppend {
			xffIP := remoteIP
			if ip := net.ParseIP(remoteIP); ip != nil && ip.IsLoopback() {
				xffIP = localIP(s.r) // Utility::appendXff(config.localAddress()) for loopback peers
			}
			if v, ok := h.first("x-forwarded-for"); ok {
				h.set("x-forwarded-for", v+","+xffIP)
			} else {
				h.set("x-forwarded-for", xffIP)
			}
		}
		if c.xffTrustedHops == 0 || !h.has("x-forwarded-proto") {
			h.set("x-forwarded-proto", "http")
		}
	}
	if !h.has("x-forwarded-proto") {
		h.set("x-forwarded-proto", "http")
	}
	if !h.has(":scheme") {
		scheme := "http"
		if xfp := h.value("x-forwarded-proto"); xfp == "http" || xfp == "https" {
			scheme = xfp
		}
		h.set(":scheme", scheme)
	}
	edge := c.useRemoteAddress
	if edge {
		h.remove("x-envoy-decorator-operation")
		h.remove("x-envoy-downstream-service-cluster")
		h.remove("x-envoy-downstream-service-node")
	}
	for _, k := range []string{
		"x-envoy-retriable-status-codes", "x-envoy-retriable-header-names", "x-envoy-retry-on",
		"x-envoy-retry-grpc-on", "x-envoy-max-retries", "x-envoy-upstream-alt-stat-name",
		"x-envoy-upstream-rq-timeout-ms", "x-envoy-upstream-rq-per-try-timeout-ms",
		"x-envoy-upstream-rq-timeout-alt-response", "x-envoy-expected-rq-timeout-ms", "x-envoy-force-trace",
		"x-envoy-ip-tags", "x-envoy-original-url", "x-envoy-hedge-on-per-try-timeout",
	} {
		h.remove(k)
	}
	if s.table != nil {
		for _, k := range s.table.internalOnly {
			h.remove(k)
		}
	}
	if c.via != "" {
		appendVia(h, c.via)
	}
	if edge {
		h.set("x-envoy-external-address", remoteIP)
	}
	if c.generateRequestID && (!h.has("x-request-id") || (edge && !c.preserveExternalRequestID)) {
		h.set("x-request-id", newUUID())
	}
	if c.forwardClientCert != hcmv3.HttpConnectionManager_ALWAYS_FORWARD_ONLY {
		h.remove("x-forwarded-client-cert")
	}
}

// normalizeHost is ConnectionManagerUtility::maybeNormalizeHost:
// strip_trailing_host_dot, then strip_any_host_port or
// strip_matching_host_port (the listener's port).
func (s *stream) normalizeHost() {
	host, ok := s.req.first(":authority")
	if !ok {
		return
	}
	orig := host
	i := portStart(host)
	name, port := host, ""
	if i >= 0 {
		name, port = host[:i], host[i+1:]
	}
	if s.hcm.stripTrailingHostDot && strings.HasSuffix(name, ".") {
		name = strings.TrimSuffix(name, ".")
	}
	if port != "" {
		_, listenerPort, _ := net.SplitHostPort(localAddr(s.r))
		if s.hcm.stripAnyHostPort || (s.hcm.stripMatchingHostPort && port == listenerPort) {
			port = ""
		}
	}
	host = name
	if port != "" {
		host += ":" + port
	}
	if host != orig {
		s.req.set(":authority", host)
	}
}

func appendVia(h *headerMap, via string) {
	if v, ok := h.first("via"); ok && v != "" {
		h.set("via", v+", "+via)
		return
	}
	h.set("via", via)
}

func localAddr(r *http.Request) string {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		return a.String()
	}
	return ""
}

func localIP(r *http.Request) string {
	ip, _, _ := net.SplitHostPort(localAddr(r))
	return ip
}

// newUUID returns a random (version 4) UUID, the default request ID
// extension's x-request-id format.
func newUUID() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// route returns the cached route, computing it first when the cache is
// empty (ActiveStream::refreshCachedRoute); a computation after a clear is a
// re-match. It returns nil when no route matches.
func (s *stream) route() *routeResult {
	if s.routeCached {
		return s.rt
	}
	s.routeCached = true
	if s.table != nil {
		s.rt = s.table.match(s.req, s.random)
	}
	rematch := s.cleared
	s.cleared = false
	s.e.stats.update(func(st *Stats) {
		st.RouteMatches++
		if rematch {
			st.RouteRematches++
		}
	})
	return s.rt
}

// clearRouteCache drops the cached route (DownstreamCallbacks::clearRouteCache).
func (s *stream) clearRouteCache() {
	s.routeCached = false
	s.rt = nil
	s.cleared = true
}

// readRequestBody buffers the whole request body once. Beyond the listener's
// per_connection_buffer_limit_bytes it returns the 413 local reply the
// filter manager sends when a buffering filter exceeds the buffer limit.
func (s *stream) readRequestBody() *localReply {
	if s.buffered {
		return nil
	}
	limit := s.lc.bufferLimit
	data, err := io.ReadAll(io.LimitReader(s.requestBodySource(), int64(limit)+1))
	if err != nil {
		return &localReply{abort: true}
	}
	if len(data) > limit {
		return &localReply{status: http.StatusRequestEntityTooLarge, body: "Payload Too Large", details: "request_payload_too_large"}
	}
	s.body, s.buffered, s.duplexBody = data, true, nil
	return nil
}

// contentLength returns the content-length header value, or -1.
func contentLength(h *headerMap) int64 {
	if v, ok := h.first("content-length"); ok {
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			return n
		}
	}
	return -1
}

// settleGrace is how long remoteComplete waits for the rest of a request
// body nobody read: Envoy's codec dispatches whatever bytes arrived before
// a reply (a body sent with its headers is decoded while ext_proc is
// asked about the headers), so bytes already on the connection complete
// the request; a client still sending does not.
const settleGrace = 50 * time.Millisecond

// remoteComplete reports, as response headers are about to go
// downstream, whether the whole request was received
// (FilterManager::remoteDecodeComplete). A body nobody read (a reply
// decided on headers alone) is read and dropped here, up to the buffer
// limit and settleGrace: Envoy would have decoded those bytes, and
// net/http must not be left to read it after the handler (with full
// duplex on, that races its next-request read). The body the router's
// attempts own is judged by what they read.
func (s *stream) remoteComplete() bool {
	switch {
	case !s.hasBody || s.buffered:
		return true
	case s.upBody != nil:
		return s.upBody.received()
	case s.duplexBody != nil:
		return s.duplexBody.received()
	}
	rc := http.NewResponseController(s.w)
	_ = rc.SetReadDeadline(time.Now().Add(settleGrace))
	n, err := io.Copy(io.Discard, io.LimitReader(s.r.Body, int64(s.lc.bufferLimit)+1))
	_ = rc.SetReadDeadline(time.Time{})
	s.hasBody = false                                 // read: nothing more to settle
	return err == nil && n <= int64(s.lc.bufferLimit) // io.Copy's nil is EOF
}

// endRead runs as the stream ends: when its HTTP/1 connection is closing
// (the reply went before the request was complete), the rest of the
// request body is not waited for — net/http would otherwise read it after
// the handler, for a client that may never send it, where Envoy closes
// the connection.
func (s *stream) endRead() {
	if s.closing {
		_ = http.NewResponseController(s.w).SetReadDeadline(time.Now())
	}
}
