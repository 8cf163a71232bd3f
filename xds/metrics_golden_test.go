package xds_test

import (
	"context"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/internal/promtest"
	"github.com/ilbproject/ilb/xds"
)

// TestMetricsGolden: the exposition of the xDS server's metrics after one
// publish and one Envoy of edge-us that acknowledged its clusters and
// listener, compared with a golden file.
func TestMetricsGolden(t *testing.T) {
	c, w := demo(t)
	reg := prometheus.NewRegistry()
	srv, conn := serveXDS(t, xds.Options{Config: c, Registry: reg})
	if err := srv.Publish(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "envoy-us-1", Cluster: "edge-us"}
	for _, typ := range []string{resource.ClusterType, resource.ListenerType} {
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typ}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: typ, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool {
		ns := srv.Nodes()
		return len(ns) == 1 && ns[0].Acked["cluster"] != "" && ns[0].Acked["listener"] != ""
	})
	promtest.Golden(t, promtest.Exposition(t, reg), "testdata/metrics.golden", *update)
}
