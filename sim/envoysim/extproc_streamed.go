package envoysim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// STREAMED response bodies (ext_proc.cc Filter::onData,
// handleDataStreamedMode and handleDataStreamedModeBase; processor_state.cc
// handleStreamedBodyCallback, handleStreamedBodyResponse, clearAsyncState;
// Filter::closeGrpcStreamIfLastRespReceived), with STREAMED as the
// filter's (or the route's) response_body_mode or from a mode_override in
// the answer to the response headers:
//
//   - every data frame of the response becomes a response_body message
//     {body, end_of_stream}, under message_timeout from its send
//     (sendBodyChunk → onStartProcessorCall); the frame reaches the client
//     only with the processor's answer for it (injectEncodedDataToFilterChain).
//     Envoy pipelines: it sends each frame as it arrives and queues it, and
//     the answers inject the queued frames in order. envoysim sends a frame,
//     waits for its answer and forwards it before reading the next one: the
//     messages, their order and contents, and what the client gets are the
//     same; the processor only never sees frame N+1 before it answered N
//     (but for the end frame below);
//   - frames are the upstream's reads. An HTTP/1 upstream's codec delivers
//     the body as it is read (end_stream false) and the end of the message
//     as an empty frame of its own (http1 codec_impl.cc
//     ConnectionImpl::onMessageCompleteImpl dispatches the buffered body,
//     then ClientConnectionImpl::onMessageCompleteBase calls decodeData
//     with an empty buffer and end_stream true): the last message is an
//     empty body with end_of_stream. When the end came with the last data
//     (one read: a content-length body), both frames go before any answer,
//     as Envoy sends them on arrival, so that the processor gets the end
//     even when a client that has the whole body goes away before the
//     first answer is forwarded (sendWithEnd). Other sources end the
//     stream with their last read: on its data when the read returns
//     io.EOF with it, else as an empty end_of_stream message (Go's HTTP/2
//     transport always reports the end on a read of its own, so an HTTP/2
//     upstream's body ends with an empty end_of_stream message even where
//     Envoy sees END_STREAM on the last DATA frame); a buffered body (a local reply's, sent by
//     the filter manager as one encodeData with end_stream) is one message
//     with end_of_stream. When trailers follow, no frame has end_stream
//     (the codec's onChunkHeader dispatches the body before the trailers),
//     so no message has end_of_stream, and (trailer mode SKIP: SEND is not
//     modelled here) no trailers message goes;
//   - an answer's body_mutation replaces the frame (body) or empties it
//     (clear_body); an empty frame is not injected, the stream just goes
//     on (handleStreamedBodyResponse). Its header_mutation is ignored (the
//     streamed callback applies none, the headers are gone) and so is
//     CONTINUE_AND_REPLACE (the status is not read for body answers). A
//     streamed_response is spurious in this mode;
//   - the answer to the frame with end_stream closes the stream as after
//     every last answer (closeGrpcStreamIfLastRespReceived, isLastBodyResponse:
//     the queued frame's end_stream): see closeGraceful;
//   - failures follow Filter::onMessageTimeout, onGrpcError, onGrpcClose
//     and onReceiveMessage: when processing ends and the filter goes on
//     (failure_mode_allow, or the server closed the stream with OK) the
//     frame waiting for its answer is injected untouched (clearAsyncState)
//     and the rest of the body flows without ext_proc. Otherwise the
//     filter sends a local reply, which after the response headers went
//     downstream can only reset the stream
//     (DownstreamFilterManager::sendLocalReply: "Prior headers have already
//     been sent"): the client sees its response cut.
//
// Content-length (ProcessorState::shouldRemoveContentLength, true for
// STREAMED): Filter::encodeHeaders removes it when it returns, after the
// headers message went and before its answer, unless processing is
// complete; so only a STREAMED mode in force at the response headers
// removes it, and a mode_override to STREAMED in their answer keeps the
// upstream's. processHeaderMutation passes the same test, evaluated at the
// answer (after the override), as remove_content_length: a content-length
// the answer sets is then skipped (MutationUtils::applyHeaderMutations).

const streamed = extprocfilterv3.ProcessingMode_STREAMED

