package signals

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ilbproject/ilb/config"
)

// changes records OnChange calls.
type changes struct {
	mu    sync.Mutex
	calls [][]string
}

func (c *changes) record(_ *Snapshot, health []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, health)
}

// take returns the calls since the last take.
func (c *changes) take() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	return out
}

// gauge reads one series from a registry.
func gauge(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				if m.Counter != nil {
					return m.Counter.GetValue()
				}
				return m.Gauge.GetValue()
			}
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return 0
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}

func loadBody(waiting, running, kv float64) []byte {
	return []byte("vllm:num_requests_waiting " + fmtFloat(waiting) + "\nvllm:num_requests_running " + fmtFloat(running) +
		"\nvllm:kv_cache_usage_perc " + fmtFloat(kv) + "\n")
}

func TestOnChangeHealthAndSaturation(t *testing.T) {
	a, b, c := newFakeReplica(t, "vllm.txt"), newFakeReplica(t, "vllm.txt"), newFakeReplica(t, "vllm.txt")
	cfg := testConfig(t, staticCluster("c1", a.addr(), b.addr())+staticCluster("c2", c.addr()), baseSignals)
	var got changes
	reg := prometheus.NewRegistry()
	h := newHarness(t, Options{Config: cfg, OnChange: got.record, Registry: reg})

	h.step(0)
	if calls := got.take(); !reflect.DeepEqual(calls, [][]string{{"c1", "c2"}}) {
		t.Errorf("first round: %v", calls)
	}
	h.step(time.Second)
	if calls := got.take(); calls != nil {
		t.Errorf("values only: OnChange called %v", calls)
	}

	a.set(answer500, answerOK, nil)
	h.step(time.Second)
	h.step(100 * time.Millisecond)
	h.wantState(a.addr(), StateUnhealthy)
	if calls := got.take(); !reflect.DeepEqual(calls, [][]string{{"c1"}}) {
		t.Errorf("unhealthy: %v", calls)
	}
	if v := gauge(t, reg, "ilb_signals_replicas", map[string]string{"cluster": "c1", "state": "unhealthy"}); v != 1 {
		t.Errorf("replicas gauge %v", v)
	}
	if v := gauge(t, reg, "ilb_signals_scrapes_total", map[string]string{"cluster": "c1", "result": "probe_failed"}); v != 2 {
		t.Errorf("probe_failed scrapes %v", v)
	}

	c.set(answerOK, answerOK, loadBody(10, 4, 0.5)) // 10 waiting >= 2 × 4 running
	s := h.step(900 * time.Millisecond)
	if cl := s.Clusters["c2"]; !cl.Saturated || cl.SaturatedReplicas != 1 || !h.replica(c.addr()).Saturated {
		t.Errorf("c2 not saturated: %+v", cl)
	}
	if calls := got.take(); !reflect.DeepEqual(calls, [][]string{nil}) {
		t.Errorf("saturated: OnChange must fire without a health change: %v", calls)
	}
	if v := gauge(t, reg, "ilb_signals_cluster_saturated", map[string]string{"cluster": "c2"}); v != 1 {
		t.Errorf("saturated gauge %v", v)
	}

	c.set(answerOK, answerOK, loadBody(0, 4, 0.96)) // KV full
	s = h.step(time.Second)
	if !s.Clusters["c2"].Saturated || got.take() != nil {
		t.Error("still saturated through the KV cache: no health change expected")
	}
	c.set(answerOK, answerOK, loadBody(1, 4, 0.5))
	h.step(time.Second)
	if calls := got.take(); !reflect.DeepEqual(calls, [][]string{nil}) {
		t.Errorf("unsaturated: %v", calls)
	}

	b.set(answerOK, answerOK, loadBody(10, 0, 0.1)) // a is unhealthy: b is c1's only serving replica
	s = h.step(time.Second)
	if cl := s.Clusters["c1"]; !cl.Saturated || cl.SaturatedReplicas != 1 {
		t.Errorf("c1 %+v", cl)
	}
	if calls := got.take(); !reflect.DeepEqual(calls, [][]string{nil}) {
		t.Errorf("c1 saturated: %v", calls)
	}

	a.set(answerOK, answerOK, nil)
	h.step(time.Second)
	h.step(time.Second)
	h.wantState(a.addr(), StateWarming)
	if cl := h.m.Snapshot().Clusters["c1"]; cl.Saturated || cl.SaturatedReplicas != 1 {
		t.Errorf("c1 with a warming unsaturated replica: %+v", cl)
	}
	if calls := got.take(); !reflect.DeepEqual(calls, [][]string{{"c1"}}) {
		t.Errorf("recovered (one more serving replica, no longer saturated): %v", calls)
	}
}

