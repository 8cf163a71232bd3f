package extproc

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ilbproject/ilb/budget"
	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/internal/bound"
	"github.com/ilbproject/ilb/openai"
	"github.com/ilbproject/ilb/picker"
	"github.com/ilbproject/ilb/route"
	"github.com/ilbproject/ilb/weights"
)

// hints are what ILB reads from the request headers.
type hints struct {
	requestID, method, path string
	priority                string
	session, model          string
	tenant                  string
	debug                   bool
	endpoint                openai.Endpoint
	contentLength           int
}

// requestHeaders are the request headers ILB reads, in the order of
// hints' fields; responseHeaders the response headers.
var (
	requestHeaders = [...]string{
		header.RequestID, ":method", ":path", header.Priority, header.Session, header.Model, header.Debug, "content-length", header.Tenant,
	}
	responseHeaders = [...]string{":status", header.ServedCluster, header.WeightsVersion, header.UpstreamHost, "content-type"}
)

// exchange is the state of one stream, that is one HTTP request.
type exchange struct {
	source string
	start  time.Time
	st     *State // pinned at request headers: one version per request
	src    *sourceState
	h      hints
	rec    *decision.Record // nil until ILB decided or answered; then &record
	record decision.Record  // rec's memory: one allocation per stream
	body   []byte           // request body chunks received so far
	debug  bool             // debug asked and allowed
	done   bool             // ILB answered with an ImmediateResponse
	// responded: the response headers came back through ILB.
	responded bool
	prio      weights.Priority
	key       demand.Key // set once the model is known
	// idle bounds the stream's waits when it is served on its handler's
	// goroutine (Process).
	idle scanned
	// cell and target are where the request was routed (cell nil until
	// ILB routed it): the metrics' cached counters.
	cell   *cell
	target int
	cost   float64 // estimated token cost, capped by the model's limits
	// unconfirmed is the part of cost not booked as demand yet: booked
	// as the engine generates (follow.go), never when it refuses the
	// request or the client goes away first. claim is what it was at the
	// decision; prompt the estimated prompt tokens.
	unconfirmed, claim, prompt float64
	// follow is the state of a followed response (nil: not followed);
	// unfollowed: the response was not followed for
	// extproc.max_followed_streams; finished: ILB ends the stream after
	// its answer (it booked the whole estimate).
	follow               *following
	unfollowed, finished bool
	// stage is what ILB waits for on the stream.
	stage stage
	// span is the decision's span while it is open; nil when tracing is
	// off or once it ended.
	span trace.Span
	// awaitingOn is the awaiting counter of the cluster the request was
	// routed to, until its response headers come or the stream ends, and
	// awaitingWork what the request added to it.
	awaitingOn   *inflight
	awaitingWork booked
	// firstToken is the request's first token as the decision predicted
	// it on the cluster it went to (route.Decision.FirstToken, seconds,
	// network aside; 0: none), decidedAt when, and rtt the round trip
	// there (seconds): the first event of a followed streaming response
	// calibrates that cluster's predictions (route.Calibration) and
	// clears firstToken.
	firstToken, rtt float64
	decidedAt       time.Time
	calib           *route.Calibration
	// streamed is true when Envoy sends the request body in chunks. In
	// BUFFERED mode (what ILB configures) the one body message is the
	// whole body, whether or not end_of_stream is set (it is not when
	// trailers follow). Envoy tells the mode in protocol_config on the
	// first message; Envoys that do not are taken as BUFFERED.
	streamed bool
	// duplexReq and duplexResp: Envoy sends the request (response) body
	// FULL_DUPLEX_STREAMED (duplex.go): every chunk is answered with a
	// StreamedBodyResponse, and the request headers' answer waits for
	// the body ILB decides on.
	duplexReq, duplexResp bool
	// held: the request headers' answer is held until the body is read
	// (duplexReq).
	held bool
	// more are answers to send after the one handle returns, in order
	// (duplex: the headers' answer, then the body's).
	more []*extprocv3.ProcessingResponse
	// release returns the pooled buffer of a held full-duplex body once
	// its answers went out (nil: none).
	release func()
	// heldBytes is what x's body counts against extproc.max_held_body_bytes.
	heldBytes int64
	// ticket books the request on the replica ILB chose (replica
	// picking): its prefill until the response headers, its load until
	// the stream ends; pick is the memory of its decision (nil: none).
	ticket picker.Ticket
	pick   *pickRecord
	// answer is the memory of the decision's answer (verdict.go); nil
	// until ILB decides.
	answer *verdict
	// wire: the stream's server sends answers ILB encoded as they are
	// (GRPCOptions' codec, wire.go).
	wire bool
	// budget holds the request's tokens against its tenant's budgets
	// until the stream ends (nil: no budget).
	budget *budget.Hold
}

