package xds_test

import (
	"context"
	"fmt"
	"slices"
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
	"google.golang.org/grpc/metadata"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
	"github.com/ilbproject/ilb/xds"
)

// fakeEnvoy is an ADS client that plays Envoy's side of state-of-the-world
// ADS: it subscribes to CDS and LDS, then EDS and RDS for what they name,
// and ACKs every response — or NACKs the ones reject says, answering with
// the version it last accepted, as Envoy does.
type fakeEnvoy struct {
	t       *testing.T
	stream  discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	reject  func(typ, version string) bool
	message string // of its NACKs
	cancel  context.CancelFunc
	done    chan struct{} // closed when the stream ended

	mu       sync.Mutex
	accepted map[string]string
	routes   []string // the version of every route response, in order
	eds, rds bool
}

func connect(t *testing.T, conn *grpc.ClientConn, node *corev3.Node, reject func(typ, version string) bool) *fakeEnvoy {
	t.Helper()
	return dial(t, conn, node, reject, "")
}

// dial connects a fakeEnvoy whose NACKs carry message ("fake envoy
// refuses <version>" when empty); md are gRPC metadata pairs its stream
// sends.
func dial(t *testing.T, conn *grpc.ClientConn, node *corev3.Node, reject func(typ, version string) bool, message string, md ...string) *fakeEnvoy {
	t.Helper()
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), md...))
	t.Cleanup(cancel)
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := &fakeEnvoy{
		t: t, stream: stream, reject: reject, message: message, cancel: cancel, done: make(chan struct{}),
		accepted: map[string]string{},
	}
	for _, typ := range []string{resource.ClusterType, resource.ListenerType} {
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typ}); err != nil {
			t.Fatal(err)
		}
	}
	go e.loop()
	return e
}

// close ends the fake's stream and waits until it is over on its side.
func (e *fakeEnvoy) close() {
	e.cancel()
	<-e.done
}

func (e *fakeEnvoy) loop() {
	defer close(e.done)
	for {
		resp, err := e.stream.Recv()
		if err != nil {
			return
		}
		typ, v := resp.GetTypeUrl(), resp.GetVersionInfo()
		e.mu.Lock()
		if typ == resource.RouteType {
			e.routes = append(e.routes, v)
		}
		nack := e.reject != nil && e.reject(typ, v)
		req := &discoveryv3.DiscoveryRequest{TypeUrl: typ, ResponseNonce: resp.GetNonce(), VersionInfo: v, ResourceNames: names(resp)}
		if nack {
			msg := e.message
			if msg == "" {
				msg = "fake envoy refuses " + v
			}
			req.VersionInfo = e.accepted[typ]
			req.ErrorDetail = &status.Status{Code: 3, Message: msg}
		} else {
			e.accepted[typ] = v
		}
		var more []*discoveryv3.DiscoveryRequest
		if typ == resource.ClusterType && !e.eds {
			e.eds = true
			more = append(more, &discoveryv3.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names(resp)})
		}
		if typ == resource.ListenerType && !e.rds {
			e.rds = true
			more = append(more, &discoveryv3.DiscoveryRequest{TypeUrl: resource.RouteType, ResourceNames: []string{xds.RouteConfigName}})
		}
		e.mu.Unlock()
		if typ == resource.ClusterType || typ == resource.ListenerType {
			req.ResourceNames = nil // wildcard
		}
		for _, r := range append([]*discoveryv3.DiscoveryRequest{req}, more...) {
			if err := e.stream.Send(r); err != nil {
				return
			}
		}
	}
}

// routeLog is the version of every route response the fake received, in
// the order of the stream.
func (e *fakeEnvoy) routeLog() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.routes)
}

// names lists the clusters of a CDS response (EDS names them too).
func names(resp *discoveryv3.DiscoveryResponse) []string {
	if resp.GetTypeUrl() != resource.ClusterType {
		if resp.GetTypeUrl() == resource.RouteType {
			return []string{xds.RouteConfigName}
		}
		var out []string
		for range resp.GetResources() {
		}
		return out
	}
	var out []string
	for _, a := range resp.GetResources() {
		var c clusterv3.Cluster
		if err := a.UnmarshalTo(&c); err == nil {
			out = append(out, c.GetName())
		}
	}
	return out
}

