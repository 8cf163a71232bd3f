package envoysim

import (
	"maps"
	"sync"
)

// Stats is a snapshot of envoysim's counters, named after the Envoy stats
// they model, for tests.
type Stats struct {
	// XDS holds per type URL ACK/NACK counters (control_plane / update_rejected).
	XDS map[string]XDSStats
	// ExtProc aggregates every ext_proc filter
	// (http.<stat_prefix>.ext_proc.<stat_prefix>.*).
	ExtProc ExtProcStats
	// RouteMatches counts route computations, RouteRematches those that
	// followed a route cache clear.
	RouteMatches   uint64
	RouteRematches uint64
	// Responses counts responses sent downstream by class: "1xx" … "5xx".
	Responses map[string]uint64
	// LocalReplies counts local replies by response code details.
	LocalReplies map[string]uint64
	// UpstreamRequests counts upstream requests per cluster (upstream_rq_total),
	// UpstreamEndpointRequests per cluster and host address.
	UpstreamRequests         map[string]uint64
	UpstreamEndpointRequests map[string]map[string]uint64
	// Router failures: no_route, no_cluster, no_healthy_upstream,
	// upstream_rq_timeout, upstream_cx_connect_fail, upstream resets.
	NoRoute                 uint64
	NoCluster               uint64
	NoHealthyUpstream       uint64
	UpstreamTimeouts        uint64
	UpstreamConnectFailures uint64
	UpstreamResets          uint64
	// UpstreamPerTryTimeouts counts upstream_rq_per_try_timeout.
	UpstreamPerTryTimeouts uint64
	// StreamIdleTimeouts counts downstream_rq_idle_timeout.
	StreamIdleTimeouts uint64
	// Clusters holds per-cluster counters.
	Clusters map[string]ClusterStats
}

// ClusterStats are the counters of one cluster, named after Envoy's
// cluster.<name>.* stats.
type ClusterStats struct {
	// Retries: upstream_rq_retry, upstream_rq_retry_overflow,
	// upstream_rq_retry_success, upstream_rq_retry_limit_exceeded,
	// upstream_rq_retry_backoff_exponential and _ratelimited,
	// retry_or_shadow_abandoned.
	RetryTotal              uint64
	RetryOverflow           uint64
	RetrySuccess            uint64
	RetryLimitExceeded      uint64
	RetryBackoffExponential uint64
	RetryBackoffRatelimited uint64
	RetryOrShadowAbandoned  uint64
	// PendingOverflow is upstream_rq_pending_overflow (circuit breaker
	// overflow of max_pending_requests or max_requests).
	PendingOverflow uint64
	// Outlier detection (outlier_detection.*).
	OutlierEjectionsActive           uint64
	OutlierEjectionsEnforced         uint64
	OutlierEjectionsOverflow         uint64
	OutlierDetectedConsecutive5xx    uint64
	OutlierDetectedGatewayFailure    uint64
	OutlierDetectedSuccessRate       uint64
	OutlierDetectedFailurePercentage uint64
	// Active health checking (health_check.*).
	HealthCheckAttempts        uint64
	HealthCheckSuccesses       uint64
	HealthCheckFailures        uint64
	HealthCheckNetworkFailures uint64
	// TLS to the cluster's hosts (ssl.*): handshakes completed,
	// connection errors (every failed handshake), certificates whose
	// chain did not verify, and certificates whose SANs matched no
	// matcher.
	SSLHandshakes       uint64
	SSLConnectionErrors uint64
	SSLFailVerifyError  uint64
	SSLFailVerifySAN    uint64
}

// XDSStats are the counters of one xDS type.
type XDSStats struct {
	Acks          uint64
	Nacks         uint64
	LastNackError string
}

// ExtProcStats are the ext_proc filter counters (ext_proc.cc ExtProcFilterStats).
type ExtProcStats struct {
	StreamsStarted          uint64
	StreamsFailed           uint64 // gRPC errors
	StreamRetries           uint64 // streams opened again by grpc_service.retry_policy
	StreamsClosed           uint64
	MessagesSent            uint64
	MessagesReceived        uint64
	MessageTimeouts         uint64
	SpuriousMessages        uint64
	FailureModeAllowed      uint64
	RejectedHeaderMutations uint64
	ClearRouteCache         uint64 // route cache cleared
	ClearRouteCacheIgnored  uint64 // clear requested without a header mutation
	ClearRouteCacheDisabled uint64 // clear requested under RETAIN
	ImmediateResponses      uint64
	OverrideTimeoutReceived uint64
	OverrideTimeoutIgnored  uint64
	UnsupportedModeOverride uint64 // mode_override to a mode envoysim does not model
	UnmodelledTrailers      uint64 // streams reset: trailers under trailer mode SEND (extproc_duplex.go)
}

// statsRegistry guards the counters.
type statsRegistry struct {
	mu sync.Mutex
	s  Stats
}

func newStatsRegistry() *statsRegistry {
	return &statsRegistry{s: Stats{
		XDS:                      map[string]XDSStats{},
		Responses:                map[string]uint64{},
		LocalReplies:             map[string]uint64{},
		UpstreamRequests:         map[string]uint64{},
		UpstreamEndpointRequests: map[string]map[string]uint64{},
		Clusters:                 map[string]ClusterStats{},
	}}
}

// cluster updates the counters of the named cluster.
func (r *statsRegistry) cluster(name string, f func(c *ClusterStats)) {
	r.update(func(s *Stats) {
		c := s.Clusters[name]
		f(&c)
		s.Clusters[name] = c
	})
}

// update runs f with the counters locked.
func (r *statsRegistry) update(f func(s *Stats)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.s)
}

// extProc updates the ext_proc counters.
func (r *statsRegistry) extProc(f func(s *ExtProcStats)) {
	r.update(func(s *Stats) { f(&s.ExtProc) })
}

func (r *statsRegistry) snapshot() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.s
	out.XDS = maps.Clone(r.s.XDS)
	out.Responses = maps.Clone(r.s.Responses)
	out.LocalReplies = maps.Clone(r.s.LocalReplies)
	out.UpstreamRequests = maps.Clone(r.s.UpstreamRequests)
	out.Clusters = maps.Clone(r.s.Clusters)
	out.UpstreamEndpointRequests = make(map[string]map[string]uint64, len(r.s.UpstreamEndpointRequests))
	for k, v := range r.s.UpstreamEndpointRequests {
		out.UpstreamEndpointRequests[k] = maps.Clone(v)
	}
	return out
}

// tls counts a TLS handshake outcome of cluster's connections.
func (r *statsRegistry) tls(cluster string) func(tlsOutcome) {
	return func(o tlsOutcome) {
		r.cluster(cluster, func(c *ClusterStats) {
			switch o {
			case tlsHandshake:
				c.SSLHandshakes++
			case tlsConnectionError:
				c.SSLConnectionErrors++
			case tlsFailVerifyError:
				c.SSLFailVerifyError++
			case tlsFailVerifySAN:
				c.SSLFailVerifySAN++
			}
		})
	}
}

func (r *statsRegistry) upstreamRequest(clusterName, addr string) {
	r.update(func(s *Stats) {
		s.UpstreamRequests[clusterName]++
		m := s.UpstreamEndpointRequests[clusterName]
		if m == nil {
			m = map[string]uint64{}
			s.UpstreamEndpointRequests[clusterName] = m
		}
		m[addr]++
	})
}

func (r *statsRegistry) response(status int) {
	class := string(rune('0'+status/100)) + "xx"
	r.update(func(s *Stats) { s.Responses[class]++ })
}
