package xds_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/metadata"

	"github.com/ilbproject/ilb/xds"
)

// TestNACKQuorumCountsVoters: the quorum counts voters (Options.Voter:
// in ILB, a peer's verified identity and address), not node ids. A rogue
// peer claiming several node ids and rejecting every version is one
// rejector of the source's voters; it holds its own nodes and bans
// nothing, where counting its node ids would have reached the quorum.
// The voter is read here from a test header each fake Envoy sends.
func TestNACKQuorumCountsVoters(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rogueNodes int // node ids of the rogue voter, all rejecting
		honest     int // voters with one node each, accepting
		quorum     float64
		noVoter    bool // Options.Voter nil: every node id votes
		banned     bool
		rejectors  int
		connected  int
	}{
		{"three node ids of one voter among two honest voters", 3, 2, 0.5, false, false, 0, 0},
		{"ten node ids of one voter among one honest voter", 10, 1, 0.5, false, false, 0, 0},
		{"one voter alone is every voter", 3, 0, 0.5, false, true, 1, 1},
		{"without a voter function node ids vote", 3, 2, 0.5, true, true, 3, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := demo(t)
			c.Envoy.Rollout.NACKQuorum = tc.quorum
			exp := tracetest.NewInMemoryExporter()
			reg := prometheus.NewRegistry()
			o := xds.Options{
				Config: c, Registry: reg, TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)),
			}
			if !tc.noVoter {
				o.Voter = func(ctx context.Context) string {
					md, _ := metadata.FromIncomingContext(ctx)
					return strings.Join(md.Get("x-test-voter"), ",")
				}
			}
			srv, conn := serveXDS(t, o)
			ws := versionsOf(t, c)
			ctx := context.Background()
			if err := srv.Publish(ctx, ws[0]); err != nil {
				t.Fatal(err)
			}
			good := routeVersion(t, srv)
			var mu sync.Mutex
			bad := ""
			rejectBad := func(typ, v string) bool {
				mu.Lock()
				defer mu.Unlock()
				return typ == resource.RouteType && v == bad
			}
			var envs []*fakeEnvoy
			for i := range tc.rogueNodes {
				envs = append(envs, dial(t, conn, &corev3.Node{Id: fmt.Sprintf("rogue-%d", i), Cluster: "edge-us"}, rejectBad, "", "x-test-voter", "rogue"))
			}
			for i := range tc.honest {
				v := fmt.Sprintf("honest-%d", i)
				envs = append(envs, dial(t, conn, &corev3.Node{Id: v, Cluster: "edge-us"}, nil, "", "x-test-voter", v))
			}
			waitFor(t, func() bool {
				for _, e := range envs {
					if !e.has(resource.RouteType, good) {
						return false
					}
				}
				return true
			})
			mu.Lock()
			if err := srv.Publish(ctx, ws[1]); err != nil {
				mu.Unlock()
				t.Fatal(err)
			}
			bad = routeVersion(t, srv)
			mu.Unlock()
			events := nackDecisions(t, exp, bad, tc.rogueNodes)
			bans := strings.Count(strings.Join(events, "\n"), "banned; rolled back")
			st := rolloutOf(t, srv)
			if got := sample(t, reg, `ilb_xds_rollbacks_total{source="edge-us"}`); (got == 1) != tc.banned || bans > 1 || (bans == 1) != tc.banned {
				t.Fatalf("rollbacks %v, decisions %q, rollout %+v; want banned %v", got, events, st, tc.banned)
			}
			if tc.banned {
				if r := st.Rejected[0]; r.Rejectors != tc.rejectors || r.Connected != tc.connected {
					t.Errorf("ban %+v: want %d rejecting voters of %d connected", r, tc.rejectors, tc.connected)
				}
				return
			}
			if st.Held != tc.rogueNodes || routeVersion(t, srv) != bad {
				t.Errorf("rollout %+v; want the rogue's %d nodes held and %s in force", st, tc.rogueNodes, bad)
			}
		})
	}
}
