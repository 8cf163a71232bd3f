package envoysim

import (
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// hcHarness runs an EDS cluster "pool" over ups with ILB's HTTP health
// check (no_traffic_interval lowered to the 5 s interval), mutated by
// mutate, a plain route, and a fake clock. Start returns once the first
// health check round completed (the cluster's initialization).
func hcHarness(t *testing.T, ups []*upstream, mutate func(c *clusterv3.Cluster)) (*harness, *fakeClock) {
	t.Helper()
	statuses := make([]corev3.HealthStatus, len(ups))
	for i := range statuses {
		statuses[i] = corev3.HealthStatus_HEALTHY
	}
	return hcHarnessEDS(t, ups, statuses, mutate)
}

// hcHarnessEDS is hcHarness with EDS health statuses.
func hcHarnessEDS(t *testing.T, ups []*upstream, statuses []corev3.HealthStatus, mutate func(c *clusterv3.Cluster)) (*harness, *fakeClock) {
	t.Helper()
	h := newHarness(t, nil)
	cla := edsWith(ups, statuses)
	cl := edsCluster("pool", clusterv3.Cluster_LEAST_REQUEST)
	cl.HealthChecks = []*corev3.HealthCheck{ilbHealthCheck("/health")}
	cl.HealthChecks[0].NoTrafficInterval = durationpb.New(5 * time.Second)
	if mutate != nil {
		mutate(cl)
	}
	h.push(cl, cla, httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"}, routeTo("pool"))))
	clock := newFakeClock()
	h.startOpts(Options{Rand: counter(0), Clock: clock})
	clock.waitSleepers(t, len(ups))
	return h, clock
}

// round advances the clock by d and waits until each of ups got one more
// health check and sessions sessions sleep again (their results applied).
func round(t *testing.T, clock *fakeClock, d time.Duration, sessions int, ups ...*upstream) {
	t.Helper()
	before := make([]int, len(ups))
	for i, u := range ups {
		before[i] = len(u.healthRequests())
	}
	clock.Advance(d)
	waitFor(t, "health checks", func() bool {
		for i, u := range ups {
			if len(u.healthRequests()) <= before[i] {
				return false
			}
		}
		return true
	})
	clock.waitSleepers(t, sessions)
}

// TestHTTPHealthCheck: the probe is GET path with the cluster name as host
// and user-agent Envoy/HC; an unexpected status fails a host at once
// (unhealthy_threshold is ignored for it), network failures need
// unhealthy_threshold consecutive ones, recovery healthy_threshold
// successes (health_checker_base_impl.cc handleSuccess/setUnhealthy).
func TestHTTPHealthCheck(t *testing.T) {
	a, b := startBackend(t, "a", nil), startBackend(t, "b", nil)
	h, clock := hcHarness(t, []*upstream{a.upstream, b.upstream}, func(c *clusterv3.Cluster) {
		c.HealthChecks[0].HealthyThreshold = u32(2)
	})
	both := sorted(a.addr(), b.addr())
	if got := healthyHosts(h.env, "pool"); !slices.Equal(got, both) {
		t.Fatalf("after the first round healthy %v, want %v", got, both)
	}
	probe := a.healthRequests()[0]
	if probe.method != "GET" || probe.host != "pool" || probe.header.Get("User-Agent") != "Envoy/HC" {
		t.Errorf("probe %s host %q user-agent %q", probe.method, probe.host, probe.header.Get("User-Agent"))
	}
	for _, step := range []struct {
		name    string
		health  int32
		healthy bool
	}{
		{"a 503 fails at once", 503, false},
		{"one success is below healthy_threshold 2", 200, false},
		{"the second success restores", 200, true},
		{"one network failure is below unhealthy_threshold 2", abortHealth, true},
		{"the second network failure fails", abortHealth, false},
		{"recovery needs two successes again", 200, false},
		{"recovered", 200, true},
	} {
		a.health.Store(step.health)
		round(t, clock, 5*time.Second, 2, a.upstream, b.upstream)
		want := []string{b.addr()}
		if step.healthy {
			want = both
		}
		if got := healthyHosts(h.env, "pool"); !slices.Equal(got, want) {
			t.Fatalf("%s: healthy %v, want %v", step.name, got, want)
		}
	}
	if st := h.env.Stats().Clusters["pool"]; st.HealthCheckNetworkFailures != 2 || st.HealthCheckFailures != 3 {
		t.Errorf("stats %+v: want 2 network failures of 3", st)
	}
	// Traffic goes to healthy hosts only.
	a.health.Store(503)
	round(t, clock, 5*time.Second, 2, a.upstream, b.upstream)
	n := len(a.appRequests())
	for range 4 {
		do(t, "GET", h.url("main", "/"), nil, "")
	}
	if len(a.appRequests()) != n {
		t.Error("an unhealthy host got traffic")
	}
}

// TestHealthCheckProtocol: an HTTP health check speaks HTTP/1.1 unless
// codec_client_type is HTTP2, whatever the cluster's protocol; host sets the
// :authority.
func TestHealthCheckProtocol(t *testing.T) {
	for _, c := range []struct {
		name    string
		mutate  func(hc *corev3.HealthCheck_HttpHealthCheck)
		healthy bool
		host    string
	}{
		{name: "HTTP/1.1 probe against an h2c-only engine fails", healthy: false},
		{name: "codec_client_type HTTP2", mutate: func(hc *corev3.HealthCheck_HttpHealthCheck) { hc.CodecClientType = typev3.CodecClientType_HTTP2 }, healthy: true, host: "pool"},
		{name: "host", mutate: func(hc *corev3.HealthCheck_HttpHealthCheck) {
			hc.CodecClientType = typev3.CodecClientType_HTTP2
			hc.Host = "engine.example"
		}, healthy: true, host: "engine.example"},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := startUpstream(t, "h2", true, nil)
			h, _ := hcHarness(t, []*upstream{up}, func(cl *clusterv3.Cluster) {
				cl.TypedExtensionProtocolOptions = staticCluster("x", true).TypedExtensionProtocolOptions
				if c.mutate != nil {
					c.mutate(cl.HealthChecks[0].GetHttpHealthCheck())
				}
			})
			if got := len(healthyHosts(h.env, "pool")) == 1; got != c.healthy {
				t.Errorf("healthy %v, want %v", got, c.healthy)
			}
			if c.host != "" && (len(up.requests()) == 0 || up.requests()[0].host != c.host) {
				t.Errorf("probes %v, want host %q", up.requests(), c.host)
			}
		})
	}
}

