package xds_test

import (
	"context"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/ilbproject/ilb/xds"
)

func eds(t *testing.T, srv *xds.Server, source, cluster string) *endpointv3.ClusterLoadAssignment {
	t.Helper()
	snap, err := srv.Snapshot(source)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := snap.GetResources(resource.EndpointType)[cluster]
	if !ok {
		t.Fatalf("no EDS for %s", cluster)
	}
	return r.(*endpointv3.ClusterLoadAssignment)
}

// TestEndpointsFollowReplicaState: EDS carries each replica's health and
// (warming) weight, and a change made between Prepare and commit of a
// weights version is not lost.
func TestEndpointsFollowReplicaState(t *testing.T) {
	c, w := demo(t)
	ctx := context.Background()
	srv, err := xds.New(ctx, xds.Options{Config: c})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Publish(ctx, w); err != nil {
		t.Fatal(err)
	}
	before, _ := srv.Snapshot("edge-eu")
	eps := xds.StaticEndpoints(c)
	eps["eu-west-vllm"] = []xds.Endpoint{
		{Address: "127.0.0.1:18121", Health: corev3.HealthStatus_UNHEALTHY, Weight: 100},
		{Address: "127.0.0.1:18122", Health: corev3.HealthStatus_HEALTHY, Weight: 40}, // warming
		{Address: "127.0.0.1:18123", Health: corev3.HealthStatus_DRAINING, Weight: 100},
	}
	if err := srv.SetEndpoints(ctx, eps); err != nil {
		t.Fatal(err)
	}
	cla := eds(t, srv, "edge-eu", "eu-west-vllm")
	got := map[uint32]corev3.HealthStatus{}
	weights := map[uint32]uint32{}
	for _, le := range cla.GetEndpoints()[0].GetLbEndpoints() {
		port := le.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()
		got[port] = le.GetHealthStatus()
		weights[port] = le.GetLoadBalancingWeight().GetValue()
	}
	if got[18121] != corev3.HealthStatus_UNHEALTHY || got[18122] != corev3.HealthStatus_HEALTHY || got[18123] != corev3.HealthStatus_DRAINING || weights[18122] != 40 {
		t.Errorf("EDS health %v weights %v", got, weights)
	}
	after, _ := srv.Snapshot("edge-eu")
	if before.GetVersion(resource.EndpointType) == after.GetVersion(resource.EndpointType) ||
		before.GetVersion(resource.RouteType) != after.GetVersion(resource.RouteType) {
		t.Error("new endpoints must change the EDS version only")
	}
	// The same endpoints again change nothing.
	if err := srv.SetEndpoints(ctx, eps); err != nil {
		t.Fatal(err)
	}
	if again, _ := srv.Snapshot("edge-eu"); again.GetVersion(resource.EndpointType) != after.GetVersion(resource.EndpointType) {
		t.Error("same endpoints, new version")
	}
	// Endpoints set between Prepare and commit are in the committed snapshot.
	commit, err := srv.Prepare(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	eps2 := xds.StaticEndpoints(c)
	eps2["eu-west-vllm"] = []xds.Endpoint{{Address: "127.0.0.1:18199", Health: corev3.HealthStatus_HEALTHY}}
	if err := srv.SetEndpoints(ctx, eps2); err != nil {
		t.Fatal(err)
	}
	commit()
	if les := eds(t, srv, "edge-eu", "eu-west-vllm").GetEndpoints()[0].GetLbEndpoints(); len(les) != 1 ||
		les[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue() != 18199 {
		t.Errorf("commit lost the newer endpoints: %v", les)
	}
}
