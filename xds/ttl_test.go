package xds_test

import (
	"context"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/xds"
)

// TestNodesForgottenAfterTTL: a node whose streams all closed is listed
// for envoy.rollout.node_ttl, then forgotten (no longer in Nodes, the
// rollout status or ilb_xds_nodes; counted in
// ilb_xds_nodes_forgotten_total); a connected node is never forgotten,
// and a node that comes back in time is kept. The clock is injected; the
// test waits until the rollout loop has swept with the time it set.
func TestNodesForgottenAfterTTL(t *testing.T) {
	const ttl = 5 * time.Minute
	tests := []struct {
		name string
		// close the node's stream first; come back (a new stream, same
		// id) after back, then wait after more.
		closed      bool
		back, after time.Duration
		listed      bool
	}{
		{"connected, ten TTLs later: kept", false, 0, 10 * ttl, true},
		{"gone for just under the TTL: listed", true, 0, ttl - time.Nanosecond, true},
		{"gone for the TTL: forgotten", true, 0, ttl, false},
		{"gone, back before the TTL, a TTL later: kept", true, ttl - time.Second, 2 * ttl, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, w := demo(t)
			c.Envoy.Rollout.NodeTTL = config.Duration(ttl)
			clock := newFakeClock()
			reg := prometheus.NewRegistry()
			srv, conn := serveXDS(t, xds.Options{Config: c, Registry: reg, Now: clock.Now})
			if err := srv.Publish(context.Background(), w); err != nil {
				t.Fatal(err)
			}
			node := &corev3.Node{Id: "e1", Cluster: "edge-us"}
			env := connect(t, conn, node, nil)
			waitFor(t, func() bool { return env.has(resource.ClusterType, mustVersion(t, srv, resource.ClusterType)) })
			if tc.closed {
				env.close()
				waitFor(t, func() bool { n, ok := nodeStatus(srv, "e1"); return ok && n.Streams == 0 })
				if n, _ := nodeStatus(srv, "e1"); !n.Left.Equal(clock.Now()) {
					t.Errorf("left at %v; want the time its stream closed (%v)", n.Left, clock.Now())
				}
			}
			if tc.back > 0 {
				clock.advance(tc.back)
				env = connect(t, conn, node, nil)
				waitFor(t, func() bool { n, ok := nodeStatus(srv, "e1"); return ok && n.Streams == 1 })
			}
			clock.advance(tc.after)
			// Two reads by the loop: a whole tick ran with the new time.
			reads := clock.readCount()
			waitFor(t, func() bool { return clock.readCount() >= reads+2 })

			n, listed := nodeStatus(srv, "e1")
			want := 0.0
			if tc.listed {
				want = 1
			}
			if listed != tc.listed || sample(t, reg, `ilb_xds_nodes{source="edge-us"}`) != want ||
				sample(t, reg, `ilb_xds_nodes_forgotten_total`) != 1-want || len(rolloutOf(t, srv).Nodes) != int(want) {
				t.Errorf("listed %v (%+v), nodes gauge %v, forgotten %v, rollout nodes %d; want listed %v",
					listed, n, sample(t, reg, `ilb_xds_nodes{source="edge-us"}`), sample(t, reg, `ilb_xds_nodes_forgotten_total`),
					len(rolloutOf(t, srv).Nodes), tc.listed)
			}
			if tc.listed && tc.back > 0 && !n.Left.IsZero() {
				t.Errorf("a node back on a stream has left %v; want zero", n.Left)
			}
		})
	}
}
