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
