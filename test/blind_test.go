package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ilbproject/ilb/app"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/signals"
	"github.com/ilbproject/ilb/sim/engine"
	"github.com/ilbproject/ilb/sim/envoysim"
	"github.com/ilbproject/ilb/xds"
)

// blindEngine is a simulated engine (package engine's handler) behind a
// switch that makes ILB's health probes hang, and only ILB's: Envoy's own
// health checks and the requests are answered. That is how a fleet looks
// to an ILB starved of CPU: every probe of its own times out, while the
// engines are fine.
type blindEngine struct {
	addr string

	mu      sync.Mutex
	blind   chan struct{} // non-nil while ILB's probes hang; closed to release them
	hung    int           // ILB probes received while hanging
	handler http.Handler
}

func (e *blindEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/health" && r.Header.Get("User-Agent") == signals.UserAgent {
		e.mu.Lock()
		release := e.blind
		if release != nil {
			e.hung++
		}
		e.mu.Unlock()
		if release != nil {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
	}
	e.handler.ServeHTTP(w, r)
}

func (e *blindEngine) hang() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.blind, e.hung = make(chan struct{}), 0
}

func (e *blindEngine) release() {
	e.mu.Lock()
	defer e.mu.Unlock()
	close(e.blind)
	e.blind = nil
}

func (e *blindEngine) hungProbes() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hung
}

// startBlindEngines serves one blindEngine per endpoint of c on loopback
// and points the endpoints at them.
func startBlindEngines(t *testing.T, c *config.Config) []*blindEngine {
	t.Helper()
	var out []*blindEngine
	c.Clusters = slices.Clone(c.Clusters)
	for ci := range c.Clusters {
		cl := &c.Clusters[ci]
		cl.Endpoints = slices.Clone(cl.Endpoints)
		var served []string
		for _, m := range cl.Models {
			served = append(served, m)
			for _, cm := range c.Models {
				if cm.Name == m {
					served = append(served, cm.Aliases...)
				}
			}
		}
		for i := range cl.Endpoints {
			srv, err := engine.New(engine.Options{Name: fmt.Sprintf("%s/%d", cl.Name, i), Cluster: cl.Name, Models: served})
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			e := &blindEngine{addr: ln.Addr().String(), handler: srv.Handler()}
			hs := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = hs.Serve(ln) }()
			t.Cleanup(func() { _ = hs.Close() })
			cl.Endpoints[i] = e.addr
			out = append(out, e)
		}
	}
	return out
}

// startEnvoysim runs an envoysim of source against a and returns its
// listener's URL.
func startEnvoysim(ctx context.Context, t *testing.T, a *app.App, source string) string {
	t.Helper()
	b, err := envoy.Bootstrap(a.Config, source, envoy.BootstrapOptions{NodeID: source + "-envoy", XDS: a.XDSAddr(), ExtProc: a.ExtProcAddr()})
	if err != nil {
		t.Fatal(err)
	}
	e, err := envoysim.New(envoysim.Options{Bootstrap: b})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if err := e.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	addr, ok := e.ListenerAddr(xds.ListenerName)
	if !ok {
		t.Fatalf("envoysim of %s has no listener", source)
	}
	return "http://" + addr
}

