package xds_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/xds"
)

// TestDepartedNodesBounded: a fleet that replaces its Envoys (new node
// ids at every deploy) leaves at most 1,024 records of departed nodes,
// however long node_ttl is: the longest gone are forgotten first, the
// connected ones never. Waits on the server's own stream gauge, so no
// sleep decides anything.
func TestDepartedNodesBounded(t *testing.T) {
	const departedMax = 1024 // xds.maxDeparted
	tests := []struct {
		name          string
		waves, size   int
		keepConnected int
		wantKnown     int
	}{
		{"fewer than the bound: all kept for node_ttl", 2, 300, 0, 600},
		{"waves past the bound: the newest 1,024 departed kept", 6, 300, 0, departedMax},
		{"connected Envoys are never forgotten", 6, 300, 50, departedMax + 50},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, w := demo(t)
			c.Envoy.Rollout.NodeTTL = config.Duration(24 * 3600 * 1e9)
			reg := prometheus.NewRegistry()
			srv, conn := serveXDS(t, xds.Options{Config: c, Registry: reg})
			if err := srv.Publish(context.Background(), w); err != nil {
				t.Fatal(err)
			}
			cds := mustVersion(t, srv, resource.ClusterType)
			for i := range tc.keepConnected {
				e := connect(t, conn, &corev3.Node{Id: fmt.Sprintf("stays-%d", i), Cluster: "edge-us"}, nil)
				waitFor(t, func() bool { return e.has(resource.ClusterType, cds) })
			}
			for wave := range tc.waves {
				var envs []*fakeEnvoy
				for i := range tc.size {
					envs = append(envs, connect(t, conn, &corev3.Node{Id: fmt.Sprintf("w%d-%d", wave, i), Cluster: "edge-us"}, nil))
				}
				for _, e := range envs {
					waitFor(t, func() bool { return e.has(resource.ClusterType, cds) })
				}
				for _, e := range envs {
					e.close()
				}
				// The server has seen every stream of the wave close.
				waitFor(t, func() bool { return sample(t, reg, "ilb_xds_streams") == float64(tc.keepConnected) })
			}
			nodes := srv.Nodes()
			stays, newest := 0, false
			for _, n := range nodes {
				if strings.HasPrefix(n.ID, "stays-") && n.Streams == 1 {
					stays++
				}
				if n.ID == fmt.Sprintf("w%d-%d", tc.waves-1, tc.size-1) {
					newest = true
				}
			}
			if len(nodes) != tc.wantKnown || stays != tc.keepConnected || !newest {
				t.Errorf("%d nodes known (%d connected, the last to leave listed: %v); want %d, all %d connected ones, and the last to leave",
					len(nodes), stays, newest, tc.wantKnown, tc.keepConnected)
			}
			if got := sample(t, reg, `ilb_xds_nodes{source="edge-us"}`); got != float64(tc.wantKnown) {
				t.Errorf("ilb_xds_nodes sums to %v; want %d", got, tc.wantKnown)
			}
		})
	}
}
