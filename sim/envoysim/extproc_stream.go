package envoysim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// remoteCloseTimeout bounds how long a half-closed ext_proc stream waits for
// the server to close it (ext_proc.cc DefaultRemoteCloseTimeoutMilliseconds).
const remoteCloseTimeout = time.Second

// procStream is the gRPC stream of one filter instance and its receiver.
type procStream struct {
	stream     extprocv3.ExternalProcessor_ProcessClient
	cancel     context.CancelFunc
	recv       chan recvResult
	done       chan struct{} // closed when the receiver exits
	host       *host
	halfClosed bool
	closed     bool
	grace      *time.Timer
}

type recvResult struct {
	resp *extprocv3.ProcessingResponse
	err  error
}

// closeGraceful half-closes the stream (CloseSend) and marks processing
// complete (closeStreamMaybeGraceful); the server gets remoteCloseTimeout to
// close its side.
func (f *extProcFilter) closeGraceful() {
	f.complete = true
	st := f.st
	if st == nil || st.halfClosed || st.closed {
		return
	}
	st.halfClosed = true
	_ = st.stream.CloseSend()
	st.grace = time.AfterFunc(remoteCloseTimeout, st.cancel)
	f.s.e.stats.extProc(func(s *ExtProcStats) { s.StreamsClosed++ })
}

// closeStream resets the stream and marks processing complete.
func (f *extProcFilter) closeStream() {
	f.complete = true
	st := f.st
	if st == nil || st.closed {
		return
	}
	st.closed = true
	st.cancel()
	if !st.halfClosed {
		f.s.e.stats.extProc(func(s *ExtProcStats) { s.StreamsClosed++ })
	}
}

// destroy resets the stream at the end of the request and waits for its
// receiver goroutine.
func (f *extProcFilter) destroy() {
	st := f.st
	if st == nil {
		return
	}
	st.cancel()
	if d := f.reqDuplex; d != nil {
		d.mu.Lock() // a body pump still driving the exchange is done with it
		defer d.mu.Unlock()
	}
	<-st.done
	if st.grace != nil {
		st.grace.Stop()
	}
	st.host.st.active.Add(-1)
	f.st = nil
}

// resultKind is the outcome of an exchange.
type resultKind int

const (
	resResponse resultKind = iota
	resTimeout
	resGRPCError
	resClosed
	resAborted
)

type exchangeResult struct {
	kind resultKind
	resp *extprocv3.ProcessingResponse
	code codes.Code
	msg  string
}

func grpcResult(err error) exchangeResult {
	st := status.Convert(err)
	return exchangeResult{kind: resGRPCError, code: st.Code(), msg: st.Message()}
}

// exchangeOnce sends req (opening the stream on first use) and waits for
// the next response, bounded by message_timeout from the send.
func (f *extProcFilter) exchangeOnce(ctx context.Context, req *extprocv3.ProcessingRequest) exchangeResult {
	deadline := time.Now().Add(f.cfg.messageTimeout)
	if res, ok := f.send(ctx, req, deadline); !ok {
		return res
	}
	return f.await(ctx, deadline)
}

// send sends req, opening the stream on first use (the open bounded by
// deadline). ok is false with the outcome when nothing was sent; a stream
// the server already ended takes the message (its status comes with the
// next await).
func (f *extProcFilter) send(ctx context.Context, req *extprocv3.ProcessingRequest, deadline time.Time) (res exchangeResult, ok bool) {
	if f.st == nil {
		if res, ok := f.open(ctx, deadline); !ok {
			return res, false
		}
	}
	if !f.sentFirst {
		f.sentFirst = true
		req.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: f.mode.reqBody, ResponseBodyMode: f.mode.respBody}
	}
	req.MetadataContext = f.metadataContext()
	if err := f.st.stream.Send(req); err != nil {
		if ctx.Err() != nil {
			return exchangeResult{kind: resAborted}, false
		}
		if !errors.Is(err, io.EOF) {
			return grpcResult(err), false
		}
		// io.EOF: the stream is over; Recv delivers its status.
	} else {
		f.s.e.stats.extProc(func(s *ExtProcStats) { s.MessagesSent++ })
	}
	return exchangeResult{}, true
}

