package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/weights"
)

// hints are what ILB reads from the request headers.
type hints struct {
	requestID, method, path string
	priority                string
	session, model          string
	debug                   bool
	endpoint                Endpoint
	contentLength           int
}

// exchange is the state of one stream, that is one HTTP request.
type exchange struct {
	source string
	start  time.Time
	st     *State // pinned at request headers: one version per request
	src    *sourceState
	h      hints
	rec    *Record // nil until ILB decided or answered
	body   []byte  // request body chunks received so far
	debug  bool    // debug asked and allowed
	done   bool    // ILB answered with an ImmediateResponse
	prio   weights.Priority
	key    demand.Key // set once the model is known
	cost   float64    // estimated token cost
	// span is the decision's span while it is open; nil when tracing is
	// off or once it ended.
	span trace.Span
	// streamed is true when Envoy sends the request body in chunks. In
	// BUFFERED mode (what ILB configures) the one body message is the
	// whole body, whether or not end_of_stream is set (it is not when
	// trailers follow). Envoy tells the mode in protocol_config on the
	// first message; Envoys that do not are taken as BUFFERED.
	streamed bool
}

// Process handles one ext_proc stream. Envoy sends request headers, then
// (BUFFERED) the whole request body, then response headers; every message
// gets exactly one answer of the matching type, or an ImmediateResponse.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	s.metrics.streams.Inc()
	defer s.metrics.streams.Dec()
	ctx := stream.Context()
	x := &exchange{source: sourceOf(stream, s.opts.DefaultSource)}
	defer s.endSpan(x)
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return fmt.Errorf("extproc: receive: %w", err)
		}
		resp := s.handle(ctx, x, req)
		if err := stream.Send(resp); err != nil {
			return fmt.Errorf("extproc: send: %w", err)
		}
	}
}

func sourceOf(stream extprocv3.ExternalProcessor_ProcessServer, def string) string {
	md, _ := metadata.FromIncomingContext(stream.Context())
	if v := md.Get(header.Source); len(v) > 0 && v[0] != "" {
		return v[0]
	}
	return def
}

