package config

import (
	"time"
)

// Config describes the world ILB routes in and the settings of its parts.
// Lists keep the order of the file: it is the order of clusters in routes
// and of every listing ILB prints.
type Config struct {
	// Regions are the places engine clusters and sources live in.
	Regions []Region `yaml:"regions" json:"regions"`
	// Network gives, per ordered pair of regions, the round-trip time and the
	// egress price. A pair inside one region defaults to [DefaultIntraRegion].
	Network []Link `yaml:"network" json:"network"`
	// Sources are the fleets of Envoys; a source's name is the Envoys'
	// node.cluster.
	Sources []Source `yaml:"sources" json:"sources"`
	// Models are the model names clients may ask for.
	Models []Model `yaml:"models" json:"models"`
	// Profiles give the performance of one replica of an engine cluster.
	Profiles []Profile `yaml:"profiles" json:"profiles"`
	// Clusters are the engine clusters: the Envoy upstream clusters.
	Clusters []EngineCluster `yaml:"clusters" json:"clusters"`

	Controller Controller `yaml:"controller" json:"controller"`
	Signals    Signals    `yaml:"signals" json:"signals"`
	Envoy      Envoy      `yaml:"envoy" json:"envoy"`
	ExtProc    ExtProc    `yaml:"extproc" json:"extproc"`
	Listen     Listen     `yaml:"listen" json:"listen"`
	// Security configures TLS on ILB's ports and which peers may speak
	// for which sources (see docs/security.md).
	Security Security `yaml:"security,omitempty" json:"security"`
	HA       *HA      `yaml:"ha,omitempty" json:"ha,omitempty"` // nil: one process, no etcd (config/ha.go)
	// Kubernetes names the API servers of kubernetes discovery
	// (config/kubernetes.go).
	Kubernetes Kubernetes `yaml:"kubernetes,omitempty" json:"kubernetes"`
	// Tenants configures fair shedding between tenants (config/tenants.go).
	Tenants Tenants `yaml:"tenants,omitempty" json:"tenants"`
}

// Region is a place: a cloud region or a data centre.
type Region struct {
	Name string `yaml:"name" json:"name"`
}

// Link is the network from one region to another, as seen by traffic that
// enters Envoy in From and is served by an engine in To.
type Link struct {
	From string `yaml:"from" json:"from"`
	To   string `yaml:"to" json:"to"`
	// RTTMs is the round-trip time in milliseconds, >= 0.
	RTTMs float64 `yaml:"rtt_ms" json:"rtt_ms"`
	// EgressUSDPerGB is the price of traffic on this link in US dollars per
	// GB, >= 0.
	EgressUSDPerGB float64 `yaml:"egress_usd_per_gb" json:"egress_usd_per_gb"`
}

// DefaultIntraRegion is the link assumed inside one region when the file
// does not give one: 1 ms round trip, free egress.
var DefaultIntraRegion = Link{RTTMs: 1, EgressUSDPerGB: 0}

// FailMode says what a source's Envoys do with a request when the ext_proc
// service cannot decide (unreachable, error, timeout).
type FailMode string

const (
	// FailOpen routes the request by the source's fallback route: the
	// default model's weights, drawn at random by Envoy.
	FailOpen FailMode = "open"
	// FailClosed answers 503 with a body that says why.
	FailClosed FailMode = "closed"
)

