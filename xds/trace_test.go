package xds_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ilbproject/ilb/xds"
)

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	out := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value.String()
	}
	return out
}

func spansNamed(exp *tracetest.InMemoryExporter, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// TestPublishAndNACKSpans: a publication is an "ilb.xds.publish" span with
// one "ilb.xds.push" child per source carrying the snapshot's versions; a
// NACK is an "ilb.xds.nack" span with Envoy's message as its error.
func TestPublishAndNACKSpans(t *testing.T) {
	c, _ := demo(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	srv, conn := serveXDS(t, xds.Options{Config: c, TracerProvider: tp})
	ctx := context.Background()
	ws := versionsOf(t, c)
	if err := srv.Publish(ctx, ws[0]); err != nil {
		t.Fatal(err)
	}
	pub := spansNamed(exp, "ilb.xds.publish")
	if len(pub) != 1 {
		t.Fatalf("publish spans %d; want 1", len(pub))
	}
	pushes := spansNamed(exp, "ilb.xds.push")
	if len(pushes) != len(c.Sources) {
		t.Fatalf("push spans %d; want one per source (%d)", len(pushes), len(c.Sources))
	}
	for _, p := range pushes {
		a := spanAttrs(p.Snapshot())
		snap, err := srv.Snapshot(a["ilb.source"])
		if err != nil {
			t.Fatal(err)
		}
		if p.Parent.SpanID() != pub[0].SpanContext.SpanID() || a["ilb.xds.action"] != "all" ||
			a["ilb.xds.version.route"] != snap.GetVersion(resource.RouteType) || a["ilb.xds.version.cluster"] != snap.GetVersion(resource.ClusterType) {
			t.Errorf("push span %v (parent %s); want a child of the publish span with action all and the snapshot's versions", a, p.Parent.SpanID())
		}
	}

	good := routeVersion(t, srv)
	var bad string
	var mu sync.Mutex
	env := connect(t, conn, &corev3.Node{Id: "e1", Cluster: "edge-us"}, func(typ, v string) bool {
		mu.Lock()
		defer mu.Unlock()
		return typ == resource.RouteType && v == bad
	})
	waitFor(t, func() bool { return env.has(resource.RouteType, good) })
	waitFor(t, func() bool { return rolloutOf(t, srv).LastGood["route"] == good })
	mu.Lock()
	if err := srv.Publish(ctx, ws[1]); err != nil {
		mu.Unlock()
		t.Fatal(err)
	}
	bad = routeVersion(t, srv)
	mu.Unlock()
	waitFor(t, func() bool { return len(spansNamed(exp, "ilb.xds.nack")) > 0 })
	n := spansNamed(exp, "ilb.xds.nack")[0]
	a := spanAttrs(n.Snapshot())
	if n.Status.Code != codes.Error || !strings.Contains(n.Status.Description, "fake envoy refuses "+bad) {
		t.Errorf("nack status %+v; want an error with Envoy's message", n.Status)
	}
	if a["ilb.xds.node"] != "e1" || a["ilb.xds.type"] != "route" || a["ilb.xds.version"] != bad || a["ilb.source"] != "edge-us" {
		t.Errorf("nack attributes %v", a)
	}
	var events []string
	for _, e := range n.Events {
		events = append(events, e.Name)
	}
	if got := strings.Join(events, ","); !strings.Contains(got, "envoy.nack") || !strings.Contains(got, "rolled back") {
		t.Errorf("nack events %q; want envoy.nack and the rollback", got)
	}
}
