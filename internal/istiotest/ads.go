package istiotest

import (
	"context"
	"fmt"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// Proxy is who the ADS client says it is: istiod builds a proxy's
// configuration from its node id (type~ip~pod.namespace~domain) and
// metadata (labels, namespace).
type Proxy struct {
	Type      string // "router" (a gateway) or "sidecar"
	Name      string // the pod's name
	Namespace string
	IP        string
	Labels    map[string]string
	Region    string // the proxy's locality region, "": none
}

// Resources is what istiod sent a proxy: every listener and cluster, and
// the route configurations its listeners name.
type Resources struct {
	Listeners []*listenerv3.Listener
	Clusters  []*clusterv3.Cluster
	Routes    []*routev3.RouteConfiguration
}

func (p Proxy) node() (*corev3.Node, error) {
	labels := map[string]any{}
	for k, v := range p.Labels {
		labels[k] = v
	}
	md, err := structpb.NewStruct(map[string]any{
		"ISTIO_VERSION": "1.29.0", "NAMESPACE": p.Namespace, "LABELS": labels, "CLUSTER_ID": "Kubernetes",
		"INSTANCE_IPS": p.IP, "SERVICE_ACCOUNT": "default", "WORKLOAD_NAME": p.Name, "NAME": p.Name,
	})
	if err != nil {
		return nil, err
	}
	n := &corev3.Node{
		Id:       fmt.Sprintf("%s~%s~%s.%s~%s.svc.cluster.local", p.Type, p.IP, p.Name, p.Namespace, p.Namespace),
		Cluster:  p.Name + "." + p.Namespace,
		Metadata: md,
	}
	if p.Region != "" {
		n.Locality = &corev3.Locality{Region: p.Region, Zone: p.Region + "-a"}
	}
	return n, nil
}

// Fetch connects to istiod's xDS as p (state of the world, over ADS),
// asks for every listener and cluster, then for the route configurations
// the listeners' HTTP connection managers name, and returns them.
func (i *Istiod) Fetch(ctx context.Context, p Proxy) (*Resources, error) {
	node, err := p.node()
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(i.xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, fmt.Errorf("ADS: %w", err)
	}
	ask := func(typeURL string, names []string) (*discoveryv3.DiscoveryResponse, error) {
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typeURL, ResourceNames: names}); err != nil {
			return nil, fmt.Errorf("ADS: ask %s: %w", typeURL, err)
		}
		for {
			resp, err := stream.Recv()
			if err != nil {
				return nil, fmt.Errorf("ADS: %s: %w", typeURL, err)
			}
			if resp.GetTypeUrl() == typeURL {
				return resp, nil
			}
		}
	}
	out := &Resources{}
	cds, err := ask(resource.ClusterType, nil)
	if err != nil {
		return nil, err
	}
	for _, a := range cds.GetResources() {
		var c clusterv3.Cluster
		if err := a.UnmarshalTo(&c); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		out.Clusters = append(out.Clusters, &c)
	}
	lds, err := ask(resource.ListenerType, nil)
	if err != nil {
		return nil, err
	}
	var routes []string
	for _, a := range lds.GetResources() {
		var l listenerv3.Listener
		if err := a.UnmarshalTo(&l); err != nil {
			return nil, fmt.Errorf("listener: %w", err)
		}
		out.Listeners = append(out.Listeners, &l)
		for _, hcm := range HCMs(&l) {
			if n := hcm.GetRds().GetRouteConfigName(); n != "" {
				routes = append(routes, n)
			}
		}
	}
	if len(routes) == 0 {
		return out, nil
	}
	rds, err := ask(resource.RouteType, routes)
	if err != nil {
		return nil, err
	}
	for _, a := range rds.GetResources() {
		var r routev3.RouteConfiguration
		if err := a.UnmarshalTo(&r); err != nil {
			return nil, fmt.Errorf("route: %w", err)
		}
		out.Routes = append(out.Routes, &r)
	}
	return out, nil
}

// HCMs are the HTTP connection managers of a listener's filter chains.
func HCMs(l *listenerv3.Listener) []*hcmv3.HttpConnectionManager {
	var out []*hcmv3.HttpConnectionManager
	for _, fc := range append(l.GetFilterChains(), l.GetDefaultFilterChain()) {
		for _, f := range fc.GetFilters() {
			if !strings.HasSuffix(f.GetName(), "http_connection_manager") {
				continue
			}
			var hcm hcmv3.HttpConnectionManager
			if err := f.GetTypedConfig().UnmarshalTo(&hcm); err == nil {
				out = append(out, &hcm)
			}
		}
	}
	return out
}
