package envoysim

import (
	"math"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestSlowStartFactor checks EdfLoadBalancerBase::applySlowStartFactor:
// max(time_factor^(1/aggression), min_weight_percent) with
// time_factor = max(1 ms, elapsed) / window, and 1 once the window passed.
func TestSlowStartFactor(t *testing.T) {
	since := time.Unix(1000, 0)
	for _, c := range []struct {
		name       string
		aggression float64
		minPercent float64 // 0: default 10 %
		elapsed    time.Duration
		want       float64
	}{
		{"linear at 10%", 1, 0, 3 * time.Second, 0.1},
		{"linear at half", 1, 0, 15 * time.Second, 0.5},
		{"floor at min_weight_percent", 1, 0, time.Second, 0.1},
		{"lower floor", 1, 1, time.Second, 1.0 / 30},
		{"aggression 2 at a quarter", 2, 0, 7500 * time.Millisecond, 0.5},
		{"aggression 0.5 at half", 0.5, 0, 15 * time.Second, 0.25},
		{"at once is 1 ms", 1, 0.001, 0, 1.0 / 30000},
		{"window passed", 1, 0, 30 * time.Second, 1},
		{"invalid aggression is 1", -3, 0, 15 * time.Second, 0.5},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := &clusterv3.Cluster_SlowStartConfig{
				SlowStartWindow: durationpb.New(30 * time.Second),
				Aggression:      &corev3.RuntimeDouble{DefaultValue: c.aggression},
			}
			if c.minPercent > 0 {
				cfg.MinWeightPercent = &typev3.Percent{Value: c.minPercent}
			}
			got := compileSlowStart(cfg).factor(since, since.Add(c.elapsed))
			if math.Abs(got-c.want) > 1e-9 {
				t.Errorf("factor %v, want %v", got, c.want)
			}
		})
	}
}

// TestSlowStartWeights: a host that joins a least request cluster with
// slow start gets a tenth of the weight 3 s into a 30 s window (the EDF
// scheduler runs while any host is in slow start, even with equal weights),
// and its full weight once the window passed (its scheduler entry keeps the
// stale deadline until picked, as in Envoy, so it first catches up).
func TestSlowStartWeights(t *testing.T) {
	h := newHarness(t, nil)
	a, b := startBackend(t, "a", nil), startBackend(t, "b", nil)
	cl := edsCluster("pool", clusterv3.Cluster_LEAST_REQUEST)
	ilbSlowStart(cl)
	routes := routeConfig("routes", vhost("all", []string{"*"}, routeTo("pool")))
	h.push(cl, edsWith([]*upstream{a.upstream}, []corev3.HealthStatus{corev3.HealthStatus_HEALTHY}), httpListener("main", "routes"), routes)
	clock := newFakeClock()
	h.startOpts(Options{Rand: counter(0), Clock: clock})
	clock.Advance(60 * time.Second) // a is out of its window
	v := h.push(cl, edsWith([]*upstream{a.upstream, b.upstream}, []corev3.HealthStatus{corev3.HealthStatus_HEALTHY, corev3.HealthStatus_HEALTHY}),
		httpListener("main", "routes"), routes)
	waitFor(t, "EDS update", func() bool { return h.env.Versions()[typeEndpoint] == v })
	share := func(n int) int {
		before := len(b.appRequests())
		for range n {
			do(t, "GET", h.url("main", "/"), nil, "")
		}
		return len(b.appRequests()) - before
	}
	clock.Advance(3 * time.Second)
	if n := share(20); n < 1 || n > 3 {
		t.Errorf("3 s into slow start the new host got %d of 20 requests, want about 2", n)
	}
	clock.Advance(30 * time.Second)
	if n := share(40); n < 10 || n > 30 {
		t.Errorf("after the window the new host got %d of 40 requests, want far more than a tenth", n)
	}
}

// TestSlowStartFromHealthCheck: with active health checking a host's slow
// start begins when it passes the check that makes it healthy
// (handleSuccess sets last_hc_pass_time).
func TestSlowStartFromHealthCheck(t *testing.T) {
	cc := &clusterConfig{
		name: "c", lb: lbLeastRequest, choiceCount: 2, panicThreshold: 50,
		slowStart: &slowStartConfig{window: 30 * time.Second, aggression: 1, minWeight: 0.1},
		hc:        &healthCheckConfig{timeout: time.Second, interval: 5 * time.Second, healthyThreshold: 1, unhealthyThreshold: 2},
	}
	rt := testRuntime(t, cc, 0)
	clock := rt.clock.(*fakeClock)
	members := rt.syncMembers([]hostSpec{{addr: "10.0.0.1:80", weight: 1}})
	clock.Advance(time.Minute)
	passed := clock.Now()
	if _, tr := rt.hc.apply(members[0], &hcSession{first: true}, hcResult{outcome: hcSucceeded}); tr != changed {
		t.Fatalf("first success: %v", tr)
	}
	clock.Advance(3 * time.Second)
	view, latest := rt.view(clock.Now())
	if !latest.Equal(passed) || !view[0].lastHCPass.Equal(passed) {
		t.Errorf("latest host added %v, pass time %v, want %v", latest, view[0].lastHCPass, passed)
	}
	c := buildCluster(cc, rt, view, defaultOverprovisioning, latest)
	if w := c.hostWeight(c.sources[srcHealthy][0]); math.Abs(w-0.1) > 1e-9 {
		t.Errorf("weight %v, want 0.1 three seconds into the window", w)
	}
}