// metered reports whether x counts as demand: a POST, as every OpenAI
// inference call is (Envoy always sends :method; none is taken as a
// POST), to an endpoint that makes an engine compute. GETs — the model
// list, a file, a batch's status — and the API's bookkeeping endpoints
// (nonInference) are never booked.
func (x *exchange) metered() bool {
	return (x.h.method == "" || x.h.method == "POST") && !nonInference(x.h.path)
}

// nonInferenceSegments are the first path segments, after the API
// prefix's version (/v1/), of OpenAI's and the engines' endpoints that
// store or manage rather than infer: files, batches, uploads,
// fine-tuning jobs, vector stores, tokenizing, LoRA adapter loading.
var nonInferenceSegments = []string{
	"files", "batches", "uploads", "fine_tuning", "vector_stores",
	"tokenize", "detokenize", "load_lora_adapter", "unload_lora_adapter", "models",
}

// nonInference reports whether path (query included) is one of those
// endpoints: a segment of nonInferenceSegments right after a "/v1/".
func nonInference(path string) bool {
	p, _, _ := strings.Cut(path, "?")
	i := strings.Index(p, "/v1/")
	if i < 0 {
		return false
	}
	seg, _, _ := strings.Cut(p[i+len("/v1/"):], "/")
	return slices.Contains(nonInferenceSegments, seg)
}

// rematch reports whether a decision's answer makes Envoy match the route
// again (on ILB's headers): not for an endpoint picker's source, whose
// gateway already routed the request to its pool.
func (x *exchange) rematch() bool { return x.src == nil || x.src.pool == "" }

// sourceOf is the source a stream's metadata names, or def. It is
// bounded to an excerpt (it reaches logs, records and errors), which
// keeps every valid source name whole (they have at most 63 bytes).
func sourceOf(stream extprocv3.ExternalProcessor_ProcessServer, def string) string {
	if v := metadata.ValueFromIncomingContext(stream.Context(), header.Source); len(v) > 0 && v[0] != "" {
		return bound.String(v[0], bound.Excerpt)
	}
	return def
}

