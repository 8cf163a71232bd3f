package test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/sim/loadgen"
)

// TestControlPlaneRestart restarts ILB (xDS, ext_proc, controller) while
// edge-us (fail-open) is under load: Envoy keeps its configuration while
// ILB is away, every request is answered 200 (ext_proc's absence sends
// requests down the fail-open route), Envoy reconnects and ACKs the new
// ILB's snapshot, and a version that both ILBs served names the same
// content (versions are content hashes, never reused).
func TestControlPlaneRestart(t *testing.T) {
	s := startWorld(t, nil, func(c *config.Config) {
		c.Controller.Policy = config.PolicyProportional
		// Static weights: proportional to the configured capacity. With the
		// learned one, engines slowed by a loaded machine lowered a
		// cluster's capacity before the restart and the new ILB started
		// from the prior again (the route version changed once in make test
		// with both cores busy).
		c.Controller.Capacity.Mode = config.CapacityConfigured
	})
	us, _ := s.Envoy("edge-us")
	var before *cache.Snapshot
	waitUntil(t, "envoysim ACKs the snapshot in force", 5*time.Second, func() bool {
		var err error
		if before, err = s.App.XDS.Snapshot("edge-us"); err != nil {
			t.Fatal(err)
		}
		return acked(us.Sim.Versions(), before)
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var results []loadgen.Result
	var wg sync.WaitGroup
	wg.Go(func() {
		results, _ = loadgen.Run(ctx, loadgen.Options{
			Targets: []loadgen.Target{{Source: "edge-us", URL: us.URL}}, Models: []string{"llama-3.1-8b-instruct", "qwen2.5-7b-instruct"},
			Concurrency: 4, Duration: 5 * time.Second, Seed: 7,
		})
	})
	time.Sleep(time.Second)
	down := time.Now()
	if err := s.RestartILB(ctx, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	var after *cache.Snapshot
	waitUntil(t, "envoysim reconnects and ACKs the new ILB's snapshot", 10*time.Second, func() bool {
		var err error
		if after, err = s.App.XDS.Snapshot("edge-us"); err != nil {
			t.Fatal(err)
		}
		return acked(us.Sim.Versions(), after) && len(s.App.XDS.Nodes()) > 0
	})
	wg.Wait()

	var duringOutage, failed int
	for _, r := range results {
		if r.Err != nil || r.Status != http.StatusOK {
			failed++
			t.Logf("failed: %+v", r)
		}
		if r.Start.After(down) && r.Start.Before(up) {
			duringOutage++
		}
	}
	t.Logf("%d requests, %d sent while ILB was down (%s), %d failed", len(results), duringOutage, up.Sub(down).Round(time.Millisecond), failed)
	if failed > 0 || duringOutage < 10 || len(results) < 50 {
		t.Errorf("%d of %d requests failed; %d were sent while ILB was down (want 0 failed, >= 10 during the outage)", failed, len(results), duringOutage)
	}
	for _, typ := range []resource.Type{resource.ClusterType, resource.EndpointType, resource.RouteType, resource.ListenerType} {
		v1, v2 := before.GetVersion(typ), after.GetVersion(typ)
		same := sameResources(before.GetResourcesAndTTL(typ), after.GetResourcesAndTTL(typ))
		if (v1 == v2) != same {
			t.Errorf("%s: version %s before, %s after the restart, contents equal %v: a version must name one content", typ, v1, v2, same)
		}
	}
	// The weights did not move (static policy), so the new ILB serves the
	// very versions the Envoy has: nothing to re-apply.
	if before.GetVersion(resource.RouteType) != after.GetVersion(resource.RouteType) {
		t.Errorf("route version changed across a restart with static weights: %s -> %s", before.GetVersion(resource.RouteType), after.GetVersion(resource.RouteType))
	}
	if st := s.App.XDS.Rollouts(); len(st) == 0 || len(st[0].Rejected) > 0 {
		t.Errorf("rollout after restart: %+v", st)
	}
}

// acked tells whether an Envoy's ACKed versions are those of snap.
func acked(v map[string]string, snap *cache.Snapshot) bool {
	for _, typ := range []resource.Type{resource.ClusterType, resource.EndpointType, resource.RouteType, resource.ListenerType} {
		if v[typ] != snap.GetVersion(typ) {
			return false
		}
	}
	return true
}

func sameResources(a, b map[string]types.ResourceWithTTL) bool {
	if len(a) != len(b) {
		return false
	}
	for name, r := range a {
		o, ok := b[name]
		if !ok || !proto.Equal(r.Resource, o.Resource) {
			return false
		}
	}
	return true
}

// TestFailClosedRecoversAfterRestart: ILB is away for 8 s while edge-eu
// (fail-closed) is under load, as in the kill -9. Its Envoy
// answers 503 while ILB is away and goes back to ILB as soon as it
// serves: the next ext_proc stream connects at once (Envoy's connection
// pool keeps no back-off between attempts; envoysim's gRPC client kept
// one, up to 5 s, and no request succeeded in the 4 s of load left after
// ILB came back: issue 24's "failures go on ~5 s"), and an ILB held
// unhealthy is re-probed every 500 ms (unhealthy_interval, in the
// bootstrap goldens). The failures after ILB served again and the gap to
// the last one are logged, not asserted (no wall-clock bound in a test):
// 0 in every run here.
func TestFailClosedRecoversAfterRestart(t *testing.T) {
	s := startWorld(t, nil, func(c *config.Config) {
		c.Controller.Policy = config.PolicyProportional
		c.Controller.Capacity.Mode = config.CapacityConfigured
	})
	eu, _ := s.Envoy("edge-eu")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var results []loadgen.Result
	var wg sync.WaitGroup
	wg.Go(func() {
		results, _ = loadgen.Run(ctx, loadgen.Options{
			Targets: []loadgen.Target{{Source: "edge-eu", URL: eu.URL}}, Models: []string{"llama-3.1-8b-instruct"},
			Concurrency: 4, MaxTokens: 4, Duration: 12 * time.Second, Seed: 8,
		})
	})
	time.Sleep(time.Second)
	// 8 s away: long enough for Envoy's health check (5 s interval, 2
	// failures) to hold ILB unhealthy, as in the kill -9.
	if err := s.RestartILB(ctx, 8*time.Second); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	wg.Wait()
	var firstOK, lastFail time.Time
	failedDuring, failedAfter := 0, 0
	for _, r := range results {
		failed := r.Err != nil || r.Status != http.StatusOK
		switch {
		case !r.Start.After(up):
			if failed {
				failedDuring++
			}
		case failed:
			failedAfter++
			if r.Start.After(lastFail) {
				lastFail = r.Start
			}
		case firstOK.IsZero() || r.Start.Before(firstOK):
			firstOK = r.Start
		}
	}
	if firstOK.IsZero() {
		t.Fatalf("no request succeeded after ILB came back (%d results)", len(results))
	}
	gap := time.Duration(0)
	if !lastFail.IsZero() {
		gap = lastFail.Sub(up)
	}
	t.Logf("%d requests; %d failed while ILB was away, %d after it served again (the last at +%s; the first success at +%s)",
		len(results), failedDuring, failedAfter, gap.Round(time.Millisecond), firstOK.Sub(up).Round(time.Millisecond))
}
