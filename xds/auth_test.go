package xds_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ilbproject/ilb/xds"
)

// refuseSource is an Authorizer that refuses one source to every peer and
// records the peers it was asked about (their address, from the stream's
// context).
type refuseSource struct {
	refuse string

	mu    sync.Mutex
	asked []string // "source peer-address"
}

var _ xds.Authorizer = (*refuseSource)(nil)

func (a *refuseSource) Authorize(ctx context.Context, source string) error {
	addr := "no peer in ctx"
	if p, ok := peer.FromContext(ctx); ok {
		addr = p.Addr.String()
	}
	a.mu.Lock()
	a.asked = append(a.asked, source+" "+addr)
	a.mu.Unlock()
	if source == a.refuse {
		return status.Error(codes.PermissionDenied, "this identity may not speak for that source")
	}
	return nil
}

// exchange is one peer's attempt; it returns how many responses the peer
// got and the error that ended it (nil: it was served).
type exchange func(ctx context.Context, conn *grpc.ClientConn) (int, error)

// sotw opens an ADS stream, sends reqs (the first names node) and reads
// one response after each.
func sotw(node *corev3.Node, reqs ...*discoveryv3.DiscoveryRequest) exchange {
	return func(ctx context.Context, conn *grpc.ClientConn) (int, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			return 0, err
		}
		if len(reqs) == 0 {
			reqs = []*discoveryv3.DiscoveryRequest{{TypeUrl: resource.ClusterType}}
		}
		reqs[0].Node = node
		got := 0
		for _, r := range reqs {
			if err := stream.Send(r); err != nil && !errors.Is(err, io.EOF) {
				return got, err
			}
			if _, err := stream.Recv(); err != nil {
				return got, err
			}
			got++
		}
		return got, nil
	}
}

// delta opens a delta ADS stream, subscribes to every cluster as node
// and reads one response.
func delta(node *corev3.Node) exchange {
	return func(ctx context.Context, conn *grpc.ClientConn) (int, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
		if err != nil {
			return 0, err
		}
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"*"}}); err != nil {
			return 0, err
		}
		if _, err := stream.Recv(); err != nil {
			return 0, err
		}
		return 1, nil
	}
}

// fetch calls the unary FetchClusters as node.
func fetch(node *corev3.Node) exchange {
	return func(ctx context.Context, conn *grpc.ClientConn) (int, error) {
		if _, err := clusterservice.NewClusterDiscoveryServiceClient(conn).FetchClusters(ctx, &discoveryv3.DiscoveryRequest{Node: node}); err != nil {
			return 0, err
		}
		return 1, nil
	}
}

