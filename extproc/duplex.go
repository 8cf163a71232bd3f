package extproc

import (
	"context"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// Envoy's FULL_DUPLEX_STREAMED body mode, the one the Gateway API
// Inference Extension's endpoint pickers are wired with (istiod's
// InferencePool routes: request and response bodies full duplex, trailers
// SEND). Envoy's rules (source/extensions/filters/http/ext_proc:
// processor_state.cc handleHeadersResponse, handleDuplexStreamedBody-
// Response, handleStreamedBodyCallback):
//
//   - Envoy sends each body chunk as it arrives, even while the request
//     headers' answer is pending, and keeps no copy: the body that goes
//     upstream is the one the processor sends back, as
//     StreamedBodyResponse messages; the call ends with one whose
//     end_of_stream is set (or with a trailers answer when the request
//     has trailers). A plain body answer is a protocol error Envoy turns
//     into a 500, and so is a body answer before the headers' answer.
//   - Header mutations and dynamic metadata that route the request must
//     come with the request headers' answer, which may wait for the body
//     (no message timeout applies in this mode).
//
// So ILB holds the headers' answer, keeps the chunks (bounded by
// extproc.max_body_bytes) until the body's end, decides, and sends the
// headers' answer (its decision, the override-host metadata) then the
// whole body back unchanged in chunks of at most duplexChunk bytes, the
// last marked end_of_stream. A request decided on its headers alone
// (no body ILB reads) has every chunk echoed as it comes. Response
// chunks are echoed as they come (tokens stream through).

// duplexChunk bounds a StreamedBodyResponse's body (gRPC's default
// message limit is 4 MiB; GIE's pickers send 62,000 bytes). grpc-go
// marshals a message into a pooled buffer of the next size tier (256 B,
// 4, 16 and 32 KiB, then 1 MiB) and clears it first: a message just
// under 32 KiB takes a 32 KiB buffer where a 64 KiB one takes and clears
// 1 MiB (BenchmarkPickerCPU: 1.9x the floor's CPU for a 256 KiB body
// with 64 KiB chunks). The margin covers the message's framing.
const duplexChunk = 32<<10 - 256

// onDuplexBody answers a request body chunk in full-duplex mode.
func (s *Server) onDuplexBody(ctx context.Context, x *exchange, m *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	if !x.held {
		// Decided on the headers (or answered): pass the chunk through.
		return streamedBody(true, m.GetBody(), m.GetEndOfStream())
	}
	began := time.Now()
	if len(x.body)+len(m.GetBody()) > s.opts.Config.ExtProc.MaxBodyBytes {
		x.held = false
		s.dropBody(x)
		return s.reject(x, s.tooLarge(), began)
	}
	if !m.GetEndOfStream() || x.body != nil { // a body in one message is the message's: not held
		if err := s.hold(x, len(m.GetBody())); err != nil {
			x.held = false
			return s.reject(x, err, began)
		}
	}
	if x.body == nil && !m.GetEndOfStream() {
		// One buffer for the whole body when its length is declared
		// (bounded by max_body_bytes), from a pool (bodypool.go):
		// appending chunk by chunk would copy it again at every growth.
		if n := x.h.contentLength; n > len(m.GetBody()) && n <= s.opts.Config.ExtProc.MaxBodyBytes {
			x.body, x.release = getBody(n)
		}
	}
	if x.body == nil && m.GetEndOfStream() {
		x.body = m.GetBody() // the whole body in one chunk: no copy
	} else {
		x.body = append(x.body, m.GetBody()...)
	}
	if !m.GetEndOfStream() {
		return nil // kept: answered once the body is whole
	}
	return s.releaseDuplex(ctx, x, true, began)
}

// onDuplexTrailers answers request trailers that end a body ILB holds:
// the decision, the body, then the trailers' answer.
func (s *Server) onDuplexTrailers(ctx context.Context, x *exchange) *extprocv3.ProcessingResponse {
	resp := s.releaseDuplex(ctx, x, false, time.Now())
	if resp.GetImmediateResponse() == nil {
		x.more = append(x.more, continueRequestTrailers)
	}
	return resp
}

// releaseDuplex decides on the body held and returns the request
// headers' answer; the body follows in x.more (eos: the last chunk ends
// the body). A refusal is an ImmediateResponse alone.
func (s *Server) releaseDuplex(ctx context.Context, x *exchange, eos bool, began time.Time) *extprocv3.ProcessingResponse {
	x.held = false
	body := x.body
	x.body = nil
	defer s.dropBody(x) // decided on: the rest goes back to Envoy
	x.stage = awaitResponse
	mut, err := s.decideBody(ctx, x, body, began)
	if err != nil {
		return s.reject(x, err, began)
	}
	for len(body) > duplexChunk {
		x.more = append(x.more, streamedBody(true, body[:duplexChunk], false))
		body = body[duplexChunk:]
	}
	x.more = append(x.more, streamedBody(true, body, eos))
	return x.answer.headersResponse(mut, x.rematch())
}

// streamedBody is a full-duplex body answer carrying body (request or
// response side).
func streamedBody(request bool, body []byte, eos bool) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: body, EndOfStream: eos}},
	}}}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
}