// Source is a fleet of Envoys in one place, identified by node.cluster.
type Source struct {
	// Name is the Envoy node.cluster of the fleet; it keys xDS snapshots.
	Name string `yaml:"name" json:"name"`
	// Region is where the fleet runs.
	Region string `yaml:"region" json:"region"`
	// AllowedRegions lists the engine regions this source's traffic may be
	// served in (data residency). Empty means every region.
	AllowedRegions []string `yaml:"allowed_regions,omitempty" json:"allowed_regions,omitempty"`
	// FailMode is "open" (default) or "closed".
	FailMode FailMode `yaml:"fail_mode" json:"fail_mode"`
	// DefaultModel is used by the fallback route and for requests that
	// name no model (GET /v1/files/…). Defaults to the first model.
	DefaultModel string `yaml:"default_model" json:"default_model"`
	// Listener overrides envoy.listener for this source's Envoys, host:port.
	Listener string `yaml:"listener,omitempty" json:"listener,omitempty"`
	// Routing is how ext_proc tells this source's Envoys where to send a
	// request: "draw" (default: x-ilb-route-model + x-ilb-route-draw, and
	// the weighted routes ILB serves pick the cluster) or "cluster" (it
	// names the cluster in x-ilb-route-cluster: the Istio mode, where
	// istiod owns the routes and ILB renders VirtualServices that match on
	// that header), or "picker": ILB is the Gateway API Inference
	// Extension endpoint picker of one InferencePool (Picker), whose
	// gateway has already routed the request to the pool; ILB picks the
	// replica.
	Routing Routing `yaml:"routing,omitempty" json:"routing,omitempty"`
	// Picker is the InferencePool this source's gateways send to ILB as
	// their endpoint picker; required with routing "picker", refused
	// otherwise.
	Picker *SourcePicker `yaml:"picker,omitempty" json:"picker,omitempty"`
	// Debug allows clients of this source to ask for decision headers
	// (x-ilb-debug: 1). Off by default: nothing internal reaches clients.
	Debug bool `yaml:"debug,omitempty" json:"debug,omitempty"`
	// TrustPriorityHeader makes ext_proc honour the x-ilb-priority header
	// of this source's requests. Off by default: any client could claim
	// "critical" and pass while others are shed. Turn it on only where
	// the source's Envoys set the header from an authenticated identity
	// (a JWT claim copied by jwt_authn, the client's own header removed
	// first; docs/security.md) — otherwise the header is ignored and the
	// decision record says so.
	TrustPriorityHeader bool `yaml:"trust_priority_header,omitempty" json:"trust_priority_header,omitempty"`
	// TrustTenantHeader makes ext_proc honour the x-ilb-tenant header of
	// this source's requests (fair shedding, config.Tenants). Off by
	// default, for the reason priority is: a client could name another
	// tenant and take its share. Turn it on only where the source's
	// Envoys set the header from an authenticated identity.
	TrustTenantHeader bool `yaml:"trust_tenant_header,omitempty" json:"trust_tenant_header,omitempty"`
	// DefaultPriority is the priority of the source's requests that carry
	// no trusted x-ilb-priority: "critical", "standard" (default) or
	// "sheddable".
	DefaultPriority string `yaml:"default_priority,omitempty" json:"default_priority,omitempty"`
}

// Priorities are the priority names (the x-ilb-priority values), most
// important first.
var Priorities = []string{"critical", "standard", "sheddable"}

// Routing is a source's routing mode.
type Routing string

// Routing modes.
const (
	RoutingDraw    Routing = "draw"
	RoutingCluster Routing = "cluster"
	RoutingPicker  Routing = "picker"
)

// SourcePicker makes ILB the endpoint picker of an InferencePool (Gateway
// API Inference Extension): the pool's endpointPickerRef names a Service
// port that reaches Listen, where the gateway opens ext_proc streams with
// no x-ilb-source (every stream on Listen is this source's). The pool's
// replicas are the engine cluster Cluster's.
type SourcePicker struct {
	// Listen is the address of this pool's ext_proc listener, host:port.
	Listen string `yaml:"listen" json:"listen"`
	// Cluster is the engine cluster whose replicas are the pool's; it
	// must pick replicas (replica_picking.enabled), and be the only
	// cluster the source's models may be served by (allowed_regions).
	Cluster string `yaml:"cluster" json:"cluster"`
}

