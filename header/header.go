// Package header names the HTTP headers and gRPC metadata of ILB's wire
// contract between the routes ILB serves to Envoy (package xds), the
// ext_proc service (package extproc) and clients. Names are lowercase, as
// Envoy and HTTP/2 carry them.
package header

// Internal request headers, set only by ext_proc. Envoy strips every
// client-sent header with the RoutePrefix before any filter runs, so a
// client can never pick a route by header.
const (
	// RoutePrefix is the prefix of every internal routing header.
	RoutePrefix = "x-ilb-route-"
	// RouteModel carries the canonical model; each model has a route that
	// matches it exactly.
	RouteModel = "x-ilb-route-model"
	// RouteDraw carries a uint64 (decimal) that Envoy uses as the random
	// value of the model route's weighted_clusters: the cluster is the one
	// whose interval [begin, end) holds draw % total weight, walking the
	// clusters in list order.
	RouteDraw = "x-ilb-route-draw"
	// RouteCluster names an engine cluster explicitly (an override route
	// with cluster_header); it wins over RouteModel.
	RouteCluster = "x-ilb-route-cluster"
)

// Replica picking, the Gateway API Inference Extension's endpoint-picker
// protocol: ext_proc sends the chosen replicas as this request header and
// as dynamic metadata under LBNamespace/DestinationEndpoint (the same
// ip:port[,ip:port...] list); the engine clusters' override_host
// load-balancing policy reads them. A client's own
// x-gateway-destination-endpoint is removed by the listener before
// ext_proc runs: only ILB picks replicas.
const (
	DestinationEndpoint = "x-gateway-destination-endpoint"
	LBNamespace         = "envoy.lb"
	// DestinationEndpointServed is the key, in LBNamespace, where the
	// override_host policy writes the host it selected; the ext_proc
	// filter forwards it to ILB with the response headers.
	DestinationEndpointServed = "x-gateway-destination-endpoint-served"
)

// Internal response headers, added by the routes Envoy serves so that
// ext_proc sees which cluster, host and weights version really served a
// request. ext_proc removes them before the client sees them unless debug
// is allowed and asked for.
const (
	ServedCluster  = "x-ilb-served-cluster"
	WeightsVersion = "x-ilb-weights-version"
	UpstreamHost   = "x-ilb-upstream-host"
)

// Report lists the internal response headers (a new slice each call): the
// one list the listener's strip, the Istio EnvoyFilter, ext_proc and its
// own answers use.
func Report() []string { return []string{ServedCluster, WeightsVersion, UpstreamHost} }

// EnginePrefix starts the response headers an engine may add about itself
// (the simulated engines' x-ilb-engine-cluster and -replica): internal,
// stripped on sources without debug.
const EnginePrefix = "x-ilb-engine-"

// Client hints, all optional.
const (
	// Priority is "critical", "standard" (default) or "sheddable".
	Priority = "x-ilb-priority"
	// Tenant names the request's tenant (fair shedding); honoured only
	// from sources with trust_tenant_header.
	Tenant = "x-ilb-tenant"
	// Session is a sticky-session key; absent, the body's "user" or
	// "prompt_cache_key" is used.
	Session = "x-ilb-session"
	// Model names the model so ext_proc can decide on headers alone and
	// skip the body.
	Model = "x-ilb-model"
	// Debug "1" asks for the Decision header on the response, honoured
	// only for sources that allow debug.
	Debug = "x-ilb-debug"
)

// Headers ILB adds to answers.
const (
	// Reason is a short code saying why ILB answered or routed as it did.
	Reason = "x-ilb-reason"
	// Decision is a compact summary of the routing decision (debug only).
	Decision = "x-ilb-decision"
	// RequestID is Envoy's request id, the key of decision records.
	RequestID = "x-request-id"
)

// Source is the gRPC initial metadata key, set in the ext_proc filter
// config ILB serves per source, that tells ext_proc which source a request
// entered at.
const Source = "x-ilb-source"
