package extproc

import (
	"context"
	"fmt"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ilbproject/ilb/openai"
)

// onRequestBody takes the request body: a body over
// extproc.max_body_bytes is refused; a streamed body is held chunk by
// chunk (against the server's body budget) until its end; the whole body
// is then decided on (decideBody) and the decision answered.
func (s *Server) onRequestBody(ctx context.Context, x *exchange, m *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	began := time.Now()
	if x.done || x.st == nil || x.rec.Chosen != "" {
		return bodyResponse(nil, false)
	}
	if len(x.body)+len(m.GetBody()) > s.opts.Config.ExtProc.MaxBodyBytes {
		s.dropBody(x)
		return s.reject(x, s.tooLarge(), began)
	}
	data := m.GetBody()
	if x.streamed {
		if !m.GetEndOfStream() || x.body != nil {
			if err := s.hold(x, len(data)); err != nil {
				return s.reject(x, err, began)
			}
		}
		x.body = append(x.body, data...)
		if !m.GetEndOfStream() {
			return bodyResponse(nil, false) // a chunk: wait for the rest
		}
		data = x.body
	}
	x.stage = awaitResponse
	x.body = nil
	defer s.dropBody(x) // once decided on
	mut, err := s.decideBody(ctx, x, data, began)
	if err != nil {
		return s.reject(x, err, began)
	}
	return x.answer.bodyResponse(mut, x.rematch())
}

// decideBody decides on the whole request body data; an error is the
// request's refusal.
func (s *Server) decideBody(ctx context.Context, x *exchange, data []byte, began time.Time) (*extprocv3.HeaderMutation, error) {
	b, err := openai.ParseBody(x.h.endpoint, data)
	if err != nil && x.h.endpoint != openai.EndpointOther {
		return nil, err
	}
	if err != nil {
		// Not an OpenAI endpoint ILB knows: the body need not be JSON;
		// route by the default model.
		b = openai.Body{}
	}
	mut, err := s.decide(x, &b)
	if err != nil {
		return nil, err
	}
	s.spanDecided(ctx, x, mut)
	s.decided(x, began)
	return mut, nil
}

// hold accounts n more bytes of x's body against
// extproc.max_held_body_bytes, or refuses the request (503 body_memory)
// and drops what x held.
func (s *Server) hold(x *exchange, n int) error {
	if s.held.Add(int64(n)) > s.opts.Config.ExtProc.MaxHeldBodyBytes {
		s.held.Add(-int64(n))
		s.dropBody(x)
		return &RequestError{
			Status: 503, Type: "service_unavailable", Code: "body_memory", RetryAfter: 1,
			Msg: fmt.Sprintf("the router holds extproc.max_held_body_bytes (%d) of request bodies arriving in chunks; retry in a second", s.opts.Config.ExtProc.MaxHeldBodyBytes),
		}
	}
	x.heldBytes += int64(n)
	s.metrics.heldBytes.Add(float64(n))
	return nil
}

// dropBody releases x's held body and its account.
func (s *Server) dropBody(x *exchange) {
	if x.heldBytes != 0 {
		s.held.Add(-x.heldBytes)
		s.metrics.heldBytes.Sub(float64(x.heldBytes))
		x.heldBytes = 0
	}
	x.body = nil
}

// tooLarge is the refusal of a body over extproc.max_body_bytes.
func (s *Server) tooLarge() *RequestError {
	return &RequestError{
		Status: 413, Type: "invalid_request_error", Code: "request_too_large",
		Msg: fmt.Sprintf("the request body is over %d bytes", s.opts.Config.ExtProc.MaxBodyBytes),
	}
}