// Model is a model clients may name in the OpenAI "model" field.
type Model struct {
	// Name is the canonical name, as engines serve it.
	Name string `yaml:"name" json:"name"`
	// Aliases are other names clients may use; ILB routes them as Name.
	Aliases []string `yaml:"aliases,omitempty" json:"aliases,omitempty"`
	// PromptTokenCost and OutputTokenCost turn a request into token-cost
	// units, the unit of demand and capacity: cost = prompt tokens ×
	// PromptTokenCost + output tokens × OutputTokenCost. Defaults 1 and 4
	// (an output token takes about four times the GPU time of a prompt
	// token on vLLM-class engines: prefill runs at several times the token
	// rate of decode). Both >= 0; when both are 0 or omitted, the defaults
	// apply.
	PromptTokenCost float64 `yaml:"prompt_token_cost" json:"prompt_token_cost"`
	OutputTokenCost float64 `yaml:"output_token_cost" json:"output_token_cost"`
	// TTFTBudgetMs, when > 0, makes clusters whose round trip from a
	// source exceeds it ineligible for that source, unless no cluster
	// within the budget can serve.
	TTFTBudgetMs float64 `yaml:"ttft_budget_ms,omitempty" json:"ttft_budget_ms,omitempty"`
	// ContextTokens is the model's context length in tokens (prompt and
	// output together); default 131072. With MaxOutputTokens it caps the
	// demand one request can claim: a client's max_tokens or prompt size
	// is evidence, never believed past the model's limits.
	ContextTokens int `yaml:"context_tokens,omitempty" json:"context_tokens,omitempty"`
	// MaxOutputTokens is the most output tokens one request of this model
	// may generate; default 32768, at most ContextTokens.
	MaxOutputTokens int `yaml:"max_output_tokens,omitempty" json:"max_output_tokens,omitempty"`
	// Adapters are the LoRA adapters served on this base model (at most
	// MaxAdapters).
	Adapters []Adapter `yaml:"adapters,omitempty" json:"adapters,omitempty"`
}

// Model limit defaults (see Model).
const (
	DefaultContextTokens   = 131072
	DefaultMaxOutputTokens = 32768
)

// Profile is the performance of one engine replica.
type Profile struct {
	Name string `yaml:"name" json:"name"`
	// CapacityPerReplica is the sustainable throughput of one ready replica
	// in token-cost units per second (prompt and output tokens weighted by
	// the model's cost), > 0.
	CapacityPerReplica float64 `yaml:"capacity_per_replica" json:"capacity_per_replica"`
}

// EngineKind is the inference engine software of a cluster; it selects the
// metric names ILB reads.
type EngineKind string

// Engine kinds ILB knows.
const (
	EngineVLLM   EngineKind = "vllm"
	EngineSGLang EngineKind = "sglang"
	EngineTGI    EngineKind = "tgi"
	EngineTRTLLM EngineKind = "trtllm"
	// EngineTriton is Triton Inference Server with the TensorRT-LLM
	// backend: metrics on their own port (8002), readiness at
	// /v2/health/ready, series labelled "model".
	EngineTriton EngineKind = "triton"
)

// EngineKinds lists the valid engine kinds, in documentation order.
var EngineKinds = []EngineKind{EngineVLLM, EngineSGLang, EngineTGI, EngineTRTLLM, EngineTriton}

// EngineCluster is a pool of identical engine replicas in one region; it
// is one Envoy upstream cluster.
type EngineCluster struct {
	// Name is the Envoy cluster name.
	Name   string     `yaml:"name" json:"name"`
	Region string     `yaml:"region" json:"region"`
	Engine EngineKind `yaml:"engine" json:"engine"`
	// Models are canonical model names the cluster serves.
	Models []string `yaml:"models" json:"models"`
	// Profile names the performance profile of one replica.
	Profile string `yaml:"profile" json:"profile"`
	// Endpoints are the replicas, as host:port (static discovery).
	Endpoints []string `yaml:"endpoints,omitempty" json:"endpoints,omitempty"`
	// Discovery finds the replicas; default static (Endpoints).
	Discovery Discovery `yaml:"discovery" json:"discovery"`
	// Metrics says how to scrape and probe the replicas.
	Metrics Metrics `yaml:"metrics" json:"metrics"`
	// Protocol is what Envoy speaks to the engines: "http1" (default) or
	// "http2" (h2c).
	Protocol Protocol `yaml:"protocol" json:"protocol"`
	// Service is the Kubernetes service of the cluster, for the Istio
	// mode (ilb render istio): host (FQDN) and port.
	Service *Service `yaml:"service,omitempty" json:"service,omitempty"`
	// ReplicaPicking makes ILB choose the replica of this cluster each
	// request goes to (prefix-cache and load aware), through Envoy's
	// override-host load balancing; off, Envoy's least-request chooses.
	ReplicaPicking ReplicaPicking `yaml:"replica_picking" json:"replica_picking"`
}