func (e *fakeEnvoy) has(typ, version string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.accepted[typ] == version
}

func startRollout(t *testing.T, c *config.Config) (*xds.Server, *grpc.ClientConn, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	srv, conn := serveXDS(t, xds.Options{Config: c, Registry: reg})
	return srv, conn, reg
}

// versionsOf are the three weights versions the rollout tests publish.
func versionsOf(t *testing.T, c *config.Config) []*weights.Weights {
	t.Helper()
	in := weights.Input{Config: c, Clusters: weights.StaticState(c)}
	var out []*weights.Weights
	for _, p := range []weights.Policy{weights.Proportional{}, weights.RoundRobin{}, weights.Waterfall{}} {
		w, err := p.Compute(in)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, w)
	}
	return out
}

func routeVersion(t *testing.T, srv *xds.Server) string {
	const source = "edge-us"
	t.Helper()
	snap, err := srv.Snapshot(source)
	if err != nil {
		t.Fatal(err)
	}
	return snap.GetVersion(resource.RouteType)
}

// TestNACKRollsBackWithoutLoop: the only Envoy of a source (a quorum by
// itself) rejects a new route version: the version is banned and the
// source rolled back to the last version it acknowledged. The rejected
// version is sent once: not in a loop, nor again when the controller
// publishes the same content. Proven by the order of the stream: the next
// route response after it is the next new version.
func TestNACKRollsBackWithoutLoop(t *testing.T) {
	c, _ := demo(t)
	srv, conn, reg := startRollout(t, c)
	ws := versionsOf(t, c)
	ctx := context.Background()
	if err := srv.Publish(ctx, ws[0]); err != nil {
		t.Fatal(err)
	}
	good := routeVersion(t, srv)
	// The fake Envoy refuses every route version but the good one: the
	// bad version's name is only known after Publish, and Envoy may get it
	// before Publish returns.
	env := connect(t, conn, &corev3.Node{Id: "e1", Cluster: "edge-us"}, func(typ, v string) bool {
		return typ == resource.RouteType && v != good
	})
	waitFor(t, func() bool {
		return env.has(resource.RouteType, good) && env.has(resource.EndpointType, mustVersion(t, srv, resource.EndpointType))
	})
	waitFor(t, func() bool { return rolloutOf(t, srv).LastGood["route"] == good }) // the rollback target

	if err := srv.Publish(ctx, ws[1]); err != nil {
		t.Fatal(err)
	}
	// The NACK and the rollback may land before Publish returns: read the
	// rejected version from the rollout status.
	waitFor(t, func() bool { return len(rolloutOf(t, srv).Rejected) == 1 && routeVersion(t, srv) == good })
	st := rolloutOf(t, srv)
	bad := st.Rejected[0].Version
	if bad == good {
		t.Fatal("the second weights did not change the routes")
	}
	if r := st.Rejected[0]; !strings.Contains(r.Message, "fake envoy refuses") || r.Node != "e1" || r.By != "quorum" || r.Rejectors != 1 || r.Connected != 1 {
		t.Errorf("rejected %+v; want e1's NACK, banned by a quorum of 1 of 1", r)
	}
	// The same content again changes nothing; a third version is sent.
	if err := srv.Publish(ctx, ws[1]); err != nil {
		t.Fatal(err)
	}
	if routeVersion(t, srv) != good {
		t.Error("a banned version was published again")
	}
	if err := srv.Publish(ctx, ws[2]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(rolloutOf(t, srv).Rejected) == 2 })
	third := rolloutOf(t, srv).Rejected[1].Version
	if got, want := env.routeLog(), []string{good, bad, third}; !slices.Equal(got, want) {
		t.Errorf("route responses %v; want %v: each version once, the banned one never again", got, want)
	}
	if got := sample(t, reg, `ilb_xds_rollbacks_total{source="edge-us"}`); got != 2 {
		t.Errorf("rollbacks = %v; want 2", got)
	}
}

