package xds_test

import (
	"context"
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/ilbproject/ilb/xds"
)

// TestNACKingNodeIsHeldWithoutLoop: one Envoy of three rejects every
// route version. Below the quorum, only that node is held: it is never
// sent a version twice (its route responses, in stream order, are each
// new version once: nothing came in between), the two other Envoys stay
// on the newest routes throughout, nothing is banned or rolled back, and
// each rejection is one WARN line.
func TestNACKingNodeIsHeldWithoutLoop(t *testing.T) {
	c, _ := demo(t)
	logs := &logSink{}
	reg := prometheus.NewRegistry()
	srv, conn := serveXDS(t, xds.Options{Config: c, Registry: reg, Logger: logs.logger()})
	ws := versionsOf(t, c)
	ctx := context.Background()
	if err := srv.Publish(ctx, ws[0]); err != nil {
		t.Fatal(err)
	}
	want := []string{routeVersion(t, srv)}
	a := connect(t, conn, &corev3.Node{Id: "e-a", Cluster: "edge-us"}, nil)
	b := connect(t, conn, &corev3.Node{Id: "e-b", Cluster: "edge-us"}, nil)
	waitFor(t, func() bool { return a.has(resource.RouteType, want[0]) && b.has(resource.RouteType, want[0]) })
	bad := connect(t, conn, &corev3.Node{Id: "e-bad", Cluster: "edge-us"}, func(typ, _ string) bool {
		return typ == resource.RouteType
	})
	rejected := func(v string) func() bool {
		return func() bool {
			n, ok := nodeStatus(srv, "e-bad")
			return ok && n.LastNACK != nil && n.LastNACK.Version == v
		}
	}
	waitFor(t, rejected(want[0]))

	for _, w := range ws[1:] {
		if err := srv.Publish(ctx, w); err != nil {
			t.Fatal(err)
		}
		v := routeVersion(t, srv)
		if v == want[len(want)-1] {
			t.Fatal("a publication did not change the routes")
		}
		want = append(want, v)
		waitFor(t, func() bool { return a.has(resource.RouteType, v) && b.has(resource.RouteType, v) })
		waitFor(t, rejected(v))
		if got := routeVersion(t, srv); got != v {
			t.Fatalf("routes in force %s after the NACK; want %s still (no rollback below the quorum)", got, v)
		}
	}
	for name, e := range map[string]*fakeEnvoy{"e-bad": bad, "e-a": a, "e-b": b} {
		if got := e.routeLog(); !slices.Equal(got, want) {
			t.Errorf("%s got route versions %v; want each new version once: %v", name, got, want)
		}
	}
	st := rolloutOf(t, srv)
	last := want[len(want)-1]
	if len(st.Rejected) != 0 || st.Stable["route"] != last || st.Connected != 3 || st.Held != 1 {
		t.Errorf("rollout %+v; want nothing banned, the newest routes, 3 connected, 1 held", st)
	}
	n, _ := nodeStatus(srv, "e-bad")
	if len(n.Held) != 1 || n.Held[0].Type != "route" || n.Held[0].Rejected != last || n.Held[0].Keeps != "" {
		t.Errorf("e-bad holds %+v; want the route version %s, keeping none", n.Held, last)
	}
	if got := sample(t, reg, `ilb_xds_rollbacks_total{source="edge-us"}`); got != 0 {
		t.Errorf("rollbacks = %v; want 0", got)
	}
	if got := sample(t, reg, `ilb_xds_nacks_total{type="route"}`); got != float64(len(want)) {
		t.Errorf("route NACKs = %v; want %d, one per version", got, len(want))
	}
	waitFor(t, func() bool { return sample(t, reg, `ilb_xds_nodes_held{source="edge-us"}`) == 1 })
	if got := sample(t, reg, `ilb_xds_nodes{source="edge-us"}`); got != 3 {
		t.Errorf("nodes = %v; want 3", got)
	}
	warns := logs.lines(t, "an Envoy rejected a version")
	if len(warns) != len(want) {
		t.Errorf("%d rejection log lines; want one per version (%d)", len(warns), len(want))
	}
	for _, l := range warns {
		if l["level"] != "WARN" || l["node"] != "e-bad" {
			t.Errorf("rejection log line %v", l["_raw"])
		}
	}
}

// TestDeltaNACKDoesNotLoop: over delta ADS, a node that rejects a route
// version gets nothing until the content changes: the next message on its
// stream is the next version (go-control-plane's delta server remembers
// what it sent, NACKed or not).
func TestDeltaNACKDoesNotLoop(t *testing.T) {
	c, _ := demo(t)
	reg := prometheus.NewRegistry()
	srv, conn := serveXDS(t, xds.Options{Config: c, Registry: reg})
	ws := versionsOf(t, c)
	ctx := context.Background()
	if err := srv.Publish(ctx, ws[0]); err != nil {
		t.Fatal(err)
	}
	v := routeVersion(t, srv)
	// Two SOTW Envoys that accept everything keep the delta node below
	// the ban quorum.
	a := connect(t, conn, &corev3.Node{Id: "e-a", Cluster: "edge-us"}, nil)
	b := connect(t, conn, &corev3.Node{Id: "e-b", Cluster: "edge-us"}, nil)
	waitFor(t, func() bool { return a.has(resource.RouteType, v) && b.has(resource.RouteType, v) })

	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{
		Node: &corev3.Node{Id: "e-delta", Cluster: "edge-us"}, TypeUrl: resource.RouteType,
		ResourceNamesSubscribe: []string{xds.RouteConfigName},
	}); err != nil {
		t.Fatal(err)
	}
	for i, w := range slices.Concat(ws[1:], ws[:1]) {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetTypeUrl() != resource.RouteType || resp.GetSystemVersionInfo() != v || len(resp.GetResources()) != 1 {
			t.Fatalf("response %d: %s version %s with %d resources; want the routes, version %s", i, resp.GetTypeUrl(), resp.GetSystemVersionInfo(), len(resp.GetResources()), v)
		}
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{
			TypeUrl: resource.RouteType, ResponseNonce: resp.GetNonce(),
			ErrorDetail: &rpcstatus.Status{Code: 3, Message: "delta envoy refuses " + v},
		}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			n, ok := nodeStatus(srv, "e-delta")
			return ok && n.LastNACK != nil && n.LastNACK.Version == v
		})
		if err := srv.Publish(ctx, w); err != nil {
			t.Fatal(err)
		}
		v = routeVersion(t, srv)
	}
	// The content went back to the first version: it is sent, once.
	if resp, err := stream.Recv(); err != nil || resp.GetSystemVersionInfo() != v {
		t.Fatalf("after the content changed back: %v, %v; want version %s", resp, err, v)
	}
	if st := rolloutOf(t, srv); len(st.Rejected) != 0 {
		t.Errorf("banned %+v; one node of three is below the quorum", st.Rejected)
	}
	if got := sample(t, reg, `ilb_xds_nacks_total{type="route"}`); got != 3 {
		t.Errorf("route NACKs = %v; want 3", got)
	}
}