// ReplicaPicking configures ILB's replica picking for one cluster.
type ReplicaPicking struct {
	// Enabled turns it on. The cluster's CDS resource then carries
	// Envoy's override_host load-balancing policy (Envoy 1.35 or later)
	// with least request as its fallback.
	Enabled bool `yaml:"enabled" json:"enabled"`
	// CacheTokens is the prompt tokens ILB assumes one replica's prefix
	// cache holds: its KV cache in tokens (vLLM: num_gpu_blocks ×
	// block_size, in vllm:cache_config_info). 0 means
	// DefaultReplicaCacheTokens; at most MaxReplicaCacheTokens. ILB's
	// index costs about 72 bytes per 64 tokens of it per replica.
	CacheTokens int `yaml:"cache_tokens" json:"cache_tokens"`
	// MaxQueueSkew, when > 0, is a hard bound over the scoring rule: a
	// replica whose queue (ILB's requests there still without a first
	// token) is longer than the shortest candidate's by more than this
	// is not chosen, whatever prefix it holds (SGLang's router has the
	// same guard, balance_abs_threshold). 0, the default, leaves the
	// trade of cache hits against queues to the cost rule. At most
	// MaxReplicaQueueSkew.
	MaxQueueSkew int `yaml:"max_queue_skew" json:"max_queue_skew"`
}

// Replica picking bounds.
const (
	// DefaultReplicaCacheTokens is a third of the KV cache of an 8B model
	// on an 80 GB GPU: the part not taken by running sequences.
	DefaultReplicaCacheTokens = 131072
	// MaxReplicaCacheTokens bounds the index: 16M tokens a replica, about
	// 18 MiB of index each.
	MaxReplicaCacheTokens = 1 << 24
	// MaxReplicaQueueSkew bounds max_queue_skew: past it the guard would
	// never bind (an engine admits 256 sequences or so at once).
	MaxReplicaQueueSkew = 4096
)

// CacheTokensOrDefault is CacheTokens, or the default when 0.
func (r ReplicaPicking) CacheTokensOrDefault() int {
	if r.CacheTokens == 0 {
		return DefaultReplicaCacheTokens
	}
	return r.CacheTokens
}

// Protocol is an upstream HTTP protocol.
type Protocol string

// Protocols.
const (
	ProtocolHTTP1 Protocol = "http1"
	ProtocolHTTP2 Protocol = "http2"
)

// Service names a Kubernetes service.
type Service struct {
	Host string `yaml:"host" json:"host"`
	Port int    `yaml:"port" json:"port"`
}