// TestCanaryPromotesAndHolds: with canaries, a new version reaches them
// first, then everyone once they ACKed it and it soaked; a version a
// canary rejects is held back and the canaries roll back.
func TestCanaryPromotesAndHolds(t *testing.T) {
	c, _ := demo(t)
	c.Envoy.Rollout = config.Rollout{CanaryPercent: 50, Soak: config.Duration(300 * time.Millisecond)}
	srv, conn, reg := startRollout(t, c)
	canaryID, mainID := "", ""
	for i := 0; canaryID == "" || mainID == ""; i++ {
		id := fmt.Sprintf("envoy-%d", i)
		if xds.CanaryNode(id, 50) {
			canaryID = id
		} else {
			mainID = id
		}
	}
	ws := versionsOf(t, c)
	ctx := context.Background()
	if err := srv.Publish(ctx, ws[0]); err != nil {
		t.Fatal(err)
	}
	v1 := routeVersion(t, srv)
	var rejectV3 string
	var mu sync.Mutex
	canary := connect(t, conn, &corev3.Node{Id: canaryID, Cluster: "edge-us"}, func(typ, v string) bool {
		mu.Lock()
		defer mu.Unlock()
		return typ == resource.RouteType && v == rejectV3
	})
	main := connect(t, conn, &corev3.Node{Id: mainID, Cluster: "edge-us"}, nil)
	waitFor(t, func() bool { return canary.has(resource.RouteType, v1) && main.has(resource.RouteType, v1) })

	// v2 goes to the canary only; v3, published during the soak, joins
	// the rollout without restarting the soak; then everyone gets v3.
	if err := srv.Publish(ctx, ws[1]); err != nil {
		t.Fatal(err)
	}
	st := rolloutOf(t, srv)
	v2 := st.Canary["route"]
	if !st.Pending || v2 == "" || v2 == v1 || st.Stable["route"] != v1 {
		t.Fatalf("after publish: %+v", st)
	}
	waitFor(t, func() bool { return canary.has(resource.RouteType, v2) })
	if main.has(resource.RouteType, v2) {
		t.Error("a non-canary got the version before its promotion")
	}
	if err := srv.Publish(ctx, ws[2]); err != nil {
		t.Fatal(err)
	}
	st3 := rolloutOf(t, srv)
	v3 := st3.Canary["route"]
	if !st3.Pending || v3 == v2 || !st3.Since.Equal(st.Since) {
		t.Errorf("a version during the soak must join the rollout, soak start kept: before %+v, after %+v", st, st3)
	}
	waitFor(t, func() bool { return main.has(resource.RouteType, v3) })
	if st := rolloutOf(t, srv); st.Pending || st.Stable["route"] != v3 {
		t.Errorf("after promotion: %+v", st)
	}
	if got := sample(t, reg, `ilb_xds_canary_promotions_total{source="edge-us"}`); got != 1 {
		t.Errorf("promotions = %v", got)
	}

	// v2 again: the canary rejects it; it is held, the canary rolled back.
	mu.Lock()
	rejectV3 = v2
	mu.Unlock()
	if err := srv.Publish(ctx, ws[1]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		st := rolloutOf(t, srv)
		return !st.Pending && len(st.Rejected) == 1 && st.Rejected[0].Version == v2 && st.Rejected[0].By == "canary"
	})
	time.Sleep(3 * 300 * time.Millisecond) // more than the soak
	if main.has(resource.RouteType, v2) || !main.has(resource.RouteType, v3) || !canary.has(resource.RouteType, v3) {
		t.Errorf("a rejected canary version went further, or the canary was not rolled back")
	}
	if st := rolloutOf(t, srv); st.Stable["route"] != v3 {
		t.Errorf("stable after the held rollout: %+v", st)
	}
}

func rolloutOf(t *testing.T, srv *xds.Server) xds.RolloutStatus {
	const source = "edge-us"
	t.Helper()
	for _, st := range srv.Rollouts() {
		if st.Source == source {
			return st
		}
	}
	t.Fatalf("no rollout for %s", source)
	return xds.RolloutStatus{}
}

func mustVersion(t *testing.T, srv *xds.Server, typ string) string {
	t.Helper()
	snap, err := srv.Snapshot("edge-us")
	if err != nil {
		t.Fatal(err)
	}
	return snap.GetVersion(typ)
}
