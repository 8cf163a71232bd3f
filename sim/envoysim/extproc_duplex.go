package envoysim

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// FULL_DUPLEX_STREAMED bodies (ext_proc.cc handleDataStreamedModeBase,
// processor_state.cc handleHeadersResponse, handleStreamedBodyCallback,
// handleDuplexStreamedBodyResponse, getCallbackStateAfterHeaderResp):
//
//   - the headers message goes out (content-length is then removed:
//     shouldRemoveContentLength), and every body chunk is sent as it
//     arrives, drained from the stream, without waiting for any answer;
//   - no message timer runs in this mode (onStartProcessorCall skips it);
//   - the headers' answer must come first (a body answer before it is
//     spurious). If the whole body had arrived by then, the headers wait
//     for the body answers; otherwise they go on at once and the body
//     follows as the answers come;
//   - a body answer must carry body_mutation.streamed_response (anything
//     else is spurious): its bytes are injected downstream of the filter,
//     its end_of_stream ends the body. The body the next filter (or the
//     router, or the client) sees is what the processor sent back;
//   - when processing ends early (the server closed the stream, a spurious
//     answer, fail-open), chunks sent and not answered are lost and the
//     rest of the body passes unprocessed, as in Envoy.
//
// Trailers: with trailer mode SEND (required by Envoy with this body
// mode) a message with trailers would send them; envoysim does not model
// trailers through ext_proc, so a request or response carrying trailers
// is reset (logged, ExtProcStats.UnmodelledTrailers).

// bodyPiece is a piece of a body read on a chunk reader's goroutine.
type bodyPiece struct {
	data     []byte
	eos      bool // the body ended with this piece
	trailers bool // ... and trailers follow
	err      error
}

// readPieces reads src in bodyChunk pieces on its own goroutine, one piece
// ahead of the consumer (the filter's watermark), until the end of the
// body, a read error or done. trailers reports, at the end, whether the
// message has trailers.
func readPieces(src io.Reader, trailers func() bool, done <-chan struct{}) <-chan bodyPiece {
	out := make(chan bodyPiece)
	go func() {
		defer close(out)
		for {
			p := make([]byte, bodyChunk)
			n, err := src.Read(p)
			piece := bodyPiece{data: p[:n]}
			switch {
			case errors.Is(err, io.EOF):
				piece.eos, piece.trailers = true, trailers()
			case err != nil:
				piece.err = err
			case n == 0:
				continue
			}
			select {
			case out <- piece:
			case <-done:
				return
			}
			if piece.eos || piece.err != nil {
				return
			}
		}
	}()
	return out
}

// errDuplexFailed ends a body whose ext_proc exchange failed while the
// body was being forwarded.
var errDuplexFailed = errors.New("envoysim: ext_proc failed while the body was streamed")

// duplex is one direction of a full-duplex exchange. Its state belongs to
// whoever holds mu: the stream's goroutine, or the router's body pump
// while the request body is forwarded as it is answered.
type duplex struct {
	mu        sync.Mutex
	f         *extProcFilter
	dir       direction
	pieces    <-chan bodyPiece // nil: no body
	sentEOS   bool             // the body's end went out (complete body available)
	passEOS   bool             // processing ended and the raw body ended
	awaitHead bool             // the headers' answer is due
	recvEOS   bool             // the processor's streamed body ended
	pending   []byte           // bytes answered and not yet read
	main      bool             // run on the stream's goroutine (the route may be cleared)
	failed    *localReply      // the outcome that ended a streamed body
}

func (d *duplex) sendTrailers() bool {
	if d.dir == dirRequest {
		return d.f.mode.sendReqTrailers
	}
	return d.f.mode.sendRespTrailers
}

// send sends one message, opening the stream on first use (no message
// timer: the open is bounded by the request's context only). sent is
// false when the stream could not be opened (with fail-open, processing
// is then complete and the message's data passes on).
func (d *duplex) send(ctx context.Context, req *extprocv3.ProcessingRequest) (sent bool, lr *localReply) {
	f := d.f
	if f.st == nil {
		if res, ok := f.open(ctx, time.Time{}); !ok {
			lr, _, _ := f.dispatch(res, kindRequestHeaders)
			return false, lr
		}
	}
	if !f.sentFirst {
		f.sentFirst = true
		req.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: f.mode.reqBody, ResponseBodyMode: f.mode.respBody}
	}
	req.MetadataContext = f.metadataContext()
	if err := f.st.stream.Send(req); err != nil {
		if ctx.Err() != nil {
			return true, &localReply{abort: true}
		}
		if !errors.Is(err, io.EOF) {
			lr, _, _ := f.dispatch(grpcResult(err), kindRequestHeaders)
			return true, lr
		}
		return true, nil // the stream is over: the receiver delivers its status
	}
	f.s.e.stats.extProc(func(s *ExtProcStats) { s.MessagesSent++ })
	return true, nil
}