// Envoy configures the Envoy resources ILB serves and renders.
type Envoy struct {
	// Listener is the address the generated listener binds, host:port.
	// Default 127.0.0.1:10000; use 0.0.0.0 in a container.
	Listener string `yaml:"listener" json:"listener"`
	// ExtProcCluster is the name of the bootstrap cluster that reaches the
	// ILB ext_proc service; default "ilb_extproc".
	ExtProcCluster string `yaml:"extproc_cluster" json:"extproc_cluster"`
	// XDSCluster is the name of the bootstrap cluster that reaches the ILB
	// xDS server; default "ilb_xds".
	XDSCluster string `yaml:"xds_cluster" json:"xds_cluster"`
	// MessageTimeout bounds each ext_proc exchange; default 1s, in
	// (0, 1h] (Envoy's limit); it must fit the parse of the largest prompt.
	MessageTimeout Duration `yaml:"message_timeout" json:"message_timeout"`
	// UseRemoteAddress makes the listener an edge proxy (default true):
	// Envoy trusts the peer address rather than a client's
	// x-forwarded-for, and replaces the x-request-id of external requests,
	// so a client cannot choose the id that keys decision records. Set
	// false behind another proxy that already sets these headers.
	UseRemoteAddress bool `yaml:"use_remote_address" json:"use_remote_address"`
	// PathPrefixes are the request paths that reach the engines: the
	// OpenAI API by default (["/v1/"]). Any other path (an engine's
	// /metrics or /health) is answered 404 path_not_found by ext_proc and,
	// when ext_proc cannot decide, by the listener's last route.
	PathPrefixes []string `yaml:"path_prefixes" json:"path_prefixes"`
	// RequestBufferBytes caps a buffered request body (the OpenAI JSON);
	// a larger body gets 413 from Envoy. Default 8 MiB.
	RequestBufferBytes uint32 `yaml:"request_buffer_bytes" json:"request_buffer_bytes"`
	// ConnectTimeout is the upstream connect timeout; default 2s.
	ConnectTimeout Duration `yaml:"connect_timeout" json:"connect_timeout"`
	// RouteIdleTimeout ends a stream that sent nothing for this long
	// (generation stalled); routes have no overall timeout, as answers
	// stream for minutes. Default 5m.
	RouteIdleTimeout Duration `yaml:"route_idle_timeout" json:"route_idle_timeout"`
	// SlowStart ramps a new engine host's share of least-request picks
	// over this window; default 30s, 0 turns it off.
	SlowStart Duration `yaml:"slow_start" json:"slow_start"`
	// EDSMinInterval is the least time between two endpoint (EDS) pushes
	// that only add traffic (a warming replica's weight grows, a replica
	// joins or recovers): such changes are batched, so that replicas
	// restarting do not send a new EDS version to every Envoy at every
	// signals interval. A change that takes traffic away (a replica
	// unhealthy, draining or gone), or gives a cluster its first healthy
	// replica, is pushed at once. Default 5s; 0 pushes
	// every change at once.
	EDSMinInterval Duration `yaml:"eds_min_interval" json:"eds_min_interval"`
	// XDSAPIType is the ADS protocol the generated bootstraps ask for:
	// GRPC (state of the world, the default) or DELTA_GRPC (incremental:
	// an EDS change sends only the clusters that changed). ILB serves
	// both on the same port, so Envoys of either kind may mix.
	XDSAPIType string `yaml:"xds_api_type" json:"xds_api_type"`
	// HealthyPanicThreshold, in percent [0, 100]: below this share of
	// healthy hosts Envoy balances over every host, dead ones included.
	// Default 0 (never): ext_proc and the controller already steer away
	// from a cluster with few serving replicas, and a dead replica only
	// fails requests.
	HealthyPanicThreshold float64         `yaml:"healthy_panic_threshold" json:"healthy_panic_threshold"`
	Retry                 Retry           `yaml:"retry" json:"retry"`
	HealthCheck           HealthCheck     `yaml:"health_check" json:"health_check"`
	Outlier               Outlier         `yaml:"outlier" json:"outlier"`
	CircuitBreakers       CircuitBreakers `yaml:"circuit_breakers" json:"circuit_breakers"`
	// ExtProcMaxStreams bounds concurrent ext_proc streams (one per
	// request in flight) per Envoy: the ext_proc cluster's circuit
	// breakers. Default 100000.
	ExtProcMaxStreams uint32  `yaml:"extproc_max_streams" json:"extproc_max_streams"`
	Rollout           Rollout `yaml:"rollout" json:"rollout"`
}

