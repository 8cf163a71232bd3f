package xds

import (
	"fmt"
	"net"
	"strconv"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ilbproject/ilb/config"
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
		cl := &clusterv3.Cluster{
			Name:           e.Name,
			ConnectTimeout: durationpb.New(c.Envoy.ConnectTimeout.Std()),
			LbPolicy:       clusterv3.Cluster_LEAST_REQUEST,
		}
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