// TestGRPCHealthCheck checks grpc.health.v1.Health/Check against a real
// gRPC health server on a STATIC HTTP/2 cluster: SERVING is healthy,
// NOT_SERVING fails at once, an unknown service (NOT_FOUND) is a failure.
func TestGRPCHealthCheck(t *testing.T) {
	for _, c := range []struct {
		name    string
		service string
	}{
		{name: "overall health"},
		{name: "unknown service", service: "nope"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			hs := health.NewServer()
			grpc_health_v1.RegisterHealthServer(srv, hs)
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = srv.Serve(ln)
			}()
			t.Cleanup(func() {
				srv.Stop()
				<-done
			})
			addr := ln.Addr().String()
			cl := staticCluster("grpc-svc", true, addr)
			cl.HealthChecks = []*corev3.HealthCheck{ilbGRPCHealthCheck()}
			cl.HealthChecks[0].NoTrafficInterval = durationpb.New(5 * time.Second)
			cl.HealthChecks[0].GetGrpcHealthCheck().ServiceName = c.service
			h := newHarness(t, nil)
			h.push(cl, httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"}, routeTo("grpc-svc"))))
			clock := newFakeClock()
			h.startOpts(Options{Clock: clock})
			clock.waitSleepers(t, 1)
			if c.service != "" {
				if got := healthyHosts(h.env, "grpc-svc"); len(got) != 0 {
					t.Errorf("unknown service: healthy %v", got)
				}
				return
			}
			for _, step := range []struct {
				status  grpc_health_v1.HealthCheckResponse_ServingStatus
				healthy bool
			}{
				{grpc_health_v1.HealthCheckResponse_SERVING, true},
				{grpc_health_v1.HealthCheckResponse_NOT_SERVING, false},
				{grpc_health_v1.HealthCheckResponse_SERVING, true},
			} {
				hs.SetServingStatus("", step.status)
				before := h.env.Stats().Clusters["grpc-svc"].HealthCheckAttempts
				clock.Advance(5 * time.Second)
				waitFor(t, "a check", func() bool { return h.env.Stats().Clusters["grpc-svc"].HealthCheckAttempts > before })
				clock.waitSleepers(t, 1)
				if got := len(healthyHosts(h.env, "grpc-svc")) == 1; got != step.healthy {
					t.Errorf("%s: healthy %v", step.status, got)
				}
			}
		})
	}
	// gRPC health checking needs an HTTP/2 cluster.
	cl := staticCluster("h1", false, "127.0.0.1:1")
	cl.HealthChecks = []*corev3.HealthCheck{ilbGRPCHealthCheck()}
	if _, err := compileCluster(cl); err == nil || !strings.Contains(err.Error(), "h1 cluster must support HTTP/2 for gRPC healthchecking") {
		t.Errorf("HTTP/1 cluster with a gRPC health check: %v", err)
	}
}

// TestHealthCheckInterval checks HealthCheckerImplBase::interval.
func TestHealthCheckInterval(t *testing.T) {
	cfg := &healthCheckConfig{
		interval: 5 * time.Second, noTrafficInterval: 60 * time.Second, noTrafficHealthyInterval: 50 * time.Second,
		unhealthyInterval: 7 * time.Second, unhealthyEdgeInterval: 2 * time.Second, healthyEdgeInterval: 3 * time.Second,
	}
	for _, c := range []struct {
		name    string
		traffic bool
		healthy bool
		tr      transition
		want    time.Duration
	}{
		{"no traffic, healthy", false, true, unchanged, 50 * time.Second},
		{"no traffic, healthy pending", false, true, changePending, 60 * time.Second},
		{"no traffic, unhealthy", false, false, changed, 60 * time.Second},
		{"traffic, healthy", true, true, unchanged, 5 * time.Second},
		{"traffic, healthy pending", true, true, changePending, 3 * time.Second},
		{"traffic, unhealthy", true, false, changed, 7 * time.Second},
		{"traffic, unhealthy pending", true, false, changePending, 2 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			hc := &healthChecker{cfg: cfg, rt: &clusterRuntime{}}
			hc.rt.traffic.Store(c.traffic)
			if got := hc.interval(c.healthy, c.tr); got != c.want {
				t.Errorf("interval %v, want %v", got, c.want)
			}
		})
	}
}
