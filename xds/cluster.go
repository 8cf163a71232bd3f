package xds

import (
	"fmt"
	"net"
	"strconv"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ilbproject/ilb/config"
)

// engineClusters returns the CDS clusters and EDS assignments of the
// engine clusters a source may use (residency): a source's Envoys do not
// even know the clusters it must never reach. Clusters whose endpoints are
// all IP addresses are EDS clusters; a cluster with a DNS name among its
// endpoints is STRICT_DNS with the endpoints inline, since EDS carries
// only addresses.
func engineClusters(c *config.Config, s config.Source) ([]*clusterv3.Cluster, []*endpointv3.ClusterLoadAssignment, error) {
	var cds []*clusterv3.Cluster
	var eds []*endpointv3.ClusterLoadAssignment
	for _, e := range c.Clusters {
		if !s.Allows(e.Region) {
			continue
		}
		cla, allIP, err := loadAssignment(e)
		if err != nil {
			return nil, nil, err
		}
		cl := &clusterv3.Cluster{
			Name:           e.Name,
			ConnectTimeout: durationpb.New(c.Envoy.ConnectTimeout.Std()),
			LbPolicy:       clusterv3.Cluster_LEAST_REQUEST,
		}
		if allIP {
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

// loadAssignment lists a cluster's endpoints in one locality named after
// its region, and reports whether every endpoint is an IP address.
func loadAssignment(e config.EngineCluster) (*endpointv3.ClusterLoadAssignment, bool, error) {
	loc := &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{Region: e.Region}}
	allIP := true
	for _, ep := range e.Endpoints {
		host, portS, err := net.SplitHostPort(ep)
		if err != nil {
			return nil, false, fmt.Errorf("cluster %s: endpoint %q: %w", e.Name, ep, err)
		}
		port, err := strconv.ParseUint(portS, 10, 16)
		if err != nil {
			return nil, false, fmt.Errorf("cluster %s: endpoint %q: port: %w", e.Name, ep, err)
		}
		allIP = allIP && net.ParseIP(host) != nil
		loc.LbEndpoints = append(loc.LbEndpoints, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: socketAddress(host, uint32(port)),
			}},
			HealthStatus: corev3.HealthStatus_HEALTHY,
		})
	}
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: e.Name,
		Endpoints:   []*endpointv3.LocalityLbEndpoints{loc},
	}, allIP, nil
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