func TestClusterStates(t *testing.T) {
	cfg := testConfig(t, staticCluster("c1", "127.0.0.1:1")+staticCluster("c2", "127.0.0.1:2"), baseSignals)
	s := &Snapshot{Clusters: map[string]Cluster{
		"c1": {Name: "c1", Ready: 2, Stale: 1, Warming: 2, Ramps: []float64{0.1, 0.55}, Draining: 1, Unhealthy: 2, Starting: 3},
	}}
	got := s.ClusterStates(cfg)
	c1 := got["c1"]
	// Starting replicas (not probed yet) count as ready.
	if c1.Ready != 6 || c1.Draining != 1 || c1.Unhealthy != 2 || !reflect.DeepEqual(c1.Warming, []float64{0.1, 0.55}) {
		t.Errorf("c1 %+v", c1)
	}
	if d := c1.Capacity - 100*(6+0.1+0.55); d > 1e-9 || d < -1e-9 {
		t.Errorf("capacity %v, want 665", c1.Capacity)
	}
	if c2 := got["c2"]; c2.Capacity != 0 || c2.Ready != 0 {
		t.Errorf("a cluster without replicas has no capacity: %+v", c2)
	}
	s.Clusters["c1"].Ramps[0] = 0.9
	if c1.Warming[0] != 0.1 {
		t.Error("ClusterStates shares the snapshot's ramps")
	}
}

func TestDisabledCountsEveryEndpointReady(t *testing.T) {
	cfg := testConfig(t, staticCluster("c1", "127.0.0.1:1", "127.0.0.1:2"), `  {disabled: true}`)
	m, err := New(Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Snapshot().Clusters["c1"]; c.Ready != 2 {
		t.Errorf("cluster %+v", c)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := m.Run(ctx); err != nil {
		t.Error(err)
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New without a config")
	}
	cfg := testConfig(t, staticCluster("c1", "127.0.0.1:1"), baseSignals)
	cfg.Signals.Concurrency = 0
	if _, err := New(Options{Config: cfg}); err == nil || !strings.Contains(err.Error(), "invalid settings") {
		t.Errorf("New with concurrency 0: %v", err)
	}
	cfg = testConfig(t, staticCluster("c1", "127.0.0.1:1"), baseSignals)
	cfg.Clusters[0].Engine = config.EngineKind("llamacpp")
	if _, err := New(Options{Config: cfg}); err == nil || !strings.Contains(err.Error(), "no built-in metric mapping") {
		t.Errorf("New with an unknown engine: %v", err)
	}
	reg := prometheus.NewRegistry()
	cfg = testConfig(t, staticCluster("c1", "127.0.0.1:1"), baseSignals)
	if _, err := New(Options{Config: cfg, Registry: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Config: cfg, Registry: reg}); err == nil {
		t.Error("registering twice on one registry must fail")
	}
}

// TestRunOnLoopback runs the real loop in real time: a replica is found
// ready, then goes unhealthy when it dies, within Interval + RetryDelay
// plus scheduling slack; Run returns nil once ctx is cancelled.
func TestRunOnLoopback(t *testing.T) {
	f := newFakeReplica(t, "vllm.txt")
	cfg := testConfig(t, staticCluster("c1", f.addr()),
		`  {interval: 50ms, timeout: 40ms, retry_delay: 10ms, unhealthy_after: 2, healthy_after: 2}`)
	events := make(chan []string, 100)
	m, err := New(Options{Config: cfg, OnChange: func(_ *Snapshot, h []string) {
		select {
		case events <- h:
		default: // never block the monitor
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()

	waitFor := func(what string, cond func(Replica) bool) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			select {
			case <-events:
			case <-time.After(5 * time.Second):
				t.Fatalf("timed out waiting for %s: %+v", what, m.Snapshot().Replicas)
			}
			if r := m.Snapshot().Endpoints("c1"); len(r) == 1 && cond(r[0]) {
				return time.Since(start)
			}
		}
	}
	waitFor("ready", func(r Replica) bool { return r.State == StateReady })
	f.set(answer500, answerOK, nil)
	took := waitFor("unhealthy", func(r Replica) bool { return r.State == StateUnhealthy })
	if took > time.Second {
		t.Errorf("unhealthy after %v, want about interval + retry delay (60ms)", took)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if err := m.Run(t.Context()); err == nil {
		t.Error("a second Run must fail")
	}
}

// TestConcurrencyBound checks that no more than Signals.Concurrency
// scrapes are in flight across all replicas.
func TestConcurrencyBound(t *testing.T) {
	var mu sync.Mutex
	inFlight, peak := 0, 0
	two := make(chan struct{}) // closed when two requests are in flight at once
	var once sync.Once
	var addrs []string
	for range 6 {
		f := newFakeReplica(t, "vllm.txt")
		inner := f.srv.Config.Handler
		f.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			inFlight++
			peak = max(peak, inFlight)
			if inFlight == 2 {
				once.Do(func() { close(two) })
			}
			mu.Unlock()
			select { // the first request waits for a second one: the bound is reached, never passed
			case <-two:
			case <-r.Context().Done():
			}
			inner.ServeHTTP(w, r)
			mu.Lock()
			inFlight--
			mu.Unlock()
		})
		addrs = append(addrs, f.addr())
	}
	cfg := testConfig(t, staticCluster("c1", addrs...), `  {interval: 1s, timeout: 500ms, concurrency: 2}`)
	h := newHarness(t, Options{Config: cfg})
	s := h.step(0)
	if s.Clusters["c1"].Ready != 6 {
		t.Fatalf("cluster %+v", s.Clusters["c1"])
	}
	if peak != 2 {
		t.Errorf("peak concurrency %d, want 2", peak)
	}
}
