package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// stage is what ILB waits for on a stream. Envoy owes ILB the request
// headers, then, unless ILB decided on them, the request body; both are
// bounded by extproc.stream_idle_timeout. The response headers come when
// the engine answers, which may take as long as a generation: no bound.
type stage uint8

const (
	awaitHeaders  stage = iota // the stream is open: request headers next
	awaitBody                  // the headers announced a body ILB needs
	awaitResponse              // ILB answered the request path
)

// Process handles one ext_proc stream. Envoy sends request headers, then
// (BUFFERED) the whole request body, then response headers; every message
// gets exactly one answer of the matching type, or an ImmediateResponse.
// In FULL_DUPLEX_STREAMED mode (duplex.go) the request headers' answer
// waits for the body, and body chunks are answered as duplex.go says.
//
// A stream over extproc.max_streams, or over
// extproc.max_streams_per_peer for its peer, is refused at once
// (RESOURCE_EXHAUSTED); one whose peer may not speak for the source it
// names is refused with the Authorizer's status; one on which Envoy owes
// a message for extproc.stream_idle_timeout ends with DEADLINE_EXCEEDED
// (what Envoy owed in the trailer x-ilb-error when the gRPC server was
// built with GRPCOptions, else in the status message);
// messages out of order (a second request headers message, a body before
// the headers) end it with INVALID_ARGUMENT. Envoy then applies the
// source's fail mode to the request.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	if n := s.open.Add(1); n > int64(s.opts.Config.ExtProc.MaxStreams) {
		s.open.Add(-1)
		s.metrics.refused.WithLabelValues(refusedMaxStreams).Inc()
		return status.Errorf(codes.ResourceExhausted, "ext_proc: %d streams are open, the most extproc.max_streams allows; retry later", n-1)
	}
	defer s.open.Add(-1)
	peerOf := s.opts.PeerOf
	if peerOf == nil {
		peerOf = peerAddr
	}
	p := peerOf(stream.Context())
	if ok, n := s.peers.hold(p); !ok {
		s.metrics.refused.WithLabelValues(refusedPeerStreams).Inc()
		return status.Errorf(codes.ResourceExhausted, "ext_proc: this peer holds %d streams, the most extproc.max_streams_per_peer allows; retry later", n)
	}
	defer s.peers.release(p)
	s.metrics.streams.Inc()
	defer s.metrics.streams.Dec()
	ctx := stream.Context()
	source := sourceOf(stream, s.opts.DefaultSource)
	if s.opts.Authorizer != nil {
		if err := s.opts.Authorizer.Authorize(ctx, source); err != nil {
			return err //nolint:wrapcheck // the authorizer's gRPC status is the answer
		}
	}
	x := s.newExchange(source)
	idle := s.opts.Config.ExtProc.StreamIdleTimeout.Std()
	if sc, ok := ctx.Value(streamCtxKey{}).(*streamCtx); ok {
		// GRPCOptions' tap gave the stream a context ILB may cancel: it is
		// served on this goroutine, and the idle scan cancels it (which
		// ends a blocked Recv) when Envoy owes a message for too long.
		t := &x.idle
		t.idle, t.ctx, t.stream, t.expired = idle, sc, stream, s.metrics.idleRefused
		x.wire = true // the tap and the codec come together (GRPCOptions)
		s.idleScan.add(t)
		err := s.serve(ctx, stream, x, t)
		s.idleScan.remove(t) // the scan is done with t
		st, expired := t.end()
		s.freeExchange(x)
		if expired {
			return status.Error(codes.DeadlineExceeded, idleMessage(st, idle))
		}
		return err
	}
	// Without the tap (a gRPC server not built with GRPCOptions), the
	// stream is served on its own goroutine while this one watches that
	// Envoy does not owe a message for too long: a Recv that blocks cannot
	// be interrupted, but returning from this handler ends the stream,
	// which makes it fail. The serving goroutine, which may outlive this
	// one, frees x.
	w := &watch{idle: idle}
	done := make(chan error, 1)
	go func() {
		err := s.serve(ctx, stream, x, w)
		s.freeExchange(x)
		done <- err
	}()
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-timer.C:
		}
		d, st := w.deadline.Load(), stage(w.stage.Load())
		switch {
		case d == watchNone: // awaiting the response: no bound any more
			return <-done
		case d == watchBusy: // handling a message: look again later
			timer.Reset(idle)
		case time.Until(time.Unix(0, d)) > 0:
			timer.Reset(time.Until(time.Unix(0, d)))
		default:
			s.metrics.idleRefused.Inc()
			return status.Error(codes.DeadlineExceeded, idleMessage(st, idle))
		}
	}
}

// idleMessage says what Envoy owed for how long.
func idleMessage(st stage, idle time.Duration) string {
	return fmt.Sprintf("ext_proc: no %s for %s (extproc.stream_idle_timeout)", st, idle)
}

// serve answers the messages of one stream until it ends, an
// ImmediateResponse is sent, a message breaks the protocol or the idle
// bound ends the stream.
func (s *Server) serve(ctx context.Context, stream extprocv3.ExternalProcessor_ProcessServer, x *exchange, b idleBound) error {
	growStack(0)
	defer s.endSpan(x)
	defer s.dropBody(x)
	defer s.settleBudget(x) // after settle: what the response showed
	defer s.settle(x, followEnded)
	defer x.ticket.Done()
	defer s.answered(x)
	defer s.unfinished(x)
	for {
		b.waitFor(x.stage)
		req, err := stream.Recv()
		if !b.received() {
			return nil // the bound ended the stream: Process answers
		}
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return fmt.Errorf("extproc: receive: %w", err)
		}
		resp, err := s.handle(ctx, x, req)
		if err != nil {
			s.metrics.refused.WithLabelValues(refusedProtocol).Inc()
			return err
		}
		if resp == nil { // a full-duplex chunk ILB keeps: answered later
			continue
		}
		for _, r := range append([]*extprocv3.ProcessingResponse{resp}, x.more...) {
			if err := send(stream, x, r); err != nil {
				return fmt.Errorf("extproc: send: %w", err)
			}
		}
		x.more = x.more[:0]
		if x.release != nil { // the held body went out: its buffer is free
			x.release()
			x.release = nil
		}
		if resp.GetImmediateResponse() != nil || x.finished {
			// Envoy answers the client with it and ends the stream: ILB
			// owes nothing more, and keeps nothing open for a peer that
			// would go on. finished: ILB booked the whole estimate of a
			// followed response; ending the stream (OK) tells Envoy to
			// send the rest of the body straight to the client.
			return nil
		}
	}
}

// send sends r on x's stream: as ILB encoded it when x's server sends
// such bytes as they are (x.wire) and ILB has them (wired), else
// marshalled by gRPC.
func send(stream extprocv3.ExternalProcessor_ProcessServer, x *exchange, r *extprocv3.ProcessingResponse) error {
	if x.wire {
		if e := wired(x, r); e != nil {
			return stream.SendMsg(e) //nolint:wrapcheck // serve wraps it
		}
	}
	return stream.Send(r) //nolint:wrapcheck // serve wraps it
}

// String names what ILB waits for, for messages.
func (st stage) String() string {
	switch st {
	case awaitHeaders:
		return "request headers"
	case awaitBody:
		return "request body"
	}
	return "response headers"
}

// Reasons of ilb_extproc_streams_refused_total.
const (
	refusedMaxStreams = "max_streams"
	// refusedPeerStreams: the stream's peer held extproc.max_streams_per_peer.
	refusedPeerStreams = "peer_streams"
	refusedIdle        = "idle_timeout"
	refusedProtocol    = "protocol_error"
)