// adminMetric reads one series of ILB's /metrics; -1 when absent.
func adminMetric(t *testing.T, a *app.App, name string, labels map[string]string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + a.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range fams[name].GetMetric() {
		match := 0
		for _, l := range m.GetLabel() {
			if labels[l.GetName()] == l.GetValue() {
				match++
			}
		}
		if match == len(labels) {
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// TestBlindILBKeepsServing: every engine's health endpoint stops answering
// ILB (hangs), as an ILB starved of CPU sees its fleet. ILB takes itself
// for blind rather than the fleet for dead: every replica keeps its state,
// no cluster is excluded, requests of both a fail-open and a fail-closed
// source are served (no 503 no_capacity), the controller fails static
// (blind), and /debug/signals and /metrics say so. When the probes answer
// again, no replica goes through a warm-up ramp.
func TestBlindILBKeepsServing(t *testing.T) {
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	engines := startBlindEngines(t, c)
	c.Listen = config.Listen{XDS: "127.0.0.1:0", ExtProc: "127.0.0.1:0", Admin: "127.0.0.1:0"}
	c.Sources = slices.Clone(c.Sources)
	for i := range c.Sources {
		c.Sources[i].Listener = "127.0.0.1:0"
	}
	c.Controller.Policy = config.PolicyProportional
	c.Controller.Tick = config.Duration(500 * time.Millisecond)
	c.Signals.Interval = config.Duration(500 * time.Millisecond)
	c.Signals.Timeout = config.Duration(250 * time.Millisecond)
	c.Signals.RetryDelay = config.Duration(100 * time.Millisecond)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.Start(ctx, app.Options{Config: c})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = a.Wait() })
	us, eu := startEnvoysim(ctx, t, a, "edge-us"), startEnvoysim(ctx, t, a, "edge-eu")

	waitUntil(t, "every replica probed", 10*time.Second, func() bool {
		s := a.Signals.Snapshot()
		return !slices.ContainsFunc(s.Replicas, func(r signals.Replica) bool { return r.State != signals.StateReady && r.State != signals.StateStale })
	})
	serve := func(when string) {
		t.Helper()
		for range 5 {
			for _, r := range []struct{ url, model string }{{us, "llama3-8b"}, {us, "qwen-7b"}, {eu, "llama3-8b"}, {eu, "qwen-7b"}} {
				resp, body := chat(t, r.url, r.model, nil)
				if resp.StatusCode != http.StatusOK {
					t.Errorf("%s: %s %s: %d %s", when, r.url, r.model, resp.StatusCode, body)
				}
			}
		}
	}
	serve("before")
	before := map[string]int{}
	for _, r := range a.Signals.Snapshot().Replicas {
		before[r.Address] = len(r.Transitions)
	}

	hangAt := time.Now()
	for _, e := range engines {
		e.hang()
	}
	waitUntil(t, "blind on silent failures", 10*time.Second, func() bool {
		b := a.Signals.Snapshot().Blind
		return b != nil && strings.Contains(b.Reason, "silent health probe failures")
	})
	// Five hung probes per replica: a streak of four failures over more
	// than two intervals, which made every replica unhealthy (and every
	// cluster excluded) before ILB knew it could be blind.
	waitUntil(t, "five hung probes per replica", 20*time.Second, func() bool {
		return !slices.ContainsFunc(engines, func(e *blindEngine) bool { return e.hungProbes() < 5 })
	})
	s := a.Signals.Snapshot()
	if s.Blind == nil {
		t.Fatalf("no longer blind with every probe hanging: %+v", s.Replicas)
	}
	for _, r := range s.Replicas {
		if r.State != signals.StateReady && r.State != signals.StateStale {
			t.Errorf("%s %s: %s (%s) while blind; want its last known state", r.Cluster, r.Address, r.State, r.Reason)
		}
	}
	serve("blind")

	var dbg struct {
		Signals struct {
			Blind *struct{ Reason string }
		} `json:"signals"`
	}
	resp, err := http.Get("http://" + a.AdminAddr() + "/debug/signals")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&dbg)
	resp.Body.Close()
	if err != nil || dbg.Signals.Blind == nil || !strings.Contains(dbg.Signals.Blind.Reason, "silent health probe failures") {
		t.Errorf("/debug/signals: %v, blind %+v", err, dbg.Signals.Blind)
	}
	if v := adminMetric(t, a, "ilb_signals_blind", nil); v != 1 {
		t.Errorf("ilb_signals_blind %v while blind", v)
	}
	waitUntil(t, "the controller fails static (blind)", 10*time.Second, func() bool {
		return adminMetric(t, a, "ilb_controller_fail_static", map[string]string{"reason": "blind"}) == 1
	})

	for _, e := range engines {
		e.release()
	}
	waitUntil(t, "sight back", 10*time.Second, func() bool { return a.Signals.Snapshot().Blind == nil })
	serve("after")
	for _, r := range a.Signals.Snapshot().Replicas {
		for _, tr := range r.Transitions[min(before[r.Address], len(r.Transitions)):] {
			if tr.At.After(hangAt) && tr.To != signals.StateReady && tr.To != signals.StateStale {
				t.Errorf("%s %s: transition %+v after the probes hung; want none but ready/stale (no warm-up)", r.Cluster, r.Address, tr)
			}
		}
	}
	if v := adminMetric(t, a, "ilb_signals_blind", nil); v != 0 {
		t.Errorf("ilb_signals_blind %v after blindness", v)
	}
}