// sendHeaders sends the headers message; its answer is awaited by step.
func (d *duplex) sendHeaders(ctx context.Context, h *headerMap, endOfStream bool) *localReply {
	msg := &extprocv3.HttpHeaders{Headers: h.toProto(), EndOfStream: endOfStream}
	req := &extprocv3.ProcessingRequest{}
	if d.dir == dirRequest {
		req.Request = &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: msg}
		d.f.reqHeadersSent = true
	} else {
		req.Request = &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: msg}
		d.f.respHeadersSent = true
	}
	sent, lr := d.send(ctx, req)
	d.awaitHead = sent && lr == nil && !d.f.complete
	return lr
}

// sendPiece forwards a body piece: to the processor while processing
// runs, else straight on.
func (d *duplex) sendPiece(ctx context.Context, p bodyPiece) *localReply {
	f := d.f
	if p.err != nil {
		return &localReply{abort: true} // the peer's body failed: reset
	}
	if p.trailers && d.sendTrailers() {
		f.s.e.stats.extProc(func(s *ExtProcStats) { s.UnmodelledTrailers++ })
		f.s.e.log.ErrorContext(ctx, "envoysim: trailers through a FULL_DUPLEX_STREAMED ext_proc exchange are not modelled; resetting the stream")
		return &localReply{abort: true}
	}
	if f.complete {
		d.pending = append(d.pending, p.data...)
		d.passEOS = p.eos
		return nil
	}
	// With trailers the last data chunk does not end the stream (the
	// trailers message would); they are not sent unless SEND (above).
	eos := p.eos && !p.trailers
	d.sentEOS = p.eos
	msg := &extprocv3.HttpBody{Body: p.data, EndOfStream: eos}
	req := &extprocv3.ProcessingRequest{}
	if d.dir == dirRequest {
		req.Request = &extprocv3.ProcessingRequest_RequestBody{RequestBody: msg}
	} else {
		req.Request = &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: msg}
	}
	sent, lr := d.send(ctx, req)
	if !sent && lr == nil { // fail-open on a stream that never opened: the data passes
		d.pending = append(d.pending, p.data...)
		d.passEOS = p.eos
	}
	return lr
}

// step waits for one event, a body piece to forward or an answer, and
// handles it. A non-nil local reply ends the exchange (abort: reset).
func (d *duplex) step(ctx context.Context) *localReply {
	f := d.f
	var pieces <-chan bodyPiece
	if !d.sentEOS && !d.passEOS && d.pieces != nil {
		pieces = d.pieces
	}
	var recv <-chan recvResult
	var gone <-chan struct{}
	if f.st != nil && !f.complete {
		recv, gone = f.st.recv, f.st.done
	}
	select {
	case <-ctx.Done():
		return &localReply{abort: true}
	case p, ok := <-pieces:
		if !ok {
			return &localReply{abort: true}
		}
		return d.sendPiece(ctx, p)
	case r := <-recv:
		return d.handle(r)
	case <-gone:
		select {
		case r := <-recv:
			return d.handle(r)
		default:
			return &localReply{abort: true} // the stream was reset
		}
	}
}

// await steps until done() or processing ends.
func (d *duplex) await(ctx context.Context, done func() bool) *localReply {
	for !done() && !d.f.complete {
		if lr := d.step(ctx); lr != nil {
			return lr
		}
	}
	return nil
}

