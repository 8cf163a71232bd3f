package xds

import (
	"fmt"
	"net"
	"strconv"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
)

// engineClusters returns the CDS clusters and EDS assignments of the
// engine clusters a source may use (residency): a source's Envoys do not
// even know the clusters it must never reach. Clusters whose endpoints are
// all IP addresses are EDS clusters; a cluster with a DNS name among its
// endpoints is STRICT_DNS with the endpoints inline, since EDS carries
// only addresses.
func engineClusters(c *config.Config, eps Endpoints, s config.Source) ([]*clusterv3.Cluster, []*endpointv3.ClusterLoadAssignment, error) {
	var cds []*clusterv3.Cluster
	var eds []*endpointv3.ClusterLoadAssignment
	for _, e := range c.Clusters {
		if !s.Allows(e.Region) {
			continue
		}
		list := eps.of(e)
		cla, err := loadAssignment(e, list)
		if err != nil {
			return nil, nil, err
		}
		cl := engineCluster(c, e)
		if allIP(list) {
			cl.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}
			cl.EdsClusterConfig = &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource()}
			eds = append(eds, cla)
		} else {
			cl.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS}
			cl.LoadAssignment = cla
		}
		cds = append(cds, cl)
	}
	return cds, eds, nil
}

// engineCluster is the CDS resource of an engine cluster without its
// discovery: least-request load balancing with slow start, active HTTP
// health checks on the engine's health path, outlier detection
// (consecutive 5xx and gateway errors, enforced), circuit breakers with a
// retry budget, and HTTP/2 when the engine speaks it.
func engineCluster(c *config.Config, e config.EngineCluster) *clusterv3.Cluster {
	ev := c.Envoy
	lr := &clusterv3.Cluster_LeastRequestLbConfig{ChoiceCount: wrapperspb.UInt32(2)}
	if ev.SlowStart > 0 {
		lr.SlowStartConfig = &clusterv3.Cluster_SlowStartConfig{SlowStartWindow: durationpb.New(ev.SlowStart.Std())}
	}
	cl := &clusterv3.Cluster{
		Name:           e.Name,
		ConnectTimeout: durationpb.New(ev.ConnectTimeout.Std()),
		LbPolicy:       clusterv3.Cluster_LEAST_REQUEST,
		LbConfig:       &clusterv3.Cluster_LeastRequestLbConfig_{LeastRequestLbConfig: lr},
		// Envoy's default panic threshold (50%) would send traffic to
		// UNHEALTHY endpoints once half a cluster is down.
		CommonLbConfig: &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: ev.HealthyPanicThreshold}},
		// A replica removed from EDS leaves at once, even while it still
		// passes its health checks (scale-down, replaced pod).
		IgnoreHealthOnHostRemoval: true,
		OutlierDetection: &clusterv3.OutlierDetection{
			// An ejection lasts its ejection time: a passing health check
			// (the engine's /health answers while its requests fail) must
			// not bring the host back early.
			SuccessfulActiveHealthCheckUnejectHost: wrapperspb.Bool(false),
			// Success-rate ejection is on by default in Envoy; engines
			// answering 429/503 under load are not outliers.
			EnforcingSuccessRate:               wrapperspb.UInt32(0),
			Consecutive_5Xx:                    wrapperspb.UInt32(ev.Outlier.Consecutive5xx),
			ConsecutiveGatewayFailure:          wrapperspb.UInt32(ev.Outlier.ConsecutiveGatewayFailure),
			EnforcingConsecutive_5Xx:           wrapperspb.UInt32(100),
			EnforcingConsecutiveGatewayFailure: wrapperspb.UInt32(100),
			Interval:                           durationpb.New(ev.Outlier.Interval.Std()),
			BaseEjectionTime:                   durationpb.New(ev.Outlier.BaseEjectionTime.Std()),
			MaxEjectionPercent:                 wrapperspb.UInt32(ev.Outlier.MaxEjectionPercent),
		},
		CircuitBreakers: &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			MaxConnections:     wrapperspb.UInt32(ev.CircuitBreakers.MaxConnections),
			MaxPendingRequests: wrapperspb.UInt32(ev.CircuitBreakers.MaxPendingRequests),
			MaxRequests:        wrapperspb.UInt32(ev.CircuitBreakers.MaxRequests),
			RetryBudget: &clusterv3.CircuitBreakers_Thresholds_RetryBudget{
				BudgetPercent:       &typev3.Percent{Value: ev.CircuitBreakers.RetryBudgetPercent},
				MinRetryConcurrency: wrapperspb.UInt32(ev.CircuitBreakers.MinRetryConcurrency),
			},
		}}},
	}
	if hc := ev.HealthCheck; !hc.Disabled {
		cl.HealthChecks = []*corev3.HealthCheck{{
			Timeout:            durationpb.New(hc.Timeout.Std()),
			Interval:           durationpb.New(hc.Interval.Std()),
			UnhealthyThreshold: wrapperspb.UInt32(hc.UnhealthyThreshold),
			HealthyThreshold:   wrapperspb.UInt32(hc.HealthyThreshold),
			HealthChecker: &corev3.HealthCheck_HttpHealthCheck_{HttpHealthCheck: &corev3.HealthCheck_HttpHealthCheck{
				Path: e.Metrics.HealthPath,
			}},
		}}
		if e.Protocol == config.ProtocolHTTP2 { // the checker speaks HTTP/1.1 unless told
			cl.HealthChecks[0].GetHttpHealthCheck().CodecClientType = typev3.CodecClientType_HTTP2
		}
	}
	if e.Protocol == config.ProtocolHTTP2 {
		cl.TypedExtensionProtocolOptions = map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": envoy.MustAny(&upstreamhttpv3.HttpProtocolOptions{
				UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
					ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
				}},
			}),
		}
	}
	if e.ReplicaPicking.Enabled {
		cl.LbPolicy, cl.LbConfig = clusterv3.Cluster_ROUND_ROBIN, nil // superseded: see LoadBalancingPolicy
		cl.LoadBalancingPolicy = envoy.OverrideHostPolicy(ev.SlowStart.Std())
	}
	return cl
}

// loadAssignment lists a cluster's endpoints, with their health and
// load-balancing weight, in one locality named after its region.
func loadAssignment(e config.EngineCluster, eps []Endpoint) (*endpointv3.ClusterLoadAssignment, error) {
	loc := &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{Region: e.Region}}
	for _, ep := range eps {
		host, portS, err := net.SplitHostPort(ep.Address)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: endpoint %q: %w", e.Name, ep.Address, err)
		}
		port, err := strconv.ParseUint(portS, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: endpoint %q: port: %w", e.Name, ep.Address, err)
		}
		w := ep.Weight
		if w == 0 || w > MaxWeight {
			w = MaxWeight
		}
		loc.LbEndpoints = append(loc.LbEndpoints, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: socketAddress(host, uint32(port)),
			}},
			HealthStatus:        ep.Health,
			LoadBalancingWeight: wrapperspb.UInt32(w),
		})
	}
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: e.Name,
		Endpoints:   []*endpointv3.LocalityLbEndpoints{loc},
	}, nil
}

func socketAddress(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       host,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// adsSource is a ConfigSource that says "over the ADS stream".
func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}