// handle answers one message; an error is a protocol violation that ends
// the stream.
func (s *Server) handle(ctx context.Context, x *exchange, req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	if pc := req.GetProtocolConfig(); pc != nil {
		switch pc.GetRequestBodyMode() {
		case extprocfilterv3.ProcessingMode_STREAMED, extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL:
			x.streamed = true
		}
		x.duplexReq = pc.GetRequestBodyMode() == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
		x.duplexResp = pc.GetResponseBodyMode() == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	}
	switch r := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		if x.rec != nil {
			// One stream is one request: a second request is not decided
			// again (nor its demand counted twice).
			return nil, status.Errorf(codes.InvalidArgument, "ext_proc protocol error: a second request_headers message on one stream (request %s)", x.h.requestID)
		}
		resp := s.onRequestHeaders(ctx, x, r.RequestHeaders)
		if x.duplexReq && x.stage == awaitBody {
			x.held = true // answered with the body's decision
			return nil, nil
		}
		return resp, nil
	case *extprocv3.ProcessingRequest_RequestBody:
		if x.rec == nil {
			return nil, status.Error(codes.InvalidArgument, "ext_proc protocol error: a request_body message before the request_headers message")
		}
		if x.duplexReq {
			return s.onDuplexBody(ctx, x, r.RequestBody), nil
		}
		return s.onRequestBody(ctx, x, r.RequestBody), nil
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		x.stage = awaitResponse
		return s.onResponseHeaders(x, r.ResponseHeaders, req.GetMetadataContext()), nil
	case *extprocv3.ProcessingRequest_ResponseBody:
		b := r.ResponseBody
		x.finished = s.onFollowedBody(x, b.GetBody(), b.GetEndOfStream())
		if x.duplexResp {
			return streamedBody(false, b.GetBody(), b.GetEndOfStream()), nil
		}
		return continueResponseBody, nil
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if x.held {
			return s.onDuplexTrailers(ctx, x), nil
		}
		x.stage = awaitResponse
		return continueRequestTrailers, nil
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		if x.follow != nil { // the body ended: trailers follow it
			s.settle(x, followComplete)
		}
		return continueResponseTrailers, nil
	}
	// A message type this version does not know: answer the request path
	// unchanged rather than leave Envoy waiting.
	return headersResponse(nil, false), nil
}

func (s *Server) onRequestHeaders(ctx context.Context, x *exchange, m *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	x.start = s.opts.Now()
	began := time.Now()
	x.stage = awaitResponse // unless a body is awaited, below
	var hs [len(requestHeaders)]string
	pickHeaders(m.GetHeaders(), requestHeaders[:], hs[:])
	// Every header value kept is bounded: it reaches the decision log,
	// spans and error bodies. The session key is only hashed.
	x.h = hints{
		requestID: bound.String(hs[0], bound.Name), method: bound.String(hs[1], 16),
		path: bound.String(hs[2], bound.Path), priority: hs[3], session: hs[4],
		model: hs[5], debug: hs[6] == "1", endpoint: openai.EndpointOf(hs[2]),
	}
	x.h.contentLength, _ = strconv.Atoi(hs[7])
	x.h.tenant = hs[8]
	if x.h.requestID == "" {
		x.h.requestID = s.opts.NewID()
	}
	x.record = decision.Record{
		RequestID: x.h.requestID, Start: x.start, Source: x.source,
		Method: x.h.method, Path: x.h.path, Priority: weights.Standard.String(),
	}
	x.rec = &x.record
	s.startSpan(ctx, x, m.GetHeaders())
	if err := s.admit(x); err != nil {
		return s.reject(x, err, began)
	}
	if id, ok := modelsPath(s.opts.Config.Envoy.PathPrefixes, x.h.path); ok {
		return s.answerModels(x, id, began) // ILB's own list: no engine, no demand
	}
	switch {
	case m.GetEndOfStream() && !needsBody(x.h) || x.h.model != "" && x.h.endpoint == openai.EndpointOther:
		// There is no body to read (GET /v1/files/…), or the client named
		// the model of an endpoint whose body ILB does not parse (it may
		// not be JSON: an upload): decide now, and tell Envoy to skip any
		// body. A body ILB parses is always read, so that x-ilb-model and
		// the body's model cannot disagree unseen.
		mut, err := s.decide(x, nil)
		if err != nil {
			return s.reject(x, err, began)
		}
		s.spanDecided(ctx, x, mut)
		s.decided(x, began)
		resp := x.answer.headersResponse(mut, x.rematch())
		if !m.GetEndOfStream() {
			resp.ModeOverride = skipBody()
		}
		return resp
	case m.GetEndOfStream():
		return s.reject(x, badRequest("", "invalid_json",
			fmt.Sprintf("the request has no body: %s %s needs a JSON object naming the model", x.h.method, bound.String(x.h.path, bound.Excerpt))), began)
	}
	x.stage = awaitBody
	return headersResponse(nil, false)
}