// streamedAtHeaders is shouldRemoveContentLength for the response headers
// as Filter::encodeHeaders evaluates it when it returns: with the mode in
// force before the answer. The caller removes content-length once the
// headers message went (sent: processing is not complete), before the
// answer is applied.
func (f *extProcFilter) streamedAtHeaders(dir direction) bool {
	return dir == dirResponse && f.mode.respBody == streamed
}

// streamedMutation is the header mutation of a response headers answer as
// processHeaderMutation applies it: with a STREAMED response body in force
// after the answer's mode_override, content-length entries of set_headers
// are skipped (before they are validated).
func (f *extProcFilter) streamedMutation(dir direction, hm *extprocv3.HeaderMutation) *extprocv3.HeaderMutation {
	if dir != dirResponse || f.mode.respBody != streamed {
		return hm
	}
	out := &extprocv3.HeaderMutation{RemoveHeaders: hm.GetRemoveHeaders()}
	for _, sh := range hm.GetSetHeaders() {
		if !strings.EqualFold(sh.GetHeader().GetKey(), "content-length") {
			out.SetHeaders = append(out.SetHeaders, sh)
		}
	}
	return out
}

// streamResponse makes body the STREAMED body the next filter (or the
// client) reads. It is called once processing runs with a STREAMED
// response body and the response has one.
func (f *extProcFilter) streamResponse(body *responseBody) {
	b := &streamedResponse{f: f, src: body.r, endFrame: body.endFrame, trailers: body.trailers}
	if body.buffered {
		b.src, b.whole, b.hasWhole = nil, body.buf, true
	}
	// What this filter passes on carries end_stream with its data.
	body.r, body.buffered, body.buf, body.endFrame = b, false, nil, false
}

// streamedResponse is a response body under STREAMED: Read returns the
// frames as the processor answered them, in order, then EOF. It drives the
// exchange itself on the reader's goroutine (the stream's: the body is read
// by writeResponse or by the next filter); a failure that ends the
// response fails the read.
type streamedResponse struct {
	f        *extProcFilter
	src      io.Reader   // the body as the upstream (or the previous filter) delivers it; nil with whole
	whole    []byte      // a buffered body: one frame with end_stream
	hasWhole bool        // whole is still to send
	endFrame bool        // src's end is an empty frame of its own (an HTTP/1 upstream)
	trailers func() bool // whether trailers follow, once src ended; nil: never
	flushed  bool        // the response headers were flushed downstream
	pending  []byte      // answered bytes not yet read
	srcDone  bool        // src ended (or failed): nothing more comes from it
	endSent  bool        // the end frame went with the last data: its answer is due
	deadline time.Time   // the message timer of the end frame in flight
	eos      bool        // the body's end was answered (or passed): EOF once pending is read
	failed   error       // the failure that ended the body
}

// Read implements io.Reader.
func (b *streamedResponse) Read(p []byte) (int, error) {
	b.flushHeaders()
	for {
		switch {
		case len(b.pending) > 0:
			n := copy(p, b.pending)
			b.pending = b.pending[n:]
			if len(b.pending) == 0 && b.eos {
				return n, io.EOF
			}
			return n, nil
		case b.eos:
			return 0, io.EOF
		case b.failed != nil:
			return 0, b.failed
		case b.f.complete && b.hasWhole:
			b.pending, b.hasWhole, b.srcDone, b.eos = b.whole, false, true, true
			b.whole = nil
			continue
		case b.f.complete:
			return b.passThrough(p)
		}
		b.failed = b.step(b.f.s.r.Context())
	}
}

// flushHeaders sends the response headers downstream before the first
// frame is processed: in Envoy they went on with their answer
// (handleHeadersResponse → continueIfNecessary), so the client has them
// while the body is processed, and a later failure can only cut the stream.
func (b *streamedResponse) flushHeaders() {
	if b.flushed || !b.f.s.responded {
		return
	}
	b.flushed = true
	_ = http.NewResponseController(b.f.s.w).Flush()
}

// passThrough reads the rest of the body once processing ended
// (Filter::onData: processing complete, continue).
func (b *streamedResponse) passThrough(p []byte) (int, error) {
	if b.srcDone {
		return 0, io.EOF
	}
	return b.src.Read(p)
}

