package test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/internal/kubetest"
	"github.com/ilbproject/ilb/internal/promtest"
	"github.com/ilbproject/ilb/signals"
	"github.com/ilbproject/ilb/sim/engine"
	"github.com/ilbproject/ilb/sim/fleet"
	"github.com/ilbproject/ilb/sim/stack"
	"github.com/ilbproject/ilb/weights"
)

// kubeCluster is the cluster the Kubernetes tests take from an API server.
const kubeCluster = "us-east-vllm"

// kubeWorld is the demo world whose us-east-vllm replicas ILB finds in
// InferencePool inference/vllm on a real API server: three engines on
// 127.0.0.2-4, one port, each a Pod of the pool. (EndpointSlices refuse
// loopback addresses, so the Service path is tested in package kube
// against the same API server, without traffic.)
type kubeWorld struct {
	*stack.Stack
	api   *kubetest.Server
	addrs []string // the engines, host:port; Pod i is llama-<i> at addrs[i]
}

// startKubeWorld runs the kube world.
func startKubeWorld(t *testing.T, api *kubetest.Server) *kubeWorld {
	t.Helper()
	api.InstallInferencePool(t)
	api.Namespace(t, "inference")
	cs := api.Client()
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Controller.Policy = config.PolicyProportional
	timing := &engine.FixedTiming{MaxRunning: 16, PrefillPerToken: 20 * time.Microsecond, InterTokenLatency: 2 * time.Millisecond}
	sctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &kubeWorld{api: api}
	port := startPoolEngines(sctx, t, c, timing, &w.addrs)
	for i, a := range w.addrs {
		host, _, _ := net.SplitHostPort(a)
		kubetest.RunningPod(t, cs, "inference", fmt.Sprintf("llama-%d", i), "vllm-us-east", host, true)
	}
	api.ApplyPool(t, "inference", "vllm", "vllm-us-east", port)
	kubeconfig := api.Kubeconfig("us-east", "")
	s, err := stack.Start(sctx, c, stack.Options{Seed: 11, Timing: timing, Prepare: func(c *config.Config) error {
		cl := &c.Clusters[0]
		if cl.Name != kubeCluster {
			return fmt.Errorf("cluster 0 is %s", cl.Name)
		}
		c.Kubernetes.APIServers = []config.KubeAPIServer{{Name: "us-east", Kubeconfig: kubeconfig}}
		cl.Endpoints = nil
		cl.Discovery = config.Discovery{
			Type: config.DiscoveryKube, Refresh: config.Duration(10 * time.Second),
			Kubernetes: &config.KubeDiscovery{Namespace: "inference", InferencePool: "vllm"},
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = s.Wait()
	})
	w.Stack = s
	return w
}

// startPoolEngines starts three us-east-vllm engines on 127.0.0.2-4 and
// one port (a port found free, tried again if taken meanwhile), and
// returns the port, the engines' addresses in addrs.
func startPoolEngines(ctx context.Context, t *testing.T, c *config.Config, timing *engine.FixedTiming, addrs *[]string) int {
	t.Helper()
	for attempt := 1; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		own := *c
		own.Clusters = []config.EngineCluster{c.Clusters[0]}
		own.Clusters[0].Endpoints = nil
		for h := 2; h <= 4; h++ {
			own.Clusters[0].Endpoints = append(own.Clusters[0].Endpoints, net.JoinHostPort(fmt.Sprintf("127.0.0.%d", h), strconv.Itoa(port)))
		}
		f, err := fleet.Start(ctx, &own, fleet.Options{Timing: timing})
		if err != nil {
			if attempt < 3 {
				continue
			}
			t.Fatal(err)
		}
		go func() { _ = f.Wait() }()
		*addrs = f.Config.Clusters[0].Endpoints
		return port
	}
}

// replicaStates is the cluster's replicas in ILB's signals, address →
// state.
func replicaStates(s *stack.Stack) (map[string]signals.State, signals.Cluster) {
	snap := s.App.Signals.Snapshot()
	out := map[string]signals.State{}
	for _, r := range snap.Endpoints(kubeCluster) {
		out[r.Address] = r.State
	}
	return out, snap.Clusters[kubeCluster]
}

// waitSignals waits until ILB's signals satisfy ok and returns how long
// that took. It polls the published snapshot (ILB's own view, what EDS
// and ext_proc are given), every millisecond.
func waitSignals(t *testing.T, s *stack.Stack, what string, ok func(map[string]signals.State, signals.Cluster) bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(2 * time.Minute)
	for {
		st, cl := replicaStates(s)
		if ok(st, cl) {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen; replicas %v, discovery error %q", what, st, cl.DiscoveryError)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestKubeReplicasEndToEnd: ILB takes us-east-vllm's replicas from a real
// API server, then follows one through not ready (draining: no request
// reaches it), ready again, and its slice deleted (drained, then gone).
func TestKubeReplicasEndToEnd(t *testing.T) {
	api := kubetest.Start(t)
	w := startKubeWorld(t, api)
	cs := api.Client()
	ctx := context.Background()
	addrs := w.addrs
	waitSignals(t, w.Stack, "3 replicas from the API server", func(st map[string]signals.State, _ signals.Cluster) bool {
		return len(st) == 3 && st[addrs[0]] == signals.StateReady && st[addrs[1]] == signals.StateReady && st[addrs[2]] == signals.StateReady
	})
	waitUntil(t, "us-east-vllm in edge-us's llama weights", 2*time.Minute, func() bool {
		c, _ := w.App.Controller.Current().Cell("edge-us", "llama-3.1-8b-instruct")
		return slices.ContainsFunc(c.Targets, func(t weights.Target) bool { return t.Cluster == kubeCluster && t.Weight > 0 })
	})
	us, _ := w.Envoy("edge-us")
	victim := kubeCluster + "/2" // the engine of Pod llama-2

	p, err := cs.CoreV1().Pods("inference").Get(ctx, "llama-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ := net.SplitHostPort(addrs[2])
	p = kubetest.SetPod(t, cs, p, host, false)
	updated := time.Now()
	took := waitSignals(t, w.Stack, "not ready → draining", func(st map[string]signals.State, _ signals.Cluster) bool {
		return st[addrs[2]] == signals.StateDraining
	})
	waitEnvoyApplied(t, w.Stack, "edge-us", addrs[2], corev3.HealthStatus_DRAINING)
	t.Logf("not ready: ILB's replica draining %s after the status update returned; edge-us's Envoy had the EDS that drains it (ext_proc's live state is set before) %s after", took, time.Since(updated))
	served := map[string]int{}
	for range 60 {
		resp, body := chat(t, us.URL, "llama3-8b", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		served[resp.Header.Get(engine.HeaderReplica)]++
	}
	if served[victim] > 0 {
		t.Errorf("served %v: %s is not ready and still took %d requests", served, victim, served[victim])
	}
	if served[kubeCluster+"/0"]+served[kubeCluster+"/1"] == 0 {
		t.Errorf("served %v: no request reached the ready us-east-vllm replicas", served)
	}

	kubetest.SetPod(t, cs, p, host, true)
	waitSignals(t, w.Stack, "ready again", func(st map[string]signals.State, _ signals.Cluster) bool {
		return st[addrs[2]] == signals.StateReady || st[addrs[2]] == signals.StateWarming
	})

	if err := cs.CoreV1().Pods("inference").Delete(ctx, "llama-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took = waitSignals(t, w.Stack, "pod terminating → draining", func(st map[string]signals.State, _ signals.Cluster) bool {
		return st[addrs[2]] == signals.StateDraining
	})
	t.Logf("pod deleted (terminating): ILB's replica draining %s after the delete returned", took)
	if r := kubeReplicaReason(w.Stack, addrs[2]); r != "discovery: pod terminating" {
		t.Errorf("reason %q, want discovery: pod terminating", r)
	}
}

// waitEnvoyApplied waits until the Envoy of source has applied (ACKed) the
// EDS version ILB serves it in which addr of the kube cluster has health
// want.
func waitEnvoyApplied(t *testing.T, s *stack.Stack, source, addr string, want corev3.HealthStatus) {
	t.Helper()
	e, _ := s.Envoy(source)
	waitUntil(t, source+"'s Envoy applies "+addr+" "+want.String(), 2*time.Minute, func() bool {
		snap, err := s.App.XDS.Snapshot(source)
		if err != nil || edsHealth(t, s, source, kubeCluster, addr) != want {
			return false
		}
		return e.Sim.Versions()[resource.EndpointType] == snap.GetVersion(resource.EndpointType)
	})
}

func kubeReplicaReason(s *stack.Stack, addr string) string {
	for _, r := range s.App.Signals.Snapshot().Endpoints(kubeCluster) {
		if r.Address == addr {
			return r.Reason
		}
	}
	return ""
}

// TestKubeAPIServerOutageUnderLoad stops the API server for 30 s while
// both sources send requests without pause: ILB keeps its replicas,
// reports discovery stale (the cluster's discovery error, the metric),
// and once the API server is back catches up on a change made then,
// without a restart. No request fails.
func TestKubeAPIServerOutageUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("30 s outage")
	}
	api := kubetest.Start(t)
	w := startKubeWorld(t, api)
	s := w.Stack
	waitSignals(t, s, "3 replicas", func(st map[string]signals.State, _ signals.Cluster) bool { return len(st) == 3 })
	// The load starts once every Envoy has the replicas: until its first
	// EDS a cluster has no host, and what is under test is the outage.
	for _, e := range s.Envoys {
		waitUntil(t, e.Source+"'s Envoy applies the replicas", 2*time.Minute, func() bool {
			snap, err := s.App.XDS.Snapshot(e.Source)
			if err != nil || e.Sim.Versions()[resource.EndpointType] != snap.GetVersion(resource.EndpointType) {
				return false
			}
			if _, ok := snap.GetResources(resource.EndpointType)[kubeCluster]; !ok {
				return true // a source the cluster does not serve
			}
			for _, a := range w.addrs {
				if edsHealth(t, s, e.Source, kubeCluster, a) != corev3.HealthStatus_HEALTHY {
					return false
				}
			}
			return true
		})
	}

	ctx, stop := context.WithCancel(context.Background())
	var sent, failed atomic.Int64
	var mu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	start := time.Now()
	for _, e := range s.Envoys {
		for w := range 2 {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					model := []string{"llama3-8b", "qwen-7b"}[(i+w)%2]
					code, body := post(e.URL, model)
					sent.Add(1)
					if code != http.StatusOK {
						failed.Add(1)
						mu.Lock()
						if len(failures) < 10 {
							failures = append(failures, fmt.Sprintf("%s %s at %s: %d %s", e.Source, model, time.Since(start).Truncate(time.Millisecond), code, body))
						}
						mu.Unlock()
					}
				}
			})
		}
	}
	defer func() { stop(); wg.Wait() }()

	api.Stop()
	down := time.Now()
	t.Logf("API server stopped at %s", down.Sub(start).Truncate(time.Millisecond))
	took := waitSignals(t, s, "discovery stale", func(st map[string]signals.State, cl signals.Cluster) bool {
		return cl.DiscoveryError != "" && len(st) == 3
	})
	t.Logf("stale reported %s after the API server was killed: %s", took, replicaErr(s))
	time.Sleep(30*time.Second - time.Since(down)) // the outage lasts 30 s; requests flow meanwhile
	st, cl := replicaStates(s)
	if len(st) != 3 || cl.Draining != 0 || cl.DiscoveryError == "" {
		t.Errorf("after 30 s without the API server: replicas %v, discovery error %q; want 3 kept, none draining, the error shown", st, cl.DiscoveryError)
	}
	if m, _ := promtest.Value(t, s.App.Registry, "ilb_signals_discovery_stale_seconds", map[string]string{"cluster": kubeCluster}); m < 20 {
		t.Errorf("ilb_signals_discovery_stale_seconds %v after 30 s, want ≥ 20", m)
	}

	api.Restart()
	back := time.Now()
	t.Logf("API server ready again at %s", back.Sub(start).Truncate(time.Millisecond))
	cs := api.Client()
	if err := cs.CoreV1().Pods("inference").Delete(context.Background(), "llama-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSignals(t, s, "caught up", func(st map[string]signals.State, cl signals.Cluster) bool {
		return cl.DiscoveryError == "" && st[w.addrs[2]] == signals.StateDraining
	})
	t.Logf("caught up %s after the API server was ready again", time.Since(back))
	stop()
	wg.Wait()
	t.Logf("%d requests, %d failed", sent.Load(), failed.Load())
	if failed.Load() > 0 || sent.Load() < 100 {
		t.Errorf("%d of %d requests failed (want 0 of at least 100): %v", failed.Load(), sent.Load(), failures)
	}
}

func replicaErr(s *stack.Stack) string {
	_, cl := replicaStates(s)
	return cl.DiscoveryError
}

// post sends one chat request and returns its status and body (status 0
// and the error for a transport failure).
func post(url, model string) (int, string) {
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hello"}],"max_tokens":4}`, model)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b)
}
