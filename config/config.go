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
	// MaxCPULoras is the LoRA adapters its engines keep in CPU memory
	// (vLLM's --max-cpu-loras): ILB counts an adapter it sent a replica
	// as still there, a copy into a GPU slot rather than a load from
	// disk, only while it is among the last MaxCPULoras distinct adapters
	// it sent. 0, the default: the last MaxReplicaCPULoras. At most
	// MaxReplicaCPULoras.
	MaxCPULoras int `yaml:"max_cpu_loras" json:"max_cpu_loras"`
}

// Replica picking bounds.
const (
	// DefaultReplicaCacheTokens is a third of the KV cache of an 8B model
	// on an 80 GB GPU: the part not taken by running sequences.
	DefaultReplicaCacheTokens = 131072
	// MaxReplicaCacheTokens bounds the index: 16M tokens a replica, about
	// 18 MiB of index each.
	MaxReplicaCacheTokens = 1 << 24
	// MaxReplicaCPULoras bounds max_cpu_loras: the adapters ILB
	// remembers sending each replica.
	MaxReplicaCPULoras = 64
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