// await waits for the next response until deadline; a response carrying
// override_message_timeout restarts the timer once (if within
// (0, max_message_timeout]) and is otherwise ignored (Filter::onNewTimeout).
func (f *extProcFilter) await(ctx context.Context, deadline time.Time) exchangeResult {
	stats := f.s.e.stats
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	overridden := false
	for {
		select {
		case <-ctx.Done():
			return exchangeResult{kind: resAborted}
		case <-timer.C:
			return exchangeResult{kind: resTimeout}
		case r := <-f.st.recv:
			if r.err != nil {
				if errors.Is(r.err, io.EOF) {
					return exchangeResult{kind: resClosed}
				}
				return grpcResult(r.err)
			}
			f.answered = true
			d := r.resp.GetOverrideMessageTimeout()
			if d == nil {
				return exchangeResult{kind: resResponse, resp: r.resp}
			}
			if t := d.AsDuration(); !overridden && t >= time.Millisecond && t <= f.cfg.maxMessageTimeout {
				overridden = true
				timer.Reset(t)
				stats.extProc(func(s *ExtProcStats) { s.OverrideTimeoutReceived++ })
			} else {
				stats.extProc(func(s *ExtProcStats) { s.OverrideTimeoutIgnored++ })
			}
		}
	}
}

// open starts the gRPC stream to a host of the filter's cluster, with
// grpc_service.initial_metadata as request metadata, and its receiver. A
// zero deadline sets no timer.
func (f *extProcFilter) open(ctx context.Context, deadline time.Time) (exchangeResult, bool) {
	e := f.s.e
	cl := f.s.snap.clusters[f.cfg.clusterName]
	if cl == nil {
		return exchangeResult{kind: resGRPCError, code: codes.Unavailable, msg: fmt.Sprintf("cluster %s not available", f.cfg.clusterName)}, false
	}
	lc := &lbContext{req: grpcLBRequest(f.cfg.initialMetadata, &f.grpcInfo)}
	if f.avoid != nil {
		lc.retry, lc.maxAttempts, lc.avoid = true, uint32(max(f.cfg.retry.hostAttempts, 0)), f.avoid
	}
	h := cl.chooseHost(e.rand, lc)
	if h == nil {
		return exchangeResult{kind: resGRPCError, code: codes.Unavailable, msg: bodyNoHealthyUpstream}, false
	}
	f.lastHost = h.addr
	conn, err := e.grpc.dial(cl.cfg, h.addr, e.stats)
	if err != nil {
		return exchangeResult{kind: resGRPCError, code: codes.Unavailable, msg: err.Error()}, false
	}
	// Envoy's connection pool (conn_pool_base.cc) connects for a stream
	// that finds no ready connection, at once: a failed connection leaves
	// no back-off behind for the next request. grpc-go would make
	// streams fail fast until its reconnect back-off ends (after a
	// restart of the processor, requests kept failing for up to 2 s).
	if conn.GetState() == connectivity.TransientFailure {
		conn.ResetConnectBackoff()
	}
	sctx, cancel := context.WithCancel(ctx)
	sctx = withMetadata(sctx, f.cfg.initialMetadata)
	var timedOut atomic.Bool
	var t *time.Timer
	if !deadline.IsZero() { // zero: no message timer (FULL_DUPLEX_STREAMED)
		t = time.AfterFunc(time.Until(deadline), func() { timedOut.Store(true); cancel() })
	}
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(sctx)
	if t != nil {
		t.Stop()
	}
	if err != nil {
		cancel()
		switch {
		case ctx.Err() != nil:
			return exchangeResult{kind: resAborted}, false
		case timedOut.Load():
			return exchangeResult{kind: resTimeout}, false
		}
		return grpcResult(err), false
	}
	h.st.active.Add(1)
	cl.rt.traffic.Store(true) // the async client's connection counts as cluster traffic
	e.stats.upstreamRequest(cl.cfg.name, h.addr)
	e.stats.extProc(func(s *ExtProcStats) { s.StreamsStarted++ })
	ps := &procStream{stream: stream, cancel: cancel, recv: make(chan recvResult, 8), done: make(chan struct{}), host: h}
	go func() {
		defer close(ps.done)
		for {
			resp, err := stream.Recv()
			select {
			case ps.recv <- recvResult{resp: resp, err: err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	f.st = ps
	return exchangeResult{}, true
}
