package istio

import (
	"math"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/ilbproject/ilb/config"
)

// destinationRules renders one DestinationRule per service host that a
// rendered source may use (residency), in configuration order. A cluster
// a source may use but without a service is an error: Istio routes to
// service hosts. Clusters sharing a host share its rule (Istio applies one
// per host), so they must speak the same protocol.
func (r *renderer) destinationRules(ps []plan) []Object {
	type group struct {
		host     string
		clusters []config.EngineCluster
	}
	var groups []*group
	byHost := map[string]*group{}
	for i, e := range r.c.Clusters {
		var users []string
		for _, p := range ps {
			if p.source.Allows(e.Region) {
				users = append(users, p.source.Name)
			}
		}
		switch {
		case len(users) == 0:
			continue
		case e.Service == nil:
			r.errorf("clusters[%d].service: cluster %s has none, and sources %s may use it: the Istio mode routes to a Kubernetes service (host, port)",
				i, e.Name, strings.Join(users, ", "))
			continue
		}
		g, ok := byHost[e.Service.Host]
		if !ok {
			g = &group{host: e.Service.Host}
			byHost[g.host] = g
			groups = append(groups, g)
		} else if g.clusters[0].Protocol != e.Protocol {
			r.errorf("clusters[%d].service.host: %s is also the host of cluster %s, which speaks %s, not %s: Istio applies one DestinationRule per host",
				i, e.Service.Host, g.clusters[0].Name, g.clusters[0].Protocol, e.Protocol)
			continue
		}
		g.clusters = append(g.clusters, e)
	}
	var out []Object
	for _, g := range groups {
		names := make([]string, len(g.clusters))
		for i, e := range g.clusters {
			names[i] = e.Name
		}
		ns := serviceNamespace(g.host)
		if ns == "" {
			ns = r.o.Namespace
		}
		md, ok := r.meta(g.clusters[0].Name, ns, map[string]string{clusterAnnotation: strings.Join(names, ",")}, "")
		if !ok {
			continue
		}
		out = append(out, Object{
			APIVersion: NetworkingV1, Kind: KindDestinationRule, Metadata: md,
			Spec: &networkingv1.DestinationRule{Host: g.host, TrafficPolicy: r.trafficPolicy(g.clusters[0])},
		})
	}
	return out
}

// trafficPolicy mirrors the engine clusters ILB serves itself (package
// xds): least request with slow start, outlier detection (Istio enforces
// both counters at 100%) with the healthy panic threshold, circuit
// breakers with a retry budget, HTTP/2 for engines that speak it. Istio
// has no active health checks: Kubernetes readiness and outlier detection
// take their place.
func (r *renderer) trafficPolicy(e config.EngineCluster) *networkingv1.TrafficPolicy {
	ev := r.c.Envoy
	lb := &networkingv1.LoadBalancerSettings{
		LbPolicy: &networkingv1.LoadBalancerSettings_Simple{Simple: networkingv1.LoadBalancerSettings_LEAST_REQUEST},
	}
	if ev.SlowStart > 0 {
		// warmup, not the deprecated warmupDurationSecs: Istio >= 1.25,
		// below the 1.28 the early header mutation needs anyway.
		lb.Warmup = &networkingv1.WarmupConfiguration{Duration: r.duration("envoy.slow_start", ev.SlowStart)}
	}
	if e.ReplicaPicking.Enabled {
		// The EnvoyFilter merges the override_host policy into the
		// cluster; istiod's locality weighting (a mesh-wide
		// localityLbSetting) would stay beside it, which Envoy refuses
		// (locality_weighted_lb_config with load_balancing_policy) and a
		// MERGE cannot clear: turn it off for this service. The fallback
		// is least request over every replica, as ILB's own clusters.
		lb.LocalityLbSetting = &networkingv1.LocalityLoadBalancerSetting{Enabled: wrapperspb.Bool(false)}
	}
	cb := ev.CircuitBreakers
	http := &networkingv1.ConnectionPoolSettings_HTTPSettings{
		Http1MaxPendingRequests: int32Of(cb.MaxPendingRequests),
		Http2MaxRequests:        int32Of(cb.MaxRequests),
	}
	if e.Protocol == config.ProtocolHTTP2 {
		http.H2UpgradePolicy = networkingv1.ConnectionPoolSettings_HTTPSettings_UPGRADE
	}
	o := ev.Outlier
	od := &networkingv1.OutlierDetection{
		Consecutive_5XxErrors:    wrapperspb.UInt32(o.Consecutive5xx),
		ConsecutiveGatewayErrors: wrapperspb.UInt32(o.ConsecutiveGatewayFailure),
		Interval:                 r.duration("envoy.outlier.interval", o.Interval),
		BaseEjectionTime:         r.duration("envoy.outlier.base_ejection_time", o.BaseEjectionTime),
		MaxEjectionPercent:       int32Of(o.MaxEjectionPercent),
		// Istio sets the cluster's healthy panic threshold from it.
		MinHealthPercent: r.percent("envoy.healthy_panic_threshold", ev.HealthyPanicThreshold),
	}
	if o.MaxEjectionPercent == 0 {
		// Istio reads 0 as its default (10%); ejecting nobody is
		// ejecting for nothing.
		od.Consecutive_5XxErrors, od.ConsecutiveGatewayErrors = wrapperspb.UInt32(0), wrapperspb.UInt32(0)
	}
	return &networkingv1.TrafficPolicy{
		LoadBalancer: lb,
		ConnectionPool: &networkingv1.ConnectionPoolSettings{
			Tcp: &networkingv1.ConnectionPoolSettings_TCPSettings{
				MaxConnections: int32Of(cb.MaxConnections),
				ConnectTimeout: r.duration("envoy.connect_timeout", ev.ConnectTimeout),
			},
			Http: http,
		},
		OutlierDetection: od,
		RetryBudget: &networkingv1.TrafficPolicy_RetryBudget{
			Percent:             wrapperspb.Double(cb.RetryBudgetPercent),
			MinRetryConcurrency: cb.MinRetryConcurrency,
		},
	}
}

// duration converts a configured duration to Istio's form, which must be
// at least 1ms and a whole number of milliseconds (Istio's validation).
func (r *renderer) duration(field string, d config.Duration) *durationpb.Duration {
	if d.Std() < time.Millisecond || d.Std()%time.Millisecond != 0 {
		r.errorf("%s: %s: Istio takes whole milliseconds, at least 1ms", field, d)
	}
	return durationpb.New(d.Std())
}

// percent converts a percentage to Istio's whole percents.
func (r *renderer) percent(field string, p float64) int32 {
	if p != math.Trunc(p) || p < 0 || p > 100 {
		r.errorf("%s: %v: Istio takes whole percents in [0, 100]", field, p)
	}
	return int32(p)
}

// int32Of converts a limit to Istio's int32 fields, capping it at the
// largest int32 (Istio's "unlimited" is 2^31-1 in these fields).
func int32Of(v uint32) int32 {
	return int32(min(v, math.MaxInt32))
}

// routedClusters lists, in configuration order, the clusters source s may
// use (residency).
func routedClusters(c *config.Config, s config.Source) []config.EngineCluster {
	var out []config.EngineCluster
	for _, e := range c.Clusters {
		if s.Allows(e.Region) {
			out = append(out, e)
		}
	}
	return slices.Clip(out)
}
