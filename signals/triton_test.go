package signals

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestTritonReplica monitors a replica served as Triton serves one: the
// inference port answers readiness at /v2/health/ready (and nothing at
// /health or /metrics), the metrics are on their own port. The replica is
// ready with the backend's waiting, running and KV usage.
func TestTritonReplica(t *testing.T) {
	health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v2/health/ready" {
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(health.Close)
	body := readFixture(t, "triton_trtllm.txt")
	metrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(body)
	}))
	t.Cleanup(metrics.Close)
	port := metrics.Listener.Addr().String()
	port = port[strings.LastIndexByte(port, ':')+1:]
	addr := strings.TrimPrefix(health.URL, "http://")
	cfg := testConfig(t, fmt.Sprintf("  - {name: c1, region: r1, engine: triton, models: [m1], profile: p1, endpoints: [%q], metrics: {port: %s}}\n", addr, port),
		`  {interval: 50ms, timeout: 40ms, retry_delay: 10ms, unhealthy_after: 2, healthy_after: 1}`)
	if got := cfg.Clusters[0].Metrics.HealthPath; got != "/v2/health/ready" {
		t.Fatalf("triton's default health path %q", got)
	}
	changed := make(chan struct{}, 1)
	m, err := New(Options{Config: cfg, OnChange: func(*Snapshot, []string) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for {
		if r := m.Snapshot().Endpoints("c1"); len(r) == 1 && r[0].State == StateReady {
			x := r[0].Metrics
			if x.Waiting != 6 || x.Running != 46 || !x.KVKnown || x.KVUsage != 0.25 {
				t.Errorf("metrics %+v: want waiting 6, running 46, KV 0.25", x)
			}
			return
		}
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("not ready: %+v", m.Snapshot().Replicas)
		}
	}
}

// TestUnknownIsNull: what the monitor does not know is null in JSON
// (/debug/signals), never 0, and reads back as unknown.
func TestUnknownIsNull(t *testing.T) {
	c := Cluster{Name: "c", Stale: 1, Waiting: 0, KVUsage: 0}
	b, err := json.Marshal(Snapshot{Clusters: map[string]Cluster{"c": c}, Replicas: []Replica{{Cluster: "c", Metrics: Metrics{Waiting: 2}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"Waiting":null`, `"Running":null`, `"TokensPerSecond":null`, `"KVUsage":null`, `"TTFTSeconds":null`, `"TTFTMeanSeconds":null`, `"Waiting":2`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s: %s", want, b)
		}
	}
	var back Snapshot
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Clusters["c"]; got.LoadKnown != 0 || got.KVKnown || got.Stale != 1 {
		t.Errorf("read back %+v", got)
	}
	known := Cluster{Name: "k", Waiting: 3, Running: 4, LoadKnown: 1, KVUsage: 0.5, KVKnown: true}
	if b, _ := json.Marshal(known); !strings.Contains(string(b), `"Waiting":3`) || !strings.Contains(string(b), `"KVUsage":0.5`) {
		t.Errorf("known values: %s", b)
	}
}
