package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ilbproject/ilb/internal/bound"
)

// RetryOnHTTP are the retry_on conditions of Envoy's router for HTTP
// (RetryStateImpl::parseRetryOn), RetryOnGRPC those for gRPC status codes
// (parseRetryGrpcOn). Envoy ignores any other value silently, so a typo
// disables the retry: the configuration (HTTP engines: RetryOnHTTP) and
// the offline Envoy checks (both) refuse unknown ones from these lists.
var (
	RetryOnHTTP = []string{
		"5xx", "gateway-error", "reset", "reset-before-request", "connect-failure",
		"envoy-ratelimited", "retriable-4xx", "refused-stream", "retriable-status-codes",
		"retriable-headers", "http3-post-connect-failure",
	}
	RetryOnGRPC = []string{"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"}
)

func (c *Config) validateEnvoyKnobs(p *problems) {
	ev := c.Envoy
	if ev.RouteIdleTimeout.Std() < 0 {
		p.addf("envoy.route_idle_timeout", "%s is negative", ev.RouteIdleTimeout)
	}
	if ev.SlowStart.Std() < 0 {
		p.addf("envoy.slow_start", "%s is negative", ev.SlowStart)
	}
	if ev.EDSMinInterval.Std() < 0 {
		p.addf("envoy.eds_min_interval", "%s is negative", ev.EDSMinInterval)
	}
	if ev.XDSAPIType != "GRPC" && ev.XDSAPIType != "DELTA_GRPC" {
		p.addf("envoy.xds_api_type", "%q: want GRPC (state of the world) or DELTA_GRPC (incremental)", ev.XDSAPIType)
	}
	if t := ev.HealthyPanicThreshold; !(t >= 0 && t <= 100) {
		p.addf("envoy.healthy_panic_threshold", "%v is not a percentage in [0, 100]", t)
	}
	r := ev.Retry
	if r.Attempts > 0 {
		hasCodes := false
		for _, on := range strings.Split(r.On, ",") {
			on = strings.TrimSpace(on)
			if !slices.Contains(RetryOnHTTP, on) {
				p.addf("envoy.retry.on", "unknown retry condition %q in %q", on, r.On)
			}
			hasCodes = hasCodes || on == "retriable-status-codes"
		}
		if hasCodes != (len(r.StatusCodes) > 0) {
			p.addf("envoy.retry.status_codes", "%v with retry_on %q: retriable-status-codes and status codes go together", r.StatusCodes, r.On)
		}
		for i, code := range r.StatusCodes {
			if code < 100 || code > 599 {
				p.addf(fmt.Sprintf("envoy.retry.status_codes[%d]", i), "%d is not an HTTP status", code)
			}
		}
		if r.BaseInterval.Std() <= 0 || r.MaxInterval < r.BaseInterval {
			p.addf("envoy.retry", "back-off base %s and max %s: want 0 < base <= max", r.BaseInterval, r.MaxInterval)
		}
		if r.MaxRetryAfter.Std() <= 0 {
			p.addf("envoy.retry.max_retry_after", "%s is not positive", r.MaxRetryAfter)
		}
		if r.HostSelectionAttempts < 1 {
			p.addf("envoy.retry.host_selection_attempts", "%d is not positive", r.HostSelectionAttempts)
		}
	}
	hc := ev.HealthCheck
	if !hc.Disabled && (hc.Interval.Std() <= 0 || hc.Timeout.Std() <= 0 || hc.Timeout > hc.Interval || hc.UnhealthyThreshold < 1 || hc.HealthyThreshold < 1) {
		p.addf("envoy.health_check", "interval %s, timeout %s, thresholds %d/%d: want 0 < timeout <= interval and thresholds >= 1",
			hc.Interval, hc.Timeout, hc.UnhealthyThreshold, hc.HealthyThreshold)
	}
	o := ev.Outlier
	if o.Interval.Std() <= 0 || o.BaseEjectionTime.Std() <= 0 || o.MaxEjectionPercent > 100 {
		p.addf("envoy.outlier", "interval %s, base ejection %s, max ejection %d%%: want positive durations and a percent <= 100",
			o.Interval, o.BaseEjectionTime, o.MaxEjectionPercent)
	}
	cb := ev.CircuitBreakers
	if cb.MaxConnections < 1 || cb.MaxPendingRequests < 1 || cb.MaxRequests < 1 {
		p.addf("envoy.circuit_breakers", "limits must be >= 1: %+v", cb)
	}
	if !finite(cb.RetryBudgetPercent) || cb.RetryBudgetPercent > 100 {
		p.addf("envoy.circuit_breakers.retry_budget_percent", "%v is out of range: want [0, 100]", cb.RetryBudgetPercent)
	}
	if ev.Rollout.CanaryPercent < 0 || ev.Rollout.CanaryPercent > 100 {
		p.addf("envoy.rollout.canary_percent", "%d is out of range: want 0..100", ev.Rollout.CanaryPercent)
	}
	if ev.Rollout.Soak.Std() < 0 {
		p.addf("envoy.rollout.soak", "%s is negative", ev.Rollout.Soak)
	}
	if q := ev.Rollout.NACKQuorum; !finite(q) || q >= 1 {
		p.addf("envoy.rollout.nack_quorum", "%v is out of range: want a share in [0, 1) (more than it of a source's Envoys must reject a version to ban it)", q)
	}
	if ev.Rollout.NodeTTL.Std() <= 0 {
		p.addf("envoy.rollout.node_ttl", "%s is not positive: want a duration such as 5m", ev.Rollout.NodeTTL)
	}
	if ev.ExtProcMaxStreams < 1 {
		p.addf("envoy.extproc_max_streams", "%d is not positive", ev.ExtProcMaxStreams)
	}
	for i, e := range c.Clusters {
		path := fmt.Sprintf("clusters[%d]", i)
		if e.Protocol != ProtocolHTTP1 && e.Protocol != ProtocolHTTP2 {
			p.addf(path+".protocol", "unknown protocol %q: want http1 or http2", e.Protocol)
		}
		if n := e.ReplicaPicking.CacheTokens; n < 0 || n > MaxReplicaCacheTokens {
			p.addf(path+".replica_picking.cache_tokens", "%d is out of range: want 0 (the default, %d) to %d tokens", n, DefaultReplicaCacheTokens, MaxReplicaCacheTokens)
		}
		if n := e.ReplicaPicking.MaxQueueSkew; n < 0 || n > MaxReplicaQueueSkew {
			p.addf(path+".replica_picking.max_queue_skew", "%d is out of range: want 0 (no bound) to %d requests", n, MaxReplicaQueueSkew)
		}
		if n := e.ReplicaPicking.MaxCPULoras; n < 0 || n > MaxReplicaCPULoras {
			p.addf(path+".replica_picking.max_cpu_loras", "%d is out of range: want 0 (the default, %d) to %d adapters", n, MaxReplicaCPULoras, MaxReplicaCPULoras)
		}
		if e.Service != nil && (!validDNSName(e.Service.Host) || e.Service.Port < 1 || e.Service.Port > 65535) {
			p.addf(path+".service", "%+v: want a DNS host and a port in 1..65535", *e.Service)
		}
	}
	listens := map[string]string{}
	for i, s := range c.Sources {
		path := fmt.Sprintf("sources[%d]", i)
		switch {
		case s.Routing != RoutingDraw && s.Routing != RoutingCluster && s.Routing != RoutingPicker:
			p.addf(path+".routing", "unknown routing %q: want draw, cluster or picker", s.Routing)
		case s.Routing == RoutingPicker && s.Picker == nil:
			p.addf(path+".picker", "routing is picker: name the InferencePool's listener and engine cluster ({listen: host:port, cluster: NAME})")
		case s.Routing != RoutingPicker && s.Picker != nil:
			p.addf(path+".picker", "is set while routing is %q: want routing: picker", s.Routing)
		case s.Picker != nil:
			c.validatePicker(p, path+".picker", s, listens)
		}
	}
}

