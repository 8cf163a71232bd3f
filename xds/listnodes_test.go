package xds_test

import (
	"context"
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/xds"
)

// TestListNodesPages: a node listing is bounded and pages by source and
// node id, with the source's total; NodeCounts counts every node.
func TestListNodesPages(t *testing.T) {
	c, w := demo(t)
	reg := prometheus.NewRegistry()
	srv, conn := serveXDS(t, xds.Options{Config: c, Registry: reg})
	if err := srv.Publish(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	for source, n := range map[string]int{"edge-us": 5, "edge-eu": 2} {
		for i := range n {
			e := connect(t, conn, &corev3.Node{Id: fmt.Sprintf("%s-%d", source, i), Cluster: source}, nil)
			snap, err := srv.Snapshot(source)
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return e.has(resource.ClusterType, snap.GetVersion(resource.ClusterType)) })
		}
	}
	tests := []struct {
		name      string
		q         xds.NodeQuery
		wantIDs   []string
		wantTotal int
	}{
		{"default: every node, by source then id", xds.NodeQuery{}, []string{"edge-eu-0", "edge-eu-1", "edge-us-0", "edge-us-1", "edge-us-2", "edge-us-3", "edge-us-4"}, 7},
		{"one source, first page", xds.NodeQuery{Source: "edge-us", Limit: 2}, []string{"edge-us-0", "edge-us-1"}, 5},
		{"one source, next page", xds.NodeQuery{Source: "edge-us", Limit: 2, After: "edge-us-1"}, []string{"edge-us-2", "edge-us-3"}, 5},
		{"one source, last page", xds.NodeQuery{Source: "edge-us", Limit: 2, After: "edge-us-3"}, []string{"edge-us-4"}, 5},
		{"all sources, limited", xds.NodeQuery{Limit: 3}, []string{"edge-eu-0", "edge-eu-1", "edge-us-0"}, 7},
		{"an unknown source: none", xds.NodeQuery{Source: "nowhere"}, nil, 0},
		{"a limit past the cap is capped", xds.NodeQuery{Source: "edge-eu", Limit: 1 << 30}, []string{"edge-eu-0", "edge-eu-1"}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			page, total := srv.ListNodes(tc.q)
			var ids []string
			for _, n := range page {
				ids = append(ids, n.ID)
			}
			if fmt.Sprint(ids) != fmt.Sprint(tc.wantIDs) || total != tc.wantTotal {
				t.Errorf("ids %v, total %d; want %v, %d", ids, total, tc.wantIDs, tc.wantTotal)
			}
		})
	}
	if known, connected := srv.NodeCounts(); known != 7 || connected != 7 {
		t.Errorf("NodeCounts %d known, %d connected; want 7, 7", known, connected)
	}
	for _, r := range srv.Rollouts() {
		if want := map[string]int{"edge-us": 5, "edge-eu": 2}[r.Source]; r.Known != want || len(r.Nodes) != want {
			t.Errorf("rollout of %s: known %d, %d listed; want %d", r.Source, r.Known, len(r.Nodes), want)
		}
	}
}
