package test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/ha/etcdtest"
	"github.com/ilbproject/ilb/sim/loadgen"
	"github.com/ilbproject/ilb/sim/stack"
)

// TestHALeaderStopsUnderLoad: three ILB replicas on a real 3-member etcd,
// one envoysim per source listing all three (edge-us fails open, edge-eu
// fails closed). Under load, the leader is stopped as an orchestrator
// stops a pod: no request fails on either source, another replica leads
// and publishes, and every replica left serves one version, the one in
// etcd. Waits on states, not on time.
func TestHALeaderStopsUnderLoad(t *testing.T) {
	etcd := etcdtest.Start(t, 3)
	h := config.DefaultHA()
	h.Endpoints = etcd.Endpoints()
	h.LeaseTTL = config.Duration(2 * time.Second)
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := stack.Start(ctx, c, stack.Options{Seed: 5, HA: &h, Replicas: 3})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = s.Wait()
	})
	waitUntil(t, "a leader", 30*time.Second, func() bool { return s.Leader() >= 0 })
	first := s.Leader()

	var targets []loadgen.Target
	for _, e := range s.Envoys {
		targets = append(targets, loadgen.Target{Source: e.Source, URL: e.URL})
	}
	lctx, stopLoad := context.WithCancel(ctx)
	var results []loadgen.Result
	var lerr error
	var wg sync.WaitGroup
	wg.Go(func() {
		results, lerr = loadgen.Run(lctx, loadgen.Options{
			Targets: targets, Models: []string{"llama-3.1-8b-instruct", "qwen2.5-7b-instruct"},
			Duration: 5 * time.Minute, Concurrency: 4, Seed: 9,
		})
	})
	// Some load before the stop, then the stop, then load until another
	// replica leads and every replica left serves what etcd holds.
	served := func() int {
		n := 0
		for _, e := range s.Envoys {
			n += int(e.Sim.Stats().Responses["2xx"])
		}
		return n
	}
	waitUntil(t, "load through both sources", 30*time.Second, func() bool { return served() >= 50 })
	if err := s.StopReplica(first); err != nil {
		t.Fatal(err)
	}
	before := served()
	waitUntil(t, "another leader", 30*time.Second, func() bool {
		l := s.Leader()
		return l >= 0 && l != first
	})
	waitUntil(t, "every replica left serving the version in etcd", 30*time.Second, func() bool {
		want := ""
		for i, r := range s.Replicas {
			if i == first {
				continue
			}
			st := r.App.HA.Status()
			if st.Installed == "" || st.Installed != st.Published || want != "" && st.Installed != want {
				return false
			}
			want = st.Installed
		}
		return true
	})
	waitUntil(t, "load after the new leader", 30*time.Second, func() bool { return served() >= before+50 })
	stopLoad()
	wg.Wait()
	if lerr != nil {
		t.Fatal(lerr)
	}
	failed := map[string]int{}
	for _, r := range results {
		if r.Err != nil && lctx.Err() != nil && r.Start.After(time.Now().Add(-time.Second)) {
			continue // cut by the end of the load
		}
		if r.Err != nil || r.Status != 200 {
			failed[fmt.Sprintf("%s %d %s %v", r.Source, r.Status, r.Reason, r.Err)]++
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d requests in all; failed: %v", len(results), failed)
	}
	t.Logf("%d requests, replica %d (leader) stopped, replica %d leads", len(results), first, s.Leader())
}