// ExtProc configures the ext_proc service.
type ExtProc struct {
	// DecisionLogSize is how many decision records are kept; default
	// 10000, at most MaxDecisionLogSize.
	DecisionLogSize int `yaml:"decision_log_size" json:"decision_log_size"`
	// MaxBodyBytes is the largest request body the service parses; default
	// 8 MiB. A larger one gets 413.
	MaxBodyBytes int `yaml:"max_body_bytes" json:"max_body_bytes"`
	// MaxHeldBodyBytes bounds the request bodies ILB holds at once across
	// all streams while they arrive in chunks (STREAMED and
	// FULL_DUPLEX_STREAMED bodies are kept until their end to be
	// decided on): a chunk past it refuses its request with a 503
	// body_memory (retry later), so that many slow bodies cannot take the
	// process's memory. Default 128 MiB; at least max_body_bytes.
	MaxHeldBodyBytes int64 `yaml:"max_held_body_bytes" json:"max_held_body_bytes"`
	// DefaultPromptTokens and DefaultOutputTokens estimate a request's
	// token cost (its demand) when it does not say: no body read (prompt
	// from Content-Length / 4 when known), no max_tokens. Defaults 500 and
	// 250.
	DefaultPromptTokens int `yaml:"default_prompt_tokens" json:"default_prompt_tokens"`
	DefaultOutputTokens int `yaml:"default_output_tokens" json:"default_output_tokens"`
	// ReportInterval is how often measured demand is reported to the
	// controller (over LRS, or in memory in the all-in-one process);
	// default 1s.
	ReportInterval Duration `yaml:"report_interval" json:"report_interval"`
	// LiveTTL: the engines' live state (unhealthy clusters, saturation)
	// older than this is ignored, so nothing stays excluded or shed after
	// the signals stop; default 5s.
	LiveTTL Duration `yaml:"live_ttl" json:"live_ttl"`
	// Steering moves a request off the cluster Envoy's draw picked when
	// another cluster it may use would begin it sooner, round trip
	// included (balancing by the queue ahead), or, where the engines give
	// no TTFT, has less queue pressure (docs/architecture.md); default
	// true. false:
	// requests follow the weights (and the redraw off an excluded
	// cluster) only, e.g. to check a plan or compare with it.
	Steering bool `yaml:"steering" json:"steering"`
	// RetryAfter is the retry-after of a 429, in whole seconds; default 1.
	RetryAfter int `yaml:"retry_after" json:"retry_after"`
	// DecisionLogBytes bounds the decision log's memory (an estimate of
	// the records' size): the oldest records are evicted past it, as past
	// DecisionLogSize; default 64 MiB.
	DecisionLogBytes int64 `yaml:"decision_log_bytes" json:"decision_log_bytes"`
	// MaxStreams caps the ext_proc streams open at once (one per request
	// in flight, about 15 KB each); a stream over it is refused at once
	// with RESOURCE_EXHAUSTED, and Envoy applies the source's fail mode.
	// Default 20000.
	MaxStreams int `yaml:"max_streams" json:"max_streams"`
	// MaxStreamsPerPeer caps the streams one peer (a verified identity
	// and IP address, or an IP address without client certificates) may
	// hold of MaxStreams: past it its new streams are refused with
	// RESOURCE_EXHAUSTED, so that a peer never sending response headers
	// cannot take every stream. 0 (the default): half of MaxStreams;
	// at most MaxStreams.
	MaxStreamsPerPeer int `yaml:"max_streams_per_peer" json:"max_streams_per_peer"`
	// MaxFollowedStreams caps the responses ILB follows at once to count
	// what engines generate (a request's demand past an ordinary
	// request's share is booked as it is generated): each keeps its
	// stream open, and gets every body chunk, until the body ends or the
	// request's whole estimate is booked. Past it a request counts its
	// provisional share only. 0 (the default): a quarter of MaxStreams;
	// at most MaxStreams.
	MaxFollowedStreams int `yaml:"max_followed_streams" json:"max_followed_streams"`
	// StreamIdleTimeout ends an ext_proc stream on which Envoy owes ILB a
	// message (the request headers, or the body it announced) and sent
	// nothing for this long: Envoy itself gives up after
	// envoy.message_timeout. Default message_timeout + 1s; at least
	// message_timeout.
	StreamIdleTimeout Duration `yaml:"stream_idle_timeout" json:"stream_idle_timeout"`
	// MaxReportRate bounds the requests per second one demand report
	// (LRS) may claim for one (source, model, priority): a report over it
	// is refused as implausible. Default 100000.
	MaxReportRate float64 `yaml:"max_report_rate" json:"max_report_rate"`
}

// Listen gives the addresses ILB's own servers bind, host:port.
type Listen struct {
	XDS     string `yaml:"xds" json:"xds"`         // default 127.0.0.1:18000
	ExtProc string `yaml:"extproc" json:"extproc"` // default 127.0.0.1:18001
	Admin   string `yaml:"admin" json:"admin"`     // default 127.0.0.1:18002
	// Connections bounds the connections of every port, so that idle or
	// handshake-less connections cannot take the process's file
	// descriptors (and with them the other ports).
	Connections Connections `yaml:"connections" json:"connections"`
}