// validatePicker checks a source's endpoint-picker section: its listener
// (a host:port of its own) and its cluster (known, picking replicas, the
// only one the source's models may be served by).
func (c *Config) validatePicker(p *problems, path string, s Source, listens map[string]string) {
	pk := s.Picker
	if err := checkHostPortZero(pk.Listen); err != nil {
		p.addf(path+".listen", "%s is not a valid address: %v", bound.Quote(pk.Listen, bound.Excerpt), err)
	} else if other, ok := listens[pk.Listen]; ok {
		p.addf(path+".listen", "%q is also source %q's picker listener: want one per source", pk.Listen, other)
	} else if !strings.HasSuffix(pk.Listen, ":0") {
		listens[pk.Listen] = s.Name
	}
	e, ok := c.Cluster(pk.Cluster)
	if !ok {
		p.addf(path+".cluster", "unknown cluster %s", bound.Quote(pk.Cluster, bound.Excerpt))
		return
	}
	if !e.ReplicaPicking.Enabled {
		p.addf(path+".cluster", "cluster %q does not pick replicas: an endpoint picker must; set its replica_picking.enabled", e.Name)
	}
	for _, m := range e.Models {
		for _, o := range c.Eligible(s, m) {
			if o.Name != e.Name {
				p.addf(path+".cluster", "model %q of source %q may also be served by cluster %q, which its InferencePool does not reach: restrict the source's allowed_regions to %q's", m, s.Name, o.Name, e.Name)
			}
		}
	}
}
