package xds_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
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

	"github.com/ilbproject/ilb/internal/promtest"
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

// logSink collects JSON log lines; safe for concurrent use.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logSink) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// lines are the records logged so far whose message contains msg ("" for
// all), decoded, with the raw line under "_raw".
func (l *logSink) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(l.buf.Bytes(), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m, _ := rec["msg"].(string); strings.Contains(m, msg) {
			rec["_raw"] = string(line)
			out = append(out, rec)
		}
	}
	return out
}

// sample is the value of one series in reg's Prometheus text exposition,
// named as it is printed (name{labels}); it fails when the series is not
// there.
func sample(t *testing.T, reg *prometheus.Registry, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(string(promtest.Exposition(t, reg)), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("series %s: %v", series, err)
			}
			return v
		}
	}
	t.Fatalf("no series %s in the exposition", series)
	return 0
}

// fakeClock is a clock the test moves; it counts the reads, so that a
// test can wait for the rollout loop to have read it (the loop is the
// only reader while no stream talks).
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	reads int
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) readCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

// nodeStatus is the status of one node of edge-us, and whether it is
// listed.
func nodeStatus(srv *xds.Server, id string) (xds.NodeStatus, bool) {
	for _, n := range srv.Nodes() {
		if n.ID == id {
			return n, true
		}
	}
	return xds.NodeStatus{}, false
}