// Connections are the connection limits of ILB's ports. A count of 0 is
// derived at start from the process's open-file limit F: ext_proc
// (with the endpoint-picker ports) 45% of F, xDS (ADS and LRS) 25%, admin
// 5% (at most 1,024); per peer, 1/8 of its port's (at least 64). What is
// left of F serves ILB's own outbound connections. The effective limits
// are logged at start.
type Connections struct {
	ExtProc int `yaml:"extproc" json:"extproc"`
	XDS     int `yaml:"xds" json:"xds"`
	Admin   int `yaml:"admin" json:"admin"`
	// PerPeer is the most connections one IP address holds on a port.
	PerPeer int `yaml:"per_peer" json:"per_peer"`
	// HandshakeTimeout closes a connection that did not finish its TLS
	// and HTTP/2 handshakes in time (gRPC's default is 120 s); 0: 10s.
	HandshakeTimeout Duration `yaml:"handshake_timeout" json:"handshake_timeout"`
	// IdleTimeout closes a gRPC connection without a stream for this
	// long, and an admin connection between requests; 0: 5m.
	IdleTimeout Duration `yaml:"idle_timeout" json:"idle_timeout"`
}

// Handshake is HandshakeTimeout, 10s when 0.
func (c Connections) Handshake() time.Duration {
	if c.HandshakeTimeout > 0 {
		return c.HandshakeTimeout.Std()
	}
	return 10 * time.Second
}

// Idle is IdleTimeout, 5m when 0.
func (c Connections) Idle() time.Duration {
	if c.IdleTimeout > 0 {
		return c.IdleTimeout.Std()
	}
	return 5 * time.Minute
}

// MaxDecisionLogSize bounds extproc.decision_log_size: a lookup by
// request id and an admin query scan the records kept.
const MaxDecisionLogSize = 1_000_000

// Default returns the settings ILB uses for everything a file omits. The
// topology lists are empty.
func Default() *Config {
	return &Config{
		Controller: DefaultController(),
		Signals:    DefaultSignals(),
		Envoy: Envoy{
			Listener:           "127.0.0.1:10000",
			ExtProcCluster:     "ilb_extproc",
			XDSCluster:         "ilb_xds",
			MessageTimeout:     Duration(time.Second),
			UseRemoteAddress:   true,
			PathPrefixes:       []string{"/v1/"},
			RequestBufferBytes: 8 << 20,
			ConnectTimeout:     Duration(2 * time.Second),
			RouteIdleTimeout:   Duration(5 * time.Minute),
			SlowStart:          Duration(30 * time.Second),
			EDSMinInterval:     Duration(5 * time.Second),
			XDSAPIType:         "GRPC",
			Retry:              DefaultRetry(),
			HealthCheck:        DefaultHealthCheck(),
			Outlier:            DefaultOutlier(),
			CircuitBreakers:    DefaultCircuitBreakers(),
			ExtProcMaxStreams:  100000,
			Rollout:            Rollout{Soak: Duration(30 * time.Second), NACKQuorum: 0.5, NodeTTL: Duration(5 * time.Minute)},
		},
		ExtProc: ExtProc{
			DecisionLogSize:     10000,
			MaxBodyBytes:        8 << 20,
			MaxHeldBodyBytes:    128 << 20,
			DefaultPromptTokens: 500,
			DefaultOutputTokens: 250,
			ReportInterval:      Duration(time.Second),
			LiveTTL:             Duration(5 * time.Second),
			Steering:            true,
			RetryAfter:          1,
			DecisionLogBytes:    64 << 20,
			MaxStreams:          20000,
			MaxReportRate:       100000,
		},
		Tenants: DefaultTenants(),
		Listen: Listen{
			XDS:     "127.0.0.1:18000",
			ExtProc: "127.0.0.1:18001",
			Admin:   "127.0.0.1:18002",
		},
	}
}
