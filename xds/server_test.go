package xds_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ilbproject/ilb/xds"
)

// serveXDS runs a real xDS server built from o on loopback until the test
// ends, and returns it with a client connection to it.
func serveXDS(t *testing.T, o xds.Options) (*xds.Server, *grpc.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := xds.New(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv, conn
}

// startServer runs a real xDS server on loopback with the demo weights.
func startServer(t *testing.T) (*xds.Server, discoveryv3.AggregatedDiscoveryServiceClient) {
	t.Helper()
	c, w := demo(t)
	srv, conn := serveXDS(t, xds.Options{Config: c, Registry: prometheus.NewRegistry()})
	if err := srv.Publish(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	return srv, discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestADSStateOfTheWorld(t *testing.T) {
	srv, client := startServer(t)
	stream, err := client.StreamAggregatedResources(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "envoy-eu-1", Cluster: "edge-eu"}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range resp.GetResources() {
		var c clusterv3.Cluster
		if err := a.UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		names = append(names, c.GetName())
	}
	if strings.Join(names, ",") != "eu-west-vllm,eu-west-tgi" && strings.Join(names, ",") != "eu-west-tgi,eu-west-vllm" {
		t.Errorf("edge-eu clusters = %v", names)
	}
	snap, _ := srv.Snapshot("edge-eu")
	if resp.GetVersionInfo() != snap.GetVersion(resource.ClusterType) {
		t.Errorf("version %q; want the snapshot's %q", resp.GetVersionInfo(), snap.GetVersion(resource.ClusterType))
	}

	// ACK the clusters, then NACK the listener: both are tracked.
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	lresp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if lresp.GetTypeUrl() != resource.ListenerType || len(lresp.GetResources()) != 1 {
		t.Fatalf("listener response = %v", lresp)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{
		TypeUrl: resource.ListenerType, ResponseNonce: lresp.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: "unknown filter envoy.filters.http.foo"},
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		ns := srv.Nodes()
		return len(ns) == 1 && ns[0].Acked["cluster"] == resp.GetVersionInfo() && ns[0].LastNACK != nil
	})
	n := srv.Nodes()[0]
	if n.Cluster != "edge-eu" || n.LastNACK.Type != "listener" || n.LastNACK.Version != lresp.GetVersionInfo() || !strings.Contains(n.LastNACK.Message, "unknown filter") {
		t.Errorf("node status = %+v, nack %+v", n, n.LastNACK)
	}
}

func TestADSDelta(t *testing.T) {
	_, client := startServer(t)
	stream, err := client.DeltaAggregatedResources(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{
		Node: &corev3.Node{Id: "envoy-us-1", Cluster: "edge-us"}, TypeUrl: resource.ClusterType,
		ResourceNamesSubscribe: []string{"*"},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := len(resp.GetResources()); got != 4 {
		t.Errorf("edge-us got %d clusters over delta ADS; want 4", got)
	}
}

func TestADSRefusesUnknownSource(t *testing.T) {
	_, client := startServer(t)
	stream, err := client.StreamAggregatedResources(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "x", Cluster: "edge-mars"}, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if err == nil || !strings.Contains(err.Error(), `node.cluster "edge-mars" is not a source of this ILB (known sources: edge-us, edge-eu)`) {
		t.Errorf("Recv error = %v; want the unknown source named", err)
	}
}

// waitFor polls cond until it holds; the deadline is generous because
// `go test -race ./...` runs CPU-heavy packages (sim/experiment) alongside
// on 2 cores.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 20s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
