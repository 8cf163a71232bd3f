package config

import "time"

// Retry configures the retries of every ILB route (Envoy's retry_policy):
// only before the response started, to another host, with back-off that
// honours an engine's retry-after.
type Retry struct {
	// Attempts is num_retries; 0 turns retries off. Default 2.
	Attempts uint32 `yaml:"attempts" json:"attempts"`
	// On is Envoy's retry_on; default
	// "connect-failure,reset,retriable-status-codes".
	On string `yaml:"on" json:"on"`
	// StatusCodes are the retriable status codes; default [503, 429].
	StatusCodes []uint32 `yaml:"status_codes" json:"status_codes"`
	// BaseInterval and MaxInterval bound the jittered exponential
	// back-off; defaults 25ms and 250ms.
	BaseInterval Duration `yaml:"base_interval" json:"base_interval"`
	MaxInterval  Duration `yaml:"max_interval" json:"max_interval"`
	// MaxRetryAfter caps the wait an engine's retry-after asks for;
	// default 5s.
	MaxRetryAfter Duration `yaml:"max_retry_after" json:"max_retry_after"`
	// HostSelectionAttempts: how often Envoy re-picks a host to avoid the
	// ones already tried (previous_hosts); default 3.
	HostSelectionAttempts int64 `yaml:"host_selection_attempts" json:"host_selection_attempts"`
}

// HealthCheck configures Envoy's active HTTP health checks of engines (on
// each cluster's metrics.health_path).
type HealthCheck struct {
	Disabled           bool     `yaml:"disabled,omitempty" json:"disabled,omitempty"`
	Interval           Duration `yaml:"interval" json:"interval"`                       // default 5s
	Timeout            Duration `yaml:"timeout" json:"timeout"`                         // default 1s
	UnhealthyThreshold uint32   `yaml:"unhealthy_threshold" json:"unhealthy_threshold"` // default 2
	HealthyThreshold   uint32   `yaml:"healthy_threshold" json:"healthy_threshold"`     // default 1
}

// Outlier configures Envoy's outlier detection of engine replicas.
type Outlier struct {
	// Consecutive5xx and ConsecutiveGatewayFailure eject a host after so
	// many failures in a row (both enforced at 100%); defaults 5 and 3.
	Consecutive5xx            uint32   `yaml:"consecutive_5xx" json:"consecutive_5xx"`
	ConsecutiveGatewayFailure uint32   `yaml:"consecutive_gateway_failure" json:"consecutive_gateway_failure"`
	Interval                  Duration `yaml:"interval" json:"interval"`                         // default 5s
	BaseEjectionTime          Duration `yaml:"base_ejection_time" json:"base_ejection_time"`     // default 30s
	MaxEjectionPercent        uint32   `yaml:"max_ejection_percent" json:"max_ejection_percent"` // default 50
}

// CircuitBreakers configures each engine cluster's limits.
type CircuitBreakers struct {
	MaxConnections     uint32 `yaml:"max_connections" json:"max_connections"`           // default 10000
	MaxPendingRequests uint32 `yaml:"max_pending_requests" json:"max_pending_requests"` // default 10000
	MaxRequests        uint32 `yaml:"max_requests" json:"max_requests"`                 // default 10000
	// RetryBudgetPercent of active requests may be retries, at least
	// MinRetryConcurrency; defaults 20 and 3.
	RetryBudgetPercent  float64 `yaml:"retry_budget_percent" json:"retry_budget_percent"`
	MinRetryConcurrency uint32  `yaml:"min_retry_concurrency" json:"min_retry_concurrency"`
}

// DefaultRetry and the others return the defaults of the Envoy knobs.
func DefaultRetry() Retry {
	return Retry{
		Attempts: 2, On: "connect-failure,reset,retriable-status-codes", StatusCodes: []uint32{503, 429},
		BaseInterval: Duration(25 * time.Millisecond), MaxInterval: Duration(250 * time.Millisecond),
		MaxRetryAfter: Duration(5 * time.Second), HostSelectionAttempts: 3,
	}
}

// DefaultHealthCheck returns the active health check defaults.
func DefaultHealthCheck() HealthCheck {
	return HealthCheck{Interval: Duration(5 * time.Second), Timeout: Duration(time.Second), UnhealthyThreshold: 2, HealthyThreshold: 1}
}

// DefaultOutlier returns the outlier detection defaults.
func DefaultOutlier() Outlier {
	return Outlier{
		Consecutive5xx: 5, ConsecutiveGatewayFailure: 3, Interval: Duration(5 * time.Second),
		BaseEjectionTime: Duration(30 * time.Second), MaxEjectionPercent: 50,
	}
}

// DefaultCircuitBreakers returns the circuit breaker defaults.
func DefaultCircuitBreakers() CircuitBreakers {
	return CircuitBreakers{MaxConnections: 10000, MaxPendingRequests: 10000, MaxRequests: 10000, RetryBudgetPercent: 20, MinRetryConcurrency: 3}
}

// Rollout configures how a new version reaches a source's Envoys.
type Rollout struct {
	// CanaryPercent of each source's Envoys (chosen by a hash of their
	// node id, so the same ones across restarts) get a new version first;
	// 0 (default) sends it to all at once.
	CanaryPercent int `yaml:"canary_percent" json:"canary_percent"`
	// Soak is how long every canary must have run a version (ACKed it)
	// before it is promoted to the rest; default 30s.
	Soak Duration `yaml:"soak" json:"soak"`
	// NACKQuorum: a version is banned for the whole source, and the
	// source rolled back, when more than this share of the source's
	// connected voters rejected it (a voter is a peer's verified identity
	// and IP address, or its IP address without client certificates: one
	// peer claiming many node ids is one vote); below it, only the
	// Envoys that rejected it keep their last accepted version (and get
	// nothing new until the content changes). A canary's rejection always
	// holds a canary rollout. In [0, 1): 0 bans on any rejection; default
	// 0.5, a strict majority (one Envoy beside another never bans; the only
	// Envoy of a source does).
	NACKQuorum float64 `yaml:"nack_quorum" json:"nack_quorum"`
	// NodeTTL is how long an Envoy that closed all its xDS streams stays
	// listed (rollout status, /debug/xds, NACK quorum) before it is
	// forgotten; default 5m.
	NodeTTL Duration `yaml:"node_ttl" json:"node_ttl"`
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
