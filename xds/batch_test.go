package xds_test

import (
	"context"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/xds"
)

// TestEndpointPushesBatched: an endpoint change that only adds traffic
// within envoy.eds_min_interval of the last push is held and pushed by
// the rollout loop when the interval is over (with what came after it);
// a change that takes traffic away, or gives a cluster its first healthy
// replica, is pushed at once. The clock is
// injected; the loop's reads of it show that it ran with the time set.
func TestEndpointPushesBatched(t *testing.T) {
	const interval = 5 * time.Second
	type step struct {
		health corev3.HealthStatus
		weight uint32
	}
	tests := []struct {
		name     string
		interval time.Duration
		next     []step // after the first push, at the same instant
		// wantNow is the (health, weight) of the replica in EDS right
		// after the last step; wantLater after the interval.
		wantNow, wantLater     step
		wantAtOnce, wantBatchd float64 // pushes counted at the end
	}{
		{
			"weight grows: held, then pushed", interval,
			[]step{{corev3.HealthStatus_HEALTHY, 70}},
			step{corev3.HealthStatus_HEALTHY, 40},
			step{corev3.HealthStatus_HEALTHY, 70},
			1, 1,
		},
		{
			"two growths in the interval: one push of the last", interval,
			[]step{{corev3.HealthStatus_HEALTHY, 70}, {corev3.HealthStatus_HEALTHY, 100}},
			step{corev3.HealthStatus_HEALTHY, 40},
			step{corev3.HealthStatus_HEALTHY, 100},
			1, 1,
		},
		{
			"unhealthy: pushed at once", interval,
			[]step{{corev3.HealthStatus_UNHEALTHY, 40}},
			step{corev3.HealthStatus_UNHEALTHY, 40},
			step{corev3.HealthStatus_UNHEALTHY, 40},
			2, 0,
		},
		{
			"draining after a held growth: both at once", interval,
			[]step{{corev3.HealthStatus_HEALTHY, 70}, {corev3.HealthStatus_DRAINING, 70}},
			step{corev3.HealthStatus_DRAINING, 70},
			step{corev3.HealthStatus_DRAINING, 70},
			2, 0,
		},
		{
			"a cluster's first healthy replica: at once", interval,
			[]step{{corev3.HealthStatus_UNHEALTHY, 40}, {corev3.HealthStatus_HEALTHY, 40}},
			step{corev3.HealthStatus_HEALTHY, 40},
			step{corev3.HealthStatus_HEALTHY, 40},
			3, 0,
		},
		{
			"back to what Envoys have: nothing to push", interval,
			[]step{{corev3.HealthStatus_HEALTHY, 70}, {corev3.HealthStatus_HEALTHY, 40}},
			step{corev3.HealthStatus_HEALTHY, 40},
			step{corev3.HealthStatus_HEALTHY, 40},
			1, 0,
		},
		{
			"interval 0: every change at once", 0,
			[]step{{corev3.HealthStatus_HEALTHY, 70}},
			step{corev3.HealthStatus_HEALTHY, 70},
			step{corev3.HealthStatus_HEALTHY, 70},
			2, 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, w := demo(t)
			c.Envoy.EDSMinInterval = config.Duration(tc.interval)
			clock := newFakeClock()
			reg := prometheus.NewRegistry()
			srv, _ := serveXDS(t, xds.Options{Config: c, Registry: reg, Now: clock.Now})
			ctx := context.Background()
			if err := srv.Publish(ctx, w); err != nil {
				t.Fatal(err)
			}
			set := func(s step) {
				t.Helper()
				eps := xds.StaticEndpoints(c)
				eps["eu-west-vllm"] = []xds.Endpoint{{Address: "127.0.0.1:18121", Health: s.health, Weight: s.weight}}
				if err := srv.SetEndpoints(ctx, eps); err != nil {
					t.Fatal(err)
				}
			}
			got := func() step {
				le := eds(t, srv, "edge-eu", "eu-west-vllm").GetEndpoints()[0].GetLbEndpoints()[0]
				return step{le.GetHealthStatus(), le.GetLoadBalancingWeight().GetValue()}
			}
			set(step{corev3.HealthStatus_HEALTHY, 40}) // the first push: at once
			for _, s := range tc.next {
				set(s)
			}
			if g := got(); g != tc.wantNow {
				t.Errorf("right after: EDS has %v; want %v", g, tc.wantNow)
			}
			clock.advance(interval)
			reads := clock.readCount()
			// The rollout loop reads the clock once per tick, and a push
			// reads it once more (when it hands the snapshots over) before
			// it has set them: three reads after the advance mean that the
			// first tick with the new time has finished, pushing or not
			// (two were not enough: the test could look between a push's
			// read and its snapshots, which it once did in make test).
			waitFor(t, func() bool { return clock.readCount() >= reads+3 })
			if g := got(); g != tc.wantLater {
				t.Errorf("an interval later: EDS has %v; want %v", g, tc.wantLater)
			}
			atOnce := sample(t, reg, `ilb_xds_endpoint_pushes_total{how="at_once"}`)
			batched := sample(t, reg, `ilb_xds_endpoint_pushes_total{how="batched"}`)
			if atOnce != tc.wantAtOnce || batched != tc.wantBatchd {
				t.Errorf("pushes at once %v, batched %v; want %v, %v", atOnce, batched, tc.wantAtOnce, tc.wantBatchd)
			}
		})
	}
}
