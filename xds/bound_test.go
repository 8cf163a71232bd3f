package xds_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ilbproject/ilb/xds"
)

// TestPeerStringsBounded: an Envoy with a 64 KiB node id whose NACK
// carries a 1 MiB message leaves bounded strings everywhere ILB keeps or
// shows them: the node status and rollout status (/debug/xds and
// /debug/rollout JSON), log lines and span attributes. Two long ids with
// the same head stay two nodes.
func TestPeerStringsBounded(t *testing.T) {
	c, _ := demo(t)
	logs := &logSink{}
	exp := tracetest.NewInMemoryExporter()
	srv, conn := serveXDS(t, xds.Options{
		Config: c, Logger: logs.logger(),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)),
	})
	ws := versionsOf(t, c)
	if err := srv.Publish(context.Background(), ws[0]); err != nil {
		t.Fatal(err)
	}
	head := strings.Repeat("n", 64<<10)
	message := strings.Repeat("m", 1<<20)
	// Both reject every route version: one of two is a quorum, so the
	// version is banned and its NACK kept in the rollout status too.
	reject := func(typ, _ string) bool { return typ == resource.RouteType }
	dial(t, conn, &corev3.Node{Id: head + "1", Cluster: "edge-us"}, reject, message)
	dial(t, conn, &corev3.Node{Id: head + "2", Cluster: "edge-us"}, reject, message)
	waitFor(t, func() bool {
		ns := srv.Nodes()
		return len(ns) == 2 && ns[0].LastNACK != nil && ns[1].LastNACK != nil && len(rolloutOf(t, srv).Rejected) == 1
	})

	const maxID, maxMessage = 320, 1100
	nodes, rollouts := srv.Nodes(), srv.Rollouts()
	if nodes[0].ID == nodes[1].ID {
		t.Errorf("two ids with the same 64 KiB head share the record %q", nodes[0].ID)
	}
	for _, n := range nodes {
		if len(n.ID) > maxID || !strings.Contains(n.ID, "65537 bytes") || len(n.LastNACK.Message) > maxMessage || len(n.LastNACK.Node) > maxID {
			t.Errorf("node status: id %d bytes (%.80q), NACK message %d bytes; want at most %d and %d", len(n.ID), n.ID, len(n.LastNACK.Message), maxID, maxMessage)
		}
	}
	for _, what := range []any{nodes, rollouts} {
		b, err := json.Marshal(what)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 16<<10 {
			t.Errorf("%T as JSON is %d bytes; want at most 16 KiB", what, len(b))
		}
	}
	for _, l := range logs.lines(t, "") {
		if raw := l["_raw"].(string); len(raw) > 4<<10 {
			t.Errorf("log line of %d bytes: %.200s", len(raw), raw)
		}
	}
	spans := spansNamed(exp, "ilb.xds.nack")
	if len(spans) == 0 {
		t.Fatal("no NACK span")
	}
	for _, s := range spans {
		if len(s.Status.Description) > maxMessage {
			t.Errorf("span status of %d bytes", len(s.Status.Description))
		}
		for k, v := range spanAttrs(s.Snapshot()) {
			if len(v) > maxMessage {
				t.Errorf("span attribute %s of %d bytes", k, len(v))
			}
		}
		for _, e := range s.Events {
			for _, kv := range e.Attributes {
				if len(kv.Value.String()) > maxMessage {
					t.Errorf("span event %s attribute %s of %d bytes", e.Name, kv.Key, len(kv.Value.String()))
				}
			}
		}
	}
}