// servedPath reports whether path (query included) starts with one of
// prefixes.
func servedPath(prefixes []string, path string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// needsBody reports whether a request must carry a JSON body: a POST to
// an OpenAI endpoint ILB parses.
func needsBody(h hints) bool {
	return h.endpoint != openai.EndpointOther && (h.method == "" || h.method == "POST")
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
		if s.unknownSource.allow(s.opts.Now()) {
			s.opts.Logger.Error("ext_proc stream from an unknown source: check the x-ilb-source initial metadata of the Envoy ext_proc filter (logged at most once a minute)",
				"source", x.source, "request_id", x.h.requestID, "suppressed", s.unknownSource.take())
		}
		return &RequestError{
			Status: 500, Type: "internal_error", Code: "unknown_source",
			Msg: fmt.Sprintf("the router does not know the source %q of this proxy", x.source),
		}
	}
	x.src = src
	if why := ambiguousPath(x.h.path, s.opts.Config.Envoy.PathPrefixes); why != "" {
		// An engine could route it otherwise than ILB reads it.
		return badRequest("", "ambiguous_path", fmt.Sprintf("%s %s has %s: an engine could read another path than the one ILB routes on; send the path plain",
			bound.String(x.h.method, 16), bound.Quote(x.h.path, bound.Excerpt), why))
	}
	if !servedPath(s.opts.Config.Envoy.PathPrefixes, x.h.path) {
		// An engine's /metrics, /health or admin paths are not for
		// clients: only the API paths reach the engines.
		return &RequestError{
			Status: 404, Type: "invalid_request_error", Code: "path_not_found",
			Msg: fmt.Sprintf("%s %s is not served: only paths under %s reach the engines (envoy.path_prefixes)",
				bound.String(x.h.method, 16), bound.Quote(x.h.path, bound.Excerpt), strings.Join(s.opts.Config.Envoy.PathPrefixes, ", ")),
		}
	}
	x.debug = x.h.debug && src.debug
	x.prio, x.rec.Priority, x.rec.PriorityFrom = src.defaultPriority, src.defaultPriority.String(), "default"
	switch {
	case x.h.priority == "":
	case !src.trustPriority:
		// Any client can send the header: honouring it would let one
		// claim "critical" and pass while others are shed.
		x.rec.PriorityFrom = "ignored-header"
		s.metrics.priorityIgnored.WithLabelValues(src.name).Inc()
	default:
		p, err := weights.ParsePriority(x.h.priority)
		if err != nil {
			return badRequest(header.Priority, "invalid_priority",
				fmt.Sprintf("header %s is %s: want critical, standard or sheddable", header.Priority, bound.Quote(x.h.priority, bound.Excerpt)))
		}
		x.prio, x.rec.Priority, x.rec.PriorityFrom = p, p.String(), "header"
	}
	switch {
	case x.h.tenant == "":
	case !src.trustTenant:
		// A client naming another tenant would take its fair share.
		x.rec.TenantFrom = "ignored-header"
		s.metrics.tenantIgnored.WithLabelValues(src.name).Inc()
	default:
		// Bounded: it reaches records and logs (metrics see only the
		// listed names).
		x.rec.Tenant, x.rec.TenantFrom = bound.String(x.h.tenant, bound.Name), "header"
	}
	return nil
}

// decided logs and counts a routing decision.
func (s *Server) decided(x *exchange, began time.Time) {
	d := time.Since(began)
	x.rec.DecisionMicros = d.Microseconds()
	s.late(x, d)
	s.metrics.latency.Observe(d.Seconds())
	s.decisionCounter(x).Inc()
	provisional := s.provisional(x)
	x.unconfirmed = x.cost - provisional
	x.claim = x.unconfirmed
	x.rec.DemandBooked = provisional
	s.log.Add(x.rec)
	if s.opts.Meter != nil && x.metered() {
		s.opts.Meter.Add(x.key, provisional, false)
	}
	if a := s.awaiting[x.rec.Chosen]; a != nil {
		x.awaitingWork = a.add(x.cost, x.prompt)
		x.awaitingOn, x.calib = a, &a.calib
	}
}

