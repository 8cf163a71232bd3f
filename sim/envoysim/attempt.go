package envoysim

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"time"
)

// failKind is why an attempt ended without response headers.
type failKind int

const (
	failNone          failKind = iota
	failDownstream             // the downstream is gone or envoysim is stopping
	failGlobalTimeout          // route timeout
	failIdle                   // stream idle timeout
	failPerTry                 // per_try_timeout
	failConnect                // connection failure
	failTermination            // connection termination (reset) before headers
	failOverflow               // circuit breaker overflow
)

// attemptResult is the outcome of one upstream attempt: response headers
// (resp) or a failure.
type attemptResult struct {
	resp *http.Response
	fail failKind
	done func() // releases the attempt's resources once the response is finished
}

// discard resets the upstream stream of a response that is not forwarded.
func (r attemptResult) discard() {
	_ = r.resp.Body.Close()
	r.done()
}

// attemptSlots tracks an attempt's circuit breaker slots and the host's
// active request count.
type attemptSlots struct {
	rt *clusterRuntime
	hs *hostState

	mu       sync.Mutex
	pending  bool
	attached bool
	released bool
}

// attachLocked counts the attempt as an active request of the host (rq_active)
// and the cluster (upstream_rq_total) once it has a connection.
func (a *attemptSlots) attachLocked() {
	a.attached = true
	a.hs.active.Add(1)
	a.rt.stats.upstreamRequest(a.rt.cfg.name, a.hs.addr)
}

// gotConn moves a pending attempt to active when its connection is ready,
// checking max_requests as ConnPoolImplBase::attachStreamToClient does.
func (a *attemptSlots) gotConn() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.pending || a.released {
		return true
	}
	a.pending = false
	a.rt.resources.releasePending()
	if !a.rt.resources.tryRequest() {
		return false
	}
	a.attachLocked()
	return true
}

func (a *attemptSlots) release() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.released {
		return
	}
	a.released = true
	if a.pending {
		a.rt.resources.releasePending()
	}
	if a.attached {
		a.hs.active.Add(-1)
		a.rt.resources.releaseRequest()
	}
}

// attempt sends one upstream request to h. The circuit breakers are
// checked as the connection pool does (ConnPoolImplBase::newStreamImpl):
// with a ready connection the request takes a max_requests slot at once,
// otherwise it waits for a connection in a max_pending_requests slot and
// takes its max_requests slot when the connection is ready; a full slot is
// an overflow. The per try timeout runs until the response headers.
func (s *stream) attempt(ctx, upCtx context.Context, cl *cluster, h *host, body *requestBody, perTry time.Duration) attemptResult {
	rt := cl.rt
	a := &attemptSlots{rt: rt, hs: h.st}
	if rt.connReady(h.st) {
		if !rt.resources.tryRequest() {
			return s.overflow(rt)
		}
		a.attachLocked()
	} else {
		if !rt.resources.tryPending() {
			return s.overflow(rt)
		}
		a.pending = true
	}
	actx, cancel := context.WithCancelCause(upCtx)
	var perTryTimer *time.Timer
	if perTry > 0 {
		perTryTimer = time.AfterFunc(perTry, func() { cancel(errPerTryTimeout) })
	}
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if a.gotConn() {
			return
		}
		// Envoy's ConnPoolImplBase::attachStreamToClient fails the pending
		// stream with an Overflow pool failure before any codec stream is
		// created: the overflowed request never reaches the upstream.
		// Cancelling the context is not enough to model that: once GotConn
		// returns, Go's HTTP/1.1 persistConn.roundTrip hands the request to
		// its write loop without checking the context, so the request could
		// still be written (and even answered) while the cancellation is
		// being noticed. The HTTP/1.1 connection belongs to this request
		// alone and the cancellation would close it anyway, so close it now,
		// before anything is written. HTTP/2 needs no more than the
		// cancellation: the stream checks the context before it writes its
		// HEADERS (http2clientStream.encodeAndWriteHeaders), and closing
		// would reset the connection's other streams.
		cancel(errOverflow)
		if !rt.cfg.http2 && info.Conn != nil {
			_ = info.Conn.Close()
		}
	}}
	rd := body.reader(actx.Done())
	resp, err := rt.transport.RoundTrip(s.upstreamRequest(httptrace.WithClientTrace(actx, trace), h.addr, rd)) //nolint:bodyclose // closed by attemptResult.discard or proxyRun.forward
	if perTryTimer != nil {
		perTryTimer.Stop()
	}
	var once sync.Once
	done := func() {
		once.Do(func() {
			_ = rd.Close()
			cancel(nil)
			a.release()
		})
	}
	if err == nil {
		return attemptResult{resp: resp, done: done}
	}
	done()
	kind := classifyFailure(ctx, actx, err)
	if kind == failOverflow {
		rt.stats.cluster(rt.cfg.name, func(c *ClusterStats) { c.PendingOverflow++ })
	}
	return attemptResult{fail: kind, done: func() {}}
}

func (s *stream) overflow(rt *clusterRuntime) attemptResult {
	rt.stats.cluster(rt.cfg.name, func(c *ClusterStats) { c.PendingOverflow++ })
	return attemptResult{fail: failOverflow, done: func() {}}
}

// classifyFailure maps a RoundTrip error to its cause.
func classifyFailure(ctx, actx context.Context, err error) failKind {
	if ctx.Err() != nil {
		return failDownstream
	}
	switch cause := context.Cause(actx); {
	case errors.Is(cause, errOverflow):
		return failOverflow
	case errors.Is(cause, errPerTryTimeout):
		return failPerTry
	case errors.Is(cause, errRouteTimeout):
		return failGlobalTimeout
	case errors.Is(cause, errIdleTimeout):
		return failIdle
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return failConnect
	}
	return failTermination
}

// newUpstreamBody wraps the request body for the attempts: the buffered
// body (ext_proc BUFFERED), the streaming downstream body, or none.
func (s *stream) newUpstreamBody(buffering bool, touch func()) *requestBody {
	var b *requestBody
	switch {
	case s.buffered:
		b = newRequestBody(bytes.NewReader(s.body), s.lc.bufferLimit, buffering, touch)
		b.complete = true
	case s.hasBody:
		b = newRequestBody(s.requestBodySource(), s.lc.bufferLimit, buffering, touch)
	default:
		b = newRequestBody(nil, s.lc.bufferLimit, buffering, touch)
	}
	s.upBody = b
	return b
}

// upstreamRequest builds the upstream request from the request headers:
// pseudo headers become method, path and Host; every other header is sent;
// no default User-Agent is added.
func (s *stream) upstreamRequest(ctx context.Context, addr string, rd io.ReadCloser) *http.Request {
	u := &url.URL{Scheme: "http", Host: addr}
	p, q, hasQuery := strings.Cut(s.req.value(":path"), "?")
	if strings.HasPrefix(p, "//") {
		u.Path, u.RawPath = p, p
	} else {
		u.Opaque = p
	}
	u.RawQuery, u.ForceQuery = q, hasQuery && q == ""
	var body io.ReadCloser = http.NoBody
	var length int64
	switch n := contentLength(s.req); {
	case s.buffered && (len(s.body) > 0 || n > 0), !s.buffered && s.hasBody:
		body, length = rd, n
	}
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