// handle applies one answer (onReceiveMessage): errors and closes as in
// every mode; override_message_timeout is ignored (no timer runs); the
// headers' answer, then streamed body answers of this direction.
func (d *duplex) handle(r recvResult) *localReply {
	f := d.f
	if r.err != nil {
		if errors.Is(r.err, io.EOF) {
			f.onClosed()
			return nil
		}
		res := grpcResult(r.err)
		return f.onGRPCError(res.code, res.msg)
	}
	f.answered = true
	resp := r.resp
	if resp.GetOverrideMessageTimeout() != nil {
		f.s.e.stats.extProc(func(s *ExtProcStats) { s.OverrideTimeoutIgnored++ })
		return nil
	}
	if f.cfg.allowModeOverride && d.awaitHead && resp.GetModeOverride() != nil {
		f.s.e.stats.extProc(func(s *ExtProcStats) { s.UnsupportedModeOverride++ })
		return f.onError("envoysim: mode_override with a FULL_DUPLEX_STREAMED body is not modelled")
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		if !f.cfg.disableImmediateResponse {
			f.receiveMetadata(resp)
		}
		return f.onImmediate(ir)
	}
	var common *extprocv3.CommonResponse
	headers, body := false, false
	switch x := resp.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		headers, common = d.dir == dirRequest, x.RequestHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		headers, common = d.dir == dirResponse, x.ResponseHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_RequestBody:
		body, common = d.dir == dirRequest, x.RequestBody.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseBody:
		body, common = d.dir == dirResponse, x.ResponseBody.GetResponse()
	case nil:
		return f.onSpurious("unhandled message")
	}
	f.receiveMetadata(resp)
	switch {
	case headers && d.awaitHead:
		return d.applyHeaders(common)
	case body && !d.awaitHead && !d.recvEOS && common.GetBodyMutation().GetStreamedResponse() != nil:
		sr := common.GetBodyMutation().GetStreamedResponse()
		d.pending = append(d.pending, sr.GetBody()...)
		d.recvEOS = sr.GetEndOfStream()
		if d.dir == dirRequest && d.main {
			f.clearRouteCache(common)
		}
		f.s.e.stats.extProc(func(s *ExtProcStats) { s.MessagesReceived++ })
		if d.recvEOS && (d.dir == dirResponse || f.noResponseProcessing()) {
			f.closeGraceful() // closeGrpcStreamIfLastRespReceived
		}
		return nil
	case body && !d.awaitHead && common.GetBodyMutation().GetStreamedResponse() == nil:
		return f.onSpurious("spurious message: Normal body mutation response is received while body_mode_ is FULL_DUPLEX_STREAMED")
	}
	return f.onSpurious("spurious message")
}

// applyHeaders applies the headers' answer (handleHeadersResponse):
// mutation under the rules, then on the request path the route cache.
func (d *duplex) applyHeaders(common *extprocv3.CommonResponse) *localReply {
	f := d.f
	if common.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE {
		return f.onError("envoysim: CONTINUE_AND_REPLACE is not modelled")
	}
	d.awaitHead = false
	h := f.s.req
	if d.dir == dirResponse {
		h = f.respHeaders
	}
	if hm := common.GetHeaderMutation(); hm != nil {
		if err := f.applyMutation(h, hm); err != nil {
			return f.onError(err.Error())
		}
	}
	if d.dir == dirRequest {
		f.clearRouteCache(common)
	}
	f.s.e.stats.extProc(func(s *ExtProcStats) { s.MessagesReceived++ })
	return nil
}

// Read is the body downstream of the filter while it is streamed: the
// bytes answered, in order, then EOF at the processor's end of stream (or
// the raw body's end once processing ended). It drives the exchange
// itself; an exchange failure fails the read.
func (d *duplex) Read(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ctx := d.f.s.r.Context()
	for {
		switch {
		case len(d.pending) > 0:
			n := copy(p, d.pending)
			d.pending = d.pending[n:]
			return n, nil
		case d.recvEOS, d.passEOS:
			return 0, io.EOF
		case d.failed != nil:
			return 0, errDuplexFailed
		case d.f.complete && (d.pieces == nil || d.sentEOS):
			return 0, io.EOF // processing ended and nothing more passes
		}
		// While processing runs, answers come; once it ended, the rest
		// of the raw body passes unprocessed.
		if lr := d.step(ctx); lr != nil {
			d.failed = lr
			d.f.s.e.log.Debug("ext_proc exchange failed while its body was streamed", "status", lr.status, "details", lr.details)
			return 0, errDuplexFailed
		}
	}
}

// received reports whether the whole body went out
// (remoteDecodeComplete for a request body the filter owns).
func (d *duplex) received() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sentEOS || d.passEOS || d.pieces == nil
}

// finish runs the exchange to its end, dropping the bytes: the response
// started before the request body was answered to the end (the upstream
// no longer reads it).
func (d *duplex) finish(ctx context.Context) *localReply {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failed != nil {
		return nil
	}
	lr := d.await(ctx, func() bool { return d.recvEOS || (d.sentEOS && d.f.complete) })
	d.pending = nil
	return lr
}
