package extproc

import (
	"context"
	"net"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ilbproject/ilb/internal/bound"
	"github.com/ilbproject/ilb/openai"
)

// spanName is the name of the decision span. The GenAI semantic
// conventions name inference spans "{gen_ai.operation.name}
// {gen_ai.request.model}", but this span is not the inference: it is
// ILB's routing decision within it (the engine's span, a child, is), so
// it has a name of its own and the GenAI request attributes that
// describe what was routed.
const spanName = "ilb.route"

// tracerName is the instrumentation scope of ext_proc's spans.
const tracerName = "github.com/ilbproject/ilb/extproc"

// Attribute keys. The gen_ai.* keys are those of the OpenTelemetry GenAI
// semantic conventions (semconv 1.41, the last Go semconv package that
// carries them; they are in development, hence literal keys here).
const (
	attrOperation = attribute.Key("gen_ai.operation.name")
	// attrProvider is the engine kind of the chosen cluster (vllm,
	// sglang, tgi, trtllm). gen_ai.provider.name is an open enum whose
	// listed values are hosted services (openai, aws.bedrock, ...); the
	// conventions let instrumentation use its best knowledge of the
	// system, and for self-hosted engines that is the engine software.
	attrProvider   = attribute.Key("gen_ai.provider.name")
	attrModel      = attribute.Key("gen_ai.request.model")
	attrStream     = attribute.Key("gen_ai.request.stream")
	attrMaxTokens  = attribute.Key("gen_ai.request.max_tokens")
	attrAddress    = attribute.Key("server.address")
	attrPort       = attribute.Key("server.port")
	attrErrorType  = attribute.Key("error.type")
	attrStatusCode = attribute.Key("http.response.status_code")

	attrSource   = attribute.Key("ilb.source")
	attrRouted   = attribute.Key("ilb.model") // canonical model routed
	attrCluster  = attribute.Key("ilb.cluster")
	attrReason   = attribute.Key("ilb.reason")
	attrVersion  = attribute.Key("ilb.weights_version")
	attrDraw     = attribute.Key("ilb.draw") // decimal string: a uint64
	attrPriority = attribute.Key("ilb.priority")
	attrServed   = attribute.Key("ilb.served_cluster")
	attrMismatch = attribute.Key("ilb.mismatch")
	attrRequest  = attribute.Key("ilb.request_id")
)

// Trace-context headers (W3C).
const (
	headerTraceParent = "traceparent"
	headerTraceState  = "tracestate"
)

// propagator extracts the incoming trace context from the request headers
// and forwards the decision span's upstream.
var propagator propagation.TextMapPropagator = propagation.TraceContext{}

// newTracer returns ext_proc's tracer, or nil when tp is nil or the no-op
// provider: then no span is started and no header added (zero cost).
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	if _, off := tp.(noop.TracerProvider); off {
		return nil
	}
	return tp.Tracer(tracerName)
}

// startSpan starts the decision span of a request, child of the trace
// context its headers carry (if any), and notes its ids in the record.
func (s *Server) startSpan(ctx context.Context, x *exchange, headers *corev3.HeaderMap) {
	if s.tracer == nil {
		return
	}
	parent := propagator.Extract(ctx, propagation.MapCarrier(headerMap(headers)))
	_, x.span = s.tracer.Start(parent, spanName, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrSource.String(x.source), attrRequest.String(x.h.requestID)))
	if op := operationOf(x.h.endpoint); op != "" {
		x.span.SetAttributes(attrOperation.String(op))
	}
	// Only a span that is recorded and sampled reaches a backend: the
	// record links to it then, never to an unsampled one (or, with a
	// non-recording provider, to the client's own span).
	if sc := x.span.SpanContext(); sc.IsValid() && sc.IsSampled() && x.span.IsRecording() {
		x.rec.TraceID, x.rec.SpanID = sc.TraceID().String(), sc.SpanID().String()
	}
}

// operationOf is gen_ai.operation.name of an endpoint, "" for others.
func operationOf(e openai.Endpoint) string {
	switch e {
	case openai.EndpointChat:
		return "chat"
	case openai.EndpointCompletions:
		return "text_completion"
	case openai.EndpointEmbeddings:
		return "embeddings"
	}
	return ""
}

// spanDecided records the decision on the span and adds the trace context
// to mut, so the engine's spans join the trace as children of the
// decision.
func (s *Server) spanDecided(ctx context.Context, x *exchange, mut *extprocv3.HeaderMutation) {
	if x.span == nil {
		return
	}
	s.spanRequest(x)
	r := x.rec
	x.span.SetAttributes(attrCluster.String(r.Chosen), attrReason.String(r.Reason), attrDraw.String(strconv.FormatUint(r.Draw, 10)))
	if kind := s.engines[r.Chosen]; kind != "" {
		x.span.SetAttributes(attrProvider.String(kind))
	}
	if mut == nil {
		return
	}
	out := propagation.MapCarrier{}
	propagator.Inject(trace.ContextWithSpan(ctx, x.span), out)
	for _, k := range []string{headerTraceParent, headerTraceState} {
		if v := out[k]; v != "" {
			mut.SetHeaders = append(mut.SetHeaders, setRaw(k, v))
		} else if k == headerTraceState && out[headerTraceParent] != "" {
			// A new root context has no tracestate: the client's must not
			// travel with a traceparent it does not belong to.
			mut.RemoveHeaders = append(mut.RemoveHeaders, k)
		}
	}
}

// spanRequest records what is known of the request.
func (s *Server) spanRequest(x *exchange) {
	r := x.rec
	x.span.SetAttributes(attrPriority.String(r.Priority), attrVersion.String(r.WeightsVersion))
	if r.RequestedModel != "" {
		x.span.SetAttributes(attrModel.String(r.RequestedModel), attrRouted.String(r.Model))
	}
	if r.ModelFrom == "body" && x.h.endpoint != openai.EndpointOther {
		x.span.SetAttributes(attrStream.Bool(r.Stream))
		if r.MaxTokens > 0 {
			x.span.SetAttributes(attrMaxTokens.Int(r.MaxTokens))
		}
	}
}

// spanRejected records a request ILB answered itself and ends the span.
func (s *Server) spanRejected(x *exchange, re *RequestError) {
	if x.span == nil {
		return
	}
	s.spanRequest(x)
	x.span.SetAttributes(attrErrorType.String(re.Code), attrReason.String(re.Code), attrStatusCode.Int(re.Status))
	x.span.SetStatus(codes.Error, bound.String(re.Msg, bound.Message))
	s.endSpan(x)
}

// spanServed records what served the request (the response headers) and
// ends the span.
func (s *Server) spanServed(x *exchange) {
	if x.span == nil {
		return
	}
	r := x.rec
	if host, port, err := net.SplitHostPort(r.UpstreamHost); err == nil {
		x.span.SetAttributes(attrAddress.String(host))
		if p, err := strconv.Atoi(port); err == nil {
			x.span.SetAttributes(attrPort.Int(p))
		}
	}
	x.span.SetAttributes(attrServed.String(r.ServedCluster), attrMismatch.Bool(r.Mismatch), attrStatusCode.Int(r.Status))
	s.endSpan(x)
}

// endSpan ends the span once; the stream's end calls it too, for requests
// whose response never came back.
func (s *Server) endSpan(x *exchange) {
	if x.span != nil {
		x.span.End()
		x.span = nil
	}
}
