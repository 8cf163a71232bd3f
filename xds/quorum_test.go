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

	"github.com/ilbproject/ilb/xds"
)

// TestNACKQuorum: a version is banned for the source, and the source
// rolled back, only when more than nack_quorum of its connected Envoys
// rejected it; below that, the Envoys that rejected it are held and the
// others keep it. The decision of each NACK is read from its span
// ("ilb.xds.nack", ended once decided), so no test waits for something
// not to happen.
func TestNACKQuorum(t *testing.T) {
	tests := []struct {
		name    string
		quorum  float64
		nackers int // of three Envoys
		banned  bool
	}{
		{"one of three at quorum 0.5: held", 0.5, 1, false},
		{"at quorum 0 any rejection bans", 0, 1, true},
		{"two of three at quorum 0.5: banned", 0.5, 2, true},
		{"three of three at quorum 0.5: banned", 0.5, 3, true},
		{"two of three at quorum 0.9: held", 0.9, 2, false},
		{"three of three at quorum 0.9: banned", 0.9, 3, true},
		{"one of three at quorum 0.3: banned", 0.3, 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := demo(t)
			c.Envoy.Rollout.NACKQuorum = tc.quorum
			exp := tracetest.NewInMemoryExporter()
			reg := prometheus.NewRegistry()
			srv, conn := serveXDS(t, xds.Options{
				Config: c, Registry: reg,
				TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)),
			})
			ws := versionsOf(t, c)
			ctx := context.Background()
			if err := srv.Publish(ctx, ws[0]); err != nil {
				t.Fatal(err)
			}
			good := routeVersion(t, srv)
			var mu sync.Mutex
			bad := ""
			var envs []*fakeEnvoy
			for i := range 3 {
				var reject func(typ, v string) bool
				if i < tc.nackers {
					reject = func(typ, v string) bool {
						mu.Lock()
						defer mu.Unlock()
						return typ == resource.RouteType && v == bad
					}
				}
				envs = append(envs, connect(t, conn, &corev3.Node{Id: fmt.Sprintf("e%d", i), Cluster: "edge-us"}, reject))
			}
			waitFor(t, func() bool {
				for _, e := range envs {
					if !e.has(resource.RouteType, good) {
						return false
					}
				}
				return rolloutOf(t, srv).LastGood["route"] == good
			})

			mu.Lock()
			if err := srv.Publish(ctx, ws[1]); err != nil {
				mu.Unlock()
				t.Fatal(err)
			}
			bad = routeVersion(t, srv)
			mu.Unlock()
			// Every NACK is decided and its span ended.
			events := nackDecisions(t, exp, bad, tc.nackers)
			bans := strings.Count(strings.Join(events, "\n"), "banned; rolled back")
			st := rolloutOf(t, srv)
			if !tc.banned {
				if bans != 0 || len(st.Rejected) != 0 || routeVersion(t, srv) != bad || st.Held != tc.nackers {
					t.Errorf("decisions %q, rollout %+v; want every rejecting node held (%d), nothing banned, %s in force", events, st, tc.nackers, bad)
				}
				waitFor(t, func() bool { return envs[2].has(resource.RouteType, bad) })
				if got := sample(t, reg, `ilb_xds_rollbacks_total{source="edge-us"}`); got != 0 {
					t.Errorf("rollbacks = %v; want 0", got)
				}
				return
			}
			if bans != 1 || len(st.Rejected) != 1 || routeVersion(t, srv) != good {
				t.Fatalf("decisions %q, rollout %+v; want one ban of %s and the routes back to %s", events, st, bad, good)
			}
			if r := st.Rejected[0]; r.Version != bad || r.By != "quorum" || r.Connected != 3 || r.Rejectors < int(tc.quorum*3) || r.Rejectors > tc.nackers {
				t.Errorf("banned %+v; want %s by a quorum of 3 connected", r, bad)
			}
			// Every Envoy, the accepting ones too, is back on the good routes.
			waitFor(t, func() bool {
				for _, e := range envs {
					if !e.has(resource.RouteType, good) {
						return false
					}
				}
				return true
			})
			if got := sample(t, reg, `ilb_xds_rollbacks_total{source="edge-us"}`); got != 1 {
				t.Errorf("rollbacks = %v; want 1", got)
			}
			if got := sample(t, reg, `ilb_xds_rejected_versions{source="edge-us"}`); got != 1 {
				t.Errorf("rejected versions = %v; want 1", got)
			}
		})
	}
}

// nackDecisions waits until n NACKs of version are decided (their span
// "ilb.xds.nack" ended) and returns the decisions, in span order.
func nackDecisions(t *testing.T, exp *tracetest.InMemoryExporter, version string, n int) []string {
	t.Helper()
	var events []string
	waitFor(t, func() bool {
		events = nil
		for _, s := range spansNamed(exp, "ilb.xds.nack") {
			if spanAttrs(s.Snapshot())["ilb.xds.version"] != version {
				continue
			}
			for _, e := range s.Events {
				if e.Name != "envoy.nack" {
					events = append(events, e.Name)
				}
			}
		}
		return len(events) == n
	})
	return events
}