// TestPeerAdmission: with an Authorizer that refuses edge-eu, a peer that
// speaks for edge-eu (ADS, delta or Fetch) gets PermissionDenied and no
// resource, and changes nothing: no node record, no NACK counted. The
// Authorizer gets each stream's own context. A stream may not switch to
// another node after its first request.
func TestPeerAdmission(t *testing.T) {
	c, w := demo(t)
	auth := &refuseSource{refuse: "edge-eu"}
	reg := prometheus.NewRegistry()
	srv, conn := serveXDS(t, xds.Options{Config: c, Registry: reg, Authorizer: auth})
	if err := srv.Publish(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	us := func(id string) *corev3.Node { return &corev3.Node{Id: id, Cluster: "edge-us"} }
	eu := &corev3.Node{Id: "eu-1", Cluster: "edge-eu"}
	tests := []struct {
		name     string
		run      exchange
		code     codes.Code
		received int
	}{
		{"ADS stream of an allowed source is served", sotw(us("us-1")), codes.OK, 1},
		{"ADS stream of a refused source", sotw(eu), codes.PermissionDenied, 0},
		{"a refused first request that is a NACK", sotw(eu, &discoveryv3.DiscoveryRequest{
			TypeUrl: resource.ClusterType, ResponseNonce: "1", VersionInfo: "x",
			ErrorDetail: &rpcstatus.Status{Code: 3, Message: "refused peer's NACK"},
		}), codes.PermissionDenied, 0},
		{"delta stream of a refused source", delta(eu), codes.PermissionDenied, 0},
		{"Fetch of an allowed source is served", fetch(us("us-fetch")), codes.OK, 1},
		{"Fetch of a refused source", fetch(eu), codes.PermissionDenied, 0},
		{"a stream switching to a refused source's node", sotw(us("us-2"),
			&discoveryv3.DiscoveryRequest{TypeUrl: resource.ClusterType},
			&discoveryv3.DiscoveryRequest{Node: eu, TypeUrl: resource.ListenerType},
		), codes.InvalidArgument, 1},
		{"a stream switching to another node id", sotw(us("us-3"),
			&discoveryv3.DiscoveryRequest{TypeUrl: resource.ClusterType},
			&discoveryv3.DiscoveryRequest{Node: us("us-4"), TypeUrl: resource.ListenerType},
		), codes.InvalidArgument, 1},
		{"a delta stream whose first request names no node", delta(nil), codes.InvalidArgument, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.run(ctxT(t), conn)
			if status.Code(err) != tc.code || got != tc.received {
				t.Errorf("got %d responses, error %v; want %d and code %s", got, err, tc.received, tc.code)
			}
		})
	}
	for _, n := range srv.Nodes() {
		if n.Cluster != "edge-us" {
			t.Errorf("node %s of %s recorded; a refused peer must leave no record", n.ID, n.Cluster)
		}
	}
	if got := sample(t, reg, `ilb_xds_nacks_total{type="cluster"}`); got != 0 {
		t.Errorf("nacks = %v; a refused peer's NACK must not count", got)
	}
	if got := sample(t, reg, `ilb_xds_nodes{source="edge-eu"}`); got != 0 {
		t.Errorf("edge-eu nodes = %v", got)
	}
	auth.mu.Lock()
	defer auth.mu.Unlock()
	for _, a := range auth.asked {
		source, addr, _ := strings.Cut(a, " ")
		host, _, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" {
			t.Errorf("Authorize(%s) saw peer %q; want the stream's context, with its loopback peer", source, addr)
		}
	}
}

// TestUnknownSourceRefused: a node.cluster that is no source is refused
// with InvalidArgument and a bounded excerpt of the value, never the
// names of the sources; its log line is one per distinct value per
// minute.
func TestUnknownSourceRefused(t *testing.T) {
	c, w := demo(t)
	logs := &logSink{}
	clock := newFakeClock()
	srv, conn := serveXDS(t, xds.Options{Config: c, Logger: logs.logger(), Now: clock.Now})
	if err := srv.Publish(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, cluster string
		want          string // in the message
	}{
		{"a short name", "edge-mars", `node.cluster "edge-mars" is not a source of this ILB`},
		{"a 1 MiB name", "x" + strings.Repeat("edge-us", 1<<20/7), "more bytes"},
		{"control characters", "edge\n\"mars\"", `node.cluster "edge\n\"mars\"" is not a source`},
		{"empty", "", "node.cluster is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for range 2 { // the second attempt is not logged again
				got, err := sotw(&corev3.Node{Id: "x", Cluster: tc.cluster})(ctxT(t), conn)
				st, _ := status.FromError(err)
				msg := st.Message()
				if st.Code() != codes.InvalidArgument || got != 0 || !strings.Contains(msg, tc.want) {
					t.Fatalf("got %d responses, error %v; want InvalidArgument with %q", got, err, tc.want)
				}
				if len(msg) > 200 || strings.Contains(msg, "edge-eu") || strings.Contains(msg, "known sources") {
					t.Errorf("refusal %q (%d bytes): want at most 200 bytes, naming no other source", bounded(msg), len(msg))
				}
			}
		})
	}
	lines := logs.lines(t, "unknown source refused")
	if len(lines) != len(tests) {
		t.Errorf("%d log lines for %d distinct values sent twice each; want one per value", len(lines), len(tests))
	}
	for _, l := range lines {
		if raw := l["_raw"].(string); len(raw) > 512 {
			t.Errorf("log line of %d bytes: %.200s", len(raw), raw)
		}
	}
	clock.advance(time.Minute)
	if _, err := sotw(&corev3.Node{Id: "x", Cluster: "edge-mars"})(ctxT(t), conn); status.Code(err) != codes.InvalidArgument {
		t.Fatal(err)
	}
	if n := len(logs.lines(t, "unknown source refused")); n != len(tests)+1 {
		t.Errorf("%d log lines after a minute; want the value logged again", n)
	}
}

// bounded shortens s for a failure message.
func bounded(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}
