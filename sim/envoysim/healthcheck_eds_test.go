package envoysim

import (
	"net/http"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/health/grpc_health_v1"
)

// edsWith is the "pool" ClusterLoadAssignment over hosts and statuses.
func edsWith(hosts []*upstream, statuses []corev3.HealthStatus) *endpointv3.ClusterLoadAssignment {
	cla := loadAssignment("pool")
	for i, u := range hosts {
		cla.Endpoints[0].LbEndpoints = append(cla.Endpoints[0].LbEndpoints, lbEndpoint(u.addr(), statuses[i]))
	}
	return cla
}

// TestHealthCheckWithEDS checks how active health checking combines with
// EDS (HostImplBase::coarseHealth, updateDynamicHostList): EDS UNHEALTHY
// and DEGRADED apply whatever the checks say; a host added while checks run
// starts failing until its first check; a host removed from EDS that still
// passes its checks keeps serving (PENDING_DYNAMIC_REMOVAL) until it fails
// one, unless ignore_health_on_host_removal.
func TestHealthCheckWithEDS(t *testing.T) {
	for _, ignoreOnRemoval := range []bool{false, true} {
		name := "removed hosts stay while healthy"
		if ignoreOnRemoval {
			name = "ignore_health_on_host_removal"
		}
		t.Run(name, func(t *testing.T) {
			a, b, c := startBackend(t, "a", nil), startBackend(t, "b", nil), startBackend(t, "c", nil)
			release := make(chan struct{})
			d := startUpstream(t, "d", false, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/health" {
					select {
					case <-release:
					case <-r.Context().Done():
						return
					}
				}
			})
			ups := []*upstream{a.upstream, b.upstream, c.upstream}
			statuses := []corev3.HealthStatus{corev3.HealthStatus_HEALTHY, corev3.HealthStatus_UNHEALTHY, corev3.HealthStatus_DEGRADED}
			h, clock := hcHarnessEDS(t, ups, statuses, func(cl *clusterv3.Cluster) { cl.IgnoreHealthOnHostRemoval = ignoreOnRemoval })
			if got := healthyHosts(h.env, "pool"); !slices.Equal(got, []string{a.addr()}) {
				t.Fatalf("healthy %v: EDS UNHEALTHY and DEGRADED must apply despite passing checks", got)
			}
			if deg := h.env.snap.Load().clusters["pool"].sources[srcDegraded]; len(deg) != 1 || deg[0].addr != c.addr() {
				t.Errorf("degraded %v", deg)
			}

			// A new host starts failing until its first check passes.
			v := h.push(ilbLikeCluster(ignoreOnRemoval), edsWith(append(ups, d), append(statuses, corev3.HealthStatus_HEALTHY)),
				httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"}, routeTo("pool"))))
			waitFor(t, "EDS update", func() bool { return h.env.Versions()[typeEndpoint] == v })
			waitFor(t, "the new host's first check", func() bool { return len(d.requests()) > 0 })
			if slices.Contains(healthyHosts(h.env, "pool"), d.addr()) {
				t.Error("a new host is healthy before its first check")
			}
			close(release)
			waitFor(t, "the new host's first pass", func() bool { return slices.Contains(healthyHosts(h.env, "pool"), d.addr()) })
			clock.waitSleepers(t, 4)

			// a leaves EDS while passing its checks.
			v = h.push(ilbLikeCluster(ignoreOnRemoval), edsWith([]*upstream{b.upstream, c.upstream, d}, append(statuses[1:], corev3.HealthStatus_HEALTHY)),
				httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"}, routeTo("pool"))))
			waitFor(t, "EDS update", func() bool { return h.env.Versions()[typeEndpoint] == v })
			kept := slices.Contains(healthyHosts(h.env, "pool"), a.addr())
			if kept == ignoreOnRemoval {
				t.Fatalf("removed host kept %v, want %v", kept, !ignoreOnRemoval)
			}
			if ignoreOnRemoval {
				return
			}
			// It goes once it fails a check.
			a.health.Store(503)
			clock.Advance(5 * time.Second)
			waitFor(t, "removal after a failed check", func() bool {
				return !slices.ContainsFunc(h.env.snap.Load().clusters["pool"].sources[srcAll], func(hh *host) bool { return hh.addr == a.addr() })
			})
		})
	}
}

// ilbLikeCluster is the cluster of hcHarness.
func ilbLikeCluster(ignoreOnRemoval bool) *clusterv3.Cluster {
	cl := edsCluster("pool", clusterv3.Cluster_LEAST_REQUEST)
	cl.HealthChecks = []*corev3.HealthCheck{ilbHealthCheck("/health")}
	cl.HealthChecks[0].NoTrafficInterval = durationpbNew(5 * time.Second)
	cl.IgnoreHealthOnHostRemoval = ignoreOnRemoval
	return cl
}

// TestExtProcClusterHealth: the bootstrap's ext_proc cluster with ILB's
// gRPC health check. When the processor reports NOT_SERVING its host fails;
// with the default 50 % panic threshold a one-host cluster is in panic and
// streams still open to it, with healthy_panic_threshold 0 they fail with
// "no healthy upstream" and failure_mode_allow decides.
func TestExtProcClusterHealth(t *testing.T) {
	for _, c := range []struct {
		name          string
		panicZero     bool
		failOpen      bool
		status        int
		wantProcessed bool
	}{
		{name: "panic mode keeps using the unhealthy host", status: 200, wantProcessed: true},
		{name: "no healthy upstream, failure_mode_allow", panicZero: true, failOpen: true, status: 200},
		{name: "no healthy upstream, fail closed", panicZero: true, status: 500},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.upstream("a", nil)
			h.push(append(h.clusters(),
				httpListener("main", "routes", extProc("ilb", &extprocfilterv3.ExternalProcessor{FailureModeAllow: c.failOpen})),
				routeConfig("routes", vhost("all", []string{"*"}, routeTo("a"))))...)
			b := testBootstrap(h.xds.addr, h.proc.addr)
			ep := b.StaticResources.Clusters[1]
			ep.HealthChecks = []*corev3.HealthCheck{ilbGRPCHealthCheck()}
			ep.CircuitBreakers = ilbCircuitBreakers(100000)
			if c.panicZero {
				ep.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: 0}}
			}
			clock := newFakeClock()
			h.startOpts(Options{Bootstrap: b, Clock: clock})
			clock.waitSleepers(t, 1)
			if resp := do(t, "GET", h.url("main", "/"), nil, ""); resp.status != 200 || len(h.proc.requests()) == 0 {
				t.Fatalf("healthy processor: %d, %d messages", resp.status, len(h.proc.requests()))
			}
			h.proc.health.SetServingStatus("", grpc_health_v1.HealthCheckResponse_NOT_SERVING)
			clock.Advance(60 * time.Second) // the check scheduled before any traffic waits no_traffic_interval
			waitFor(t, "the processor failing its check", func() bool { return len(healthyHosts(h.env, "ext-proc")) == 0 })
			n := len(h.proc.requests())
			resp := do(t, "GET", h.url("main", "/"), nil, "")
			if resp.status != c.status {
				t.Errorf("status %d, want %d", resp.status, c.status)
			}
			if processed := len(h.proc.requests()) > n; processed != c.wantProcessed {
				t.Errorf("processed %v, want %v", processed, c.wantProcessed)
			}
		})
	}
}