// step sends the next frame and handles its answer. A non-nil error ends
// the body: the upstream's read error, or a failure that resets the stream.
func (b *streamedResponse) step(ctx context.Context) error {
	f := b.f
	if b.endSent { // the end frame's answer
		b.endSent = false
		if err := b.apply(ctx, f.await(ctx, b.deadline), nil, true); err != nil {
			return err
		}
		b.eos = true
		return nil
	}
	var data []byte
	end := false
	if b.hasWhole {
		data, end, b.hasWhole, b.srcDone = b.whole, true, false, true
		b.whole = nil
	} else {
		buf := make([]byte, bodyChunk)
		n, err := b.src.Read(buf)
		data = buf[:n]
		switch {
		case errors.Is(err, io.EOF):
			b.srcDone = true
			switch {
			case b.trailers != nil && b.trailers():
				// Trailers follow: the last data does not end the stream.
				if n == 0 {
					b.eos = true
					return nil
				}
			case b.endFrame && n > 0:
				return b.sendWithEnd(ctx, data)
			default:
				end = true
			}
		case err != nil:
			b.srcDone = true
			return err // the upstream failed: the router resets the stream
		case n == 0:
			return nil
		}
	}
	if err := b.apply(ctx, f.exchange(ctx, bodyRequest(data, end)), data, end); err != nil {
		return err
	}
	if b.srcDone {
		b.eos = true
	}
	return nil
}

// sendWithEnd sends the last data and the empty end frame an HTTP/1
// codec delivers with it (one dispatch: onMessageCompleteImpl), both
// before any answer as Envoy sends every frame on arrival, then handles the
// data's answer; the end frame's answer is the next step's. The message
// timer restarts at the second send (onStartProcessorCall) and bounds both
// answers (Envoy stops it at the first answer while the end frame is still
// queued: handleStreamedBodyResponse → onFinishProcessorCall; envoysim keeps
// it for the end frame).
func (b *streamedResponse) sendWithEnd(ctx context.Context, data []byte) error {
	f := b.f
	if res, ok := f.send(ctx, bodyRequest(data, false), time.Now().Add(f.cfg.messageTimeout)); !ok {
		return b.apply(ctx, res, data, false)
	}
	b.deadline = time.Now().Add(f.cfg.messageTimeout)
	if res, ok := f.send(ctx, bodyRequest(nil, true), b.deadline); !ok {
		return b.apply(ctx, res, data, false)
	}
	b.endSent = true
	return b.apply(ctx, f.await(ctx, b.deadline), data, false)
}

func bodyRequest(data []byte, end bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: data, EndOfStream: end},
	}}
}

// apply handles the outcome of a frame's exchange (onReceiveMessage,
// handleStreamedBodyCallback): the frame to forward becomes b.pending.
func (b *streamedResponse) apply(ctx context.Context, res exchangeResult, data []byte, end bool) error {
	f := b.f
	if res.kind == resResponse && res.resp.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse() != nil {
		f.receiveMetadata(res.resp) // before handleBodyResponse, as onReceiveMessage does
		return b.outcome(f.onSpurious("spurious message: streamed_response is received while body_mode_ is not FULL_DUPLEX_STREAMED"), data)
	}
	lr, common, done := f.dispatch(res, kindResponseBody)
	if done {
		return b.outcome(lr, data)
	}
	if common.GetHeaderMutation() != nil {
		f.s.e.log.DebugContext(ctx, "ext_proc header_mutation in a STREAMED body answer is ignored, as Envoy does")
	}
	switch m := common.GetBodyMutation().GetMutation().(type) {
	case *extprocv3.BodyMutation_Body:
		data = m.Body
	case *extprocv3.BodyMutation_ClearBody:
		if m.ClearBody {
			data = nil
		}
	}
	b.pending = data
	if end {
		f.closeGraceful() // closeGrpcStreamIfLastRespReceived
	}
	return nil
}

// outcome ends an exchange that did not apply an answer: with no local
// reply processing is complete and the frame in flight goes on untouched
// (clearAsyncState); a local reply cannot be sent after the response
// headers, so the stream is reset.
func (b *streamedResponse) outcome(lr *localReply, data []byte) error {
	if lr == nil {
		b.pending = data
		return nil
	}
	if lr.abort {
		return fmt.Errorf("%w: the stream was reset", errDuplexFailed)
	}
	b.f.s.e.log.Debug("ext_proc failed after the response headers went downstream: resetting the stream",
		"status", lr.status, "details", lr.details)
	return fmt.Errorf("%w: %s", errDuplexFailed, lr.details)
}