// late marks the record of an answer that took d, longer than Envoy's
// message_timeout: Envoy stopped waiting before it came and went on
// without ILB. d is measured from when ILB received the message, so it
// only underestimates what Envoy waited: a late answer is certainly late.
func (s *Server) late(x *exchange, d time.Duration) bool {
	timeout := s.opts.Config.Envoy.MessageTimeout.Std()
	if timeout <= 0 || d <= timeout {
		return false
	}
	x.rec.Unanswered = fmt.Sprintf("ILB answered after %v, past Envoy's message_timeout of %v: Envoy had gone on without ILB (a fail-open source by its default weights, a fail-closed one with 503 routing_unavailable)", d.Round(time.Millisecond), timeout)
	s.metrics.late.WithLabelValues(x.source).Inc()
	return true
}

// unfinished completes the record of a stream that ends without its
// response headers: ILB decided but the response never came back through
// it (the client went away, or Envoy stopped waiting for ILB and went on
// without it), or Envoy ended the stream before ILB could decide. It runs
// as the stream ends.
func (s *Server) unfinished(x *exchange) {
	switch {
	case x.rec == nil || x.done || x.responded:
		return
	case x.rec.Chosen == "" && x.rec.Reason == "": // headers seen, no decision
		x.rec.Reason = "undecided"
		x.rec.Unanswered = fmt.Sprintf("the stream ended while ILB waited for the %s: Envoy stopped waiting for ILB, or the client went away; ILB did not decide", x.stage)
		x.rec.Complete = true
		s.log.Add(x.rec)
		return
	}
	x.rec = s.log.Update(x.rec, func(r *decision.Record) {
		if r.Unanswered == "" {
			r.Unanswered = "the stream ended before the response headers came back through ILB: the client went away, or Envoy stopped waiting for ILB and went on without its decision"
		}
		r.Complete = true
	})
}

// answered stops counting a request as awaiting its response (its
// response headers came, or its stream ended).
func (s *Server) answered(x *exchange) {
	x.ticket.FirstToken()
	if x.awaitingOn != nil {
		x.awaitingOn.remove(x.awaitingWork)
		x.awaitingOn = nil
	}
}

// provisional is the demand booked for a request before any engine
// accepted it: its estimate, but never more than a typical request of
// its stream (demand.Limits.Provisional: the configured default size, or
// what the stream's served requests cost when that is more), so that N
// requests claiming huge prompts or max_tokens add at most N typical
// requests to the demand unless the engines take them.
func (s *Server) provisional(x *exchange) float64 {
	return x.st.limits[x.key.Model].Provisional(x.cost, s.typical.Of(x.key))
}

// reject answers the request with an ImmediateResponse built from err.
func (s *Server) reject(x *exchange, err error, began time.Time) *extprocv3.ProcessingResponse {
	resp, re := immediate(err)
	x.done = true
	d := time.Since(began)
	x.rec.DecisionMicros = d.Microseconds()
	x.rec.Reason, x.rec.Status, x.rec.Complete = re.Code, re.Status, true
	if s.late(x, d) {
		x.rec.Status = 0 // the client did not get ILB's answer
	}
	x.rec.TotalMillis = float64(s.opts.Now().Sub(x.start).Microseconds()) / 1000
	source := x.source
	if x.src == nil {
		source = "unknown"
	}
	s.metrics.latency.Observe(d.Seconds())
	s.metrics.rejected(source, re)
	s.metrics.shedding(source, x.key, x.prio, re)
	s.spanRejected(x, re)
	if s.opts.Meter != nil && x.key.Model != "" && re.Status >= 429 && re.Code != codeBudget && x.metered() {
		// Refused for want of capacity: still demand (the controller must
		// plan for it, or it would stop shedding and start again), as
		// much as a typical served request of its stream: nothing
		// confirms this one's own claim.
		x.rec.DemandBooked = x.st.limits[x.key.Model].Refused(x.cost, s.typical.Of(x.key))
		s.opts.Meter.Add(x.key, x.rec.DemandBooked, true)
	}
	s.log.Add(x.rec)
	return resp
}
