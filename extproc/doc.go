// Package extproc is ILB's ext_proc service, the fast loop (docs/architecture.md):
// Envoy opens one gRPC stream per HTTP request and sends its headers, its
// buffered body (the OpenAI JSON) and the response headers; ILB answers
// each message with exactly one response of the matching type.
//
// On the request, ILB resolves the model (name or alias), draws a uint64
// (a hash of the session key for stickiness, else random) and answers
// with the header mutation x-ilb-route-model + x-ilb-route-draw plus
// clear_route_cache, so Envoy re-matches the model's weighted_clusters
// route and picks the cluster of draw % total exactly as ILB predicted.
// Header values travel in raw_value only. Bad requests, unknown models and
// missing capacity get an ImmediateResponse with an OpenAI-style JSON
// error (one boundary function, immediate). When the client names the
// model in x-ilb-model, ILB decides on headers and tells Envoy to skip the
// body (mode_override).
//
// On the response, ILB reads back the served cluster, weights version and
// upstream host that the route reported, completes the decision record in
// the bounded [Log], and strips those internal headers unless the source
// allows debug and the client asked for it.
//
// With a tracer provider (Options.TracerProvider), every request is one
// span "ilb.route", child of the W3C trace context of its headers
// (traceparent, tracestate), with the GenAI request attributes and ILB's
// decision (ilb.source, ilb.cluster, ilb.reason, ilb.weights_version,
// ilb.draw, ilb.priority; error.type when ILB answered itself). The
// decision's header mutation carries the span's own traceparent upstream,
// so the engine's spans join the trace under it; the span ends when the
// response headers come back (server.address and server.port from the
// upstream host) or with the stream. Without one, nothing is traced or
// added.
//
// Requests are decided on an immutable [State] built from each published
// weights version and swapped atomically; a request keeps the version it
// started with.
package extproc