// handle answers one message.
func (s *Server) handle(ctx context.Context, x *exchange, req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	if pc := req.GetProtocolConfig(); pc != nil {
		switch pc.GetRequestBodyMode() {
		case extprocfilterv3.ProcessingMode_STREAMED, extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL:
			x.streamed = true
		}
	}
	switch r := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return s.onRequestHeaders(ctx, x, r.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return s.onRequestBody(ctx, x, r.RequestBody)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return s.onResponseHeaders(x, r.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
	}
	// A message type this version does not know: answer the request path
	// unchanged rather than leave Envoy waiting.
	return headersResponse(nil, false)
}

func (s *Server) onRequestHeaders(ctx context.Context, x *exchange, m *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	x.start = s.opts.Now()
	began := time.Now()
	hs := headerMap(m.GetHeaders())
	x.h = hints{
		requestID: hs[header.RequestID], method: hs[":method"], path: hs[":path"],
		priority: hs[header.Priority], session: hs[header.Session], model: hs[header.Model],
		debug: hs[header.Debug] == "1", endpoint: endpointOf(hs[":path"]),
	}
	x.h.contentLength, _ = strconv.Atoi(hs["content-length"])
	if x.h.requestID == "" {
		x.h.requestID = s.opts.NewID()
	}
	x.rec = &Record{
		RequestID: x.h.requestID, Start: x.start, Source: x.source,
		Method: x.h.method, Path: x.h.path, Priority: weights.Standard.String(),
	}
	s.startSpan(ctx, x, hs)
	if err := s.admit(x); err != nil {
		return s.reject(x, err, began)
	}
	switch {
	case x.h.model != "" || m.GetEndOfStream() && !needsBody(x.h):
		// The client named the model, or there is no body to read (GET
		// /v1/models): decide now, and tell Envoy to skip any body.
		mut, err := s.decide(x, nil)
		if err != nil {
			return s.reject(x, err, began)
		}
		s.spanDecided(ctx, x, mut)
		s.decided(x, began)
		resp := headersResponse(mut, true)
		if !m.GetEndOfStream() {
			resp.ModeOverride = skipBody()
		}
		return resp
	case m.GetEndOfStream():
		return s.reject(x, badRequest("", "invalid_json",
			fmt.Sprintf("the request has no body: %s %s needs a JSON object naming the model", x.h.method, x.h.path)), began)
	}
	return headersResponse(nil, false)
}

// needsBody reports whether a request must carry a JSON body: a POST to
// an OpenAI endpoint ILB parses.
func needsBody(h hints) bool {
	return h.endpoint != EndpointOther && (h.method == "" || h.method == "POST")
}

// admit checks what the headers say before any decision: the weights are
// there, the source is known, the priority is valid.
func (s *Server) admit(x *exchange) error {
	x.st = s.state.Load()
	if x.st == nil {
		return &RequestError{
			Status: 503, Type: "service_unavailable", Code: "not_ready",
			Msg: "the router has no weights yet; retry in a few seconds",
		}
	}
	x.rec.WeightsVersion = x.st.version
	src, ok := x.st.sources[x.source]
	if !ok {
		s.opts.Logger.Error("ext_proc stream from an unknown source: check the x-ilb-source initial metadata of the Envoy ext_proc filter",
			"source", x.source, "request_id", x.h.requestID)
		return &RequestError{
			Status: 500, Type: "internal_error", Code: "unknown_source",
			Msg: fmt.Sprintf("the router does not know the source %q of this proxy", x.source),
		}
	}
	x.src = src
	x.debug = x.h.debug && src.debug
	x.prio = weights.Standard
	if x.h.priority != "" {
		p, err := weights.ParsePriority(x.h.priority)
		if err != nil {
			return badRequest(header.Priority, "invalid_priority",
				fmt.Sprintf("header %s is %q: want critical, standard or sheddable", header.Priority, x.h.priority))
		}
		x.prio = p
		x.rec.Priority = p.String()
	}
	return nil
}

func (s *Server) onRequestBody(ctx context.Context, x *exchange, m *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	began := time.Now()
	if x.done || x.st == nil || x.rec.Chosen != "" {
		return bodyResponse(nil)
	}
	if len(x.body)+len(m.GetBody()) > s.opts.Config.ExtProc.MaxBodyBytes {
		return s.reject(x, &RequestError{
			Status: 413, Type: "invalid_request_error", Code: "request_too_large",
			Msg: fmt.Sprintf("the request body is over %d bytes", s.opts.Config.ExtProc.MaxBodyBytes),
		}, began)
	}
	x.body = append(x.body, m.GetBody()...)
	if x.streamed && !m.GetEndOfStream() {
		return bodyResponse(nil) // a chunk: wait for the rest
	}
	b, err := parseBody(x.h.endpoint, x.body)
	x.body = nil
	if err != nil && x.h.endpoint != EndpointOther {
		return s.reject(x, err, began)
	}
	if err != nil {
		// Not an OpenAI endpoint ILB knows: the body need not be JSON;
		// route by the default model.
		b = Body{}
	}
	mut, err := s.decide(x, &b)
	if err != nil {
		return s.reject(x, err, began)
	}
	s.spanDecided(ctx, x, mut)
	s.decided(x, began)
	return bodyResponse(mut)
}

// decided logs and counts a routing decision.
func (s *Server) decided(x *exchange, began time.Time) {
	d := time.Since(began)
	x.rec.DecisionMicros = d.Microseconds()
	s.metrics.latency.Observe(d.Seconds())
	s.metrics.decisions.WithLabelValues(x.source, x.rec.Model, x.rec.Chosen, x.rec.Reason).Inc()
	s.log.add(x.rec)
	if s.opts.Meter != nil {
		s.opts.Meter.Add(x.key, x.cost, false)
	}
}

// reject answers the request with an ImmediateResponse built from err.
func (s *Server) reject(x *exchange, err error, began time.Time) *extprocv3.ProcessingResponse {
	resp, re := immediate(err)
	x.done = true
	d := time.Since(began)
	x.rec.DecisionMicros = d.Microseconds()
	x.rec.Reason, x.rec.Status, x.rec.Complete = re.Code, re.Status, true
	x.rec.TotalMillis = float64(s.opts.Now().Sub(x.start).Microseconds()) / 1000
	source := x.source
	if x.src == nil {
		source = "unknown"
	}
	s.metrics.latency.Observe(d.Seconds())
	s.metrics.rejected(source, re)
	s.metrics.shedding(source, x.key, x.prio, re)
	s.spanRejected(x, re)
	s.log.add(x.rec)
	if s.opts.Meter != nil && x.key.Model != "" && re.Status >= 429 {
		// Refused for want of capacity: still demand (the controller must
		// plan for it, or it would stop shedding and start again).
		s.opts.Meter.Add(x.key, x.cost, true)
	}
	return resp
}

func (s *Server) onResponseHeaders(x *exchange, m *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	hs := headerMap(m.GetHeaders())
	code, _ := strconv.Atoi(hs[":status"])
	if x.rec != nil && !x.done {
		s.log.update(x.rec, func(r *Record) {
			r.Status = code
			r.ServedCluster, r.ServedVersion, r.UpstreamHost = hs[header.ServedCluster], hs[header.WeightsVersion], hs[header.UpstreamHost]
			r.Mismatch = r.Chosen != "" && r.ServedCluster != r.Chosen
			r.TotalMillis = float64(s.opts.Now().Sub(r.Start).Microseconds()) / 1000
			r.Complete = true
		})
		if x.rec.Mismatch {
			s.metrics.mismatches.WithLabelValues(x.source).Inc()
		}
		s.spanServed(x)
	}
	mut := &extprocv3.HeaderMutation{}
	if x.debug && x.rec != nil {
		mut.SetHeaders = append(mut.SetHeaders, setRaw(header.Decision, decisionHeader(x.rec)))
	} else {
		mut.RemoveHeaders = []string{header.ServedCluster, header.WeightsVersion, header.UpstreamHost}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: mut}},
	}}
}
