package signals

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// blindWorld is a harness over three clusters: c1 and c2 with two fake
// replicas each, c3 with one.
type blindWorld struct {
	*harness
	reg  *prometheus.Registry
	reps map[string][]*fakeReplica // by cluster
}

func newBlindWorld(t *testing.T, signals string) *blindWorld {
	t.Helper()
	w := &blindWorld{reg: prometheus.NewRegistry(), reps: map[string][]*fakeReplica{}}
	var clusters string
	for _, c := range []struct {
		name string
		n    int
	}{{"c1", 2}, {"c2", 2}, {"c3", 1}} {
		var addrs []string
		for range c.n {
			f := newFakeReplica(t, "vllm.txt")
			w.reps[c.name] = append(w.reps[c.name], f)
			addrs = append(addrs, f.addr())
		}
		clusters += staticCluster(c.name, addrs...)
	}
	w.harness = newHarness(t, Options{Config: testConfig(t, clusters, signals), Registry: w.reg})
	return w
}

// each applies f to the replicas of the named clusters.
func (w *blindWorld) each(clusters []string, f func(*fakeReplica)) {
	for _, c := range clusters {
		for _, r := range w.reps[c] {
			f(r)
		}
	}
}

// states returns every replica's state by cluster, in address order.
func (w *blindWorld) states() map[string][]State {
	out := map[string][]State{}
	for _, r := range w.m.Snapshot().Replicas {
		out[r.Cluster] = append(out[r.Cluster], r.State)
	}
	return out
}

func (w *blindWorld) blindGauge(t *testing.T) float64 {
	t.Helper()
	return gauge(t, w.reg, "ilb_signals_blind", nil)
}

func hang(f *fakeReplica)   { f.set(answerHang, answerOK, nil) }
func heal(f *fakeReplica)   { f.set(answerOK, answerOK, nil) }
func refuse(f *fakeReplica) { f.srv.Close() } // the listener closes: connection refused

func repeat(s State, n int) []State {
	out := make([]State, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestBlindness: silent failures (hanging probes) in most replicas of two
// clusters at once make the monitor blind and hold every replica's state;
// refusals never do, nor does one cluster hanging alone, nor half of two
// clusters (not more than blind_fraction 0.5).
func TestBlindness(t *testing.T) {
	ready := func(n int) []State { return repeat(StateReady, n) }
	tests := []struct {
		name    string
		signals string
		fault   func(w *blindWorld)
		blind   string // substring of the reason; "" for not blind
		want    map[string][]State
	}{
		{
			"hanging in two clusters: blind, states held", baseSignals,
			func(w *blindWorld) { w.each([]string{"c1", "c2"}, hang) },
			"silent health probe failures (timeouts, no answer) at once: 2 of 2 of c1, 2 of 2 of c2",
			map[string][]State{"c1": ready(2), "c2": ready(2), "c3": ready(1)},
		},
		{
			"hanging everywhere with blind_fraction 1: blind", `  {interval: 1s, timeout: 300ms, retry_delay: 100ms, blind_fraction: 1}`,
			func(w *blindWorld) { w.each([]string{"c1", "c2", "c3"}, hang) },
			"2 of 2 of c1, 2 of 2 of c2, 1 of 1 of c3",
			map[string][]State{"c1": ready(2), "c2": ready(2), "c3": ready(1)},
		},
		{
			"connection refused everywhere: not blind, unhealthy as today", baseSignals,
			func(w *blindWorld) { w.each([]string{"c1", "c2", "c3"}, refuse) },
			"",
			map[string][]State{"c1": repeat(StateUnhealthy, 2), "c2": repeat(StateUnhealthy, 2), "c3": repeat(StateUnhealthy, 1)},
		},
		{
			"one cluster hanging alone: a real outage", baseSignals,
			func(w *blindWorld) { w.each([]string{"c1"}, hang) },
			"",
			map[string][]State{"c1": repeat(StateUnhealthy, 2), "c2": ready(2), "c3": ready(1)},
		},
		{
			"half of two clusters hanging: not more than the fraction", baseSignals,
			func(w *blindWorld) { hang(w.reps["c1"][0]); hang(w.reps["c2"][0]) },
			"",
			nil, // checked below: exactly the hanging ones are unhealthy
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newBlindWorld(t, tt.signals)
			w.step(0)
			if got, want := w.states(), (map[string][]State{"c1": ready(2), "c2": ready(2), "c3": ready(1)}); !equalStates(got, want) {
				t.Fatalf("first round: %v", got)
			}
			tt.fault(w)
			// 1s, 1.1s (the retry), 2.1s, 3.1s, 4.1s: on main, every
			// failing replica was unhealthy at 1.1s; a silent streak now
			// needs two intervals and sight.
			for _, d := range []time.Duration{time.Second, 100 * time.Millisecond, time.Second, time.Second, time.Second} {
				s := w.step(d)
				if tt.blind == "" && s.Blind != nil {
					t.Fatalf("blind at %s: %+v", s.At, s.Blind)
				}
			}
			s := w.m.Snapshot()
			switch {
			case tt.blind == "":
				if s.Blind != nil || w.m.Blind() != "" || w.blindGauge(t) != 0 {
					t.Errorf("blind %+v, gauge %v; want not blind", s.Blind, w.blindGauge(t))
				}
			case s.Blind == nil:
				t.Fatalf("not blind; replicas %+v", s.Replicas)
			default:
				if !strings.Contains(s.Blind.Reason, tt.blind) || w.m.Blind() != s.Blind.Reason || w.blindGauge(t) != 1 {
					t.Errorf("blind %+v (gauge %v); want a reason with %q", s.Blind, w.blindGauge(t), tt.blind)
				}
				if want := w.clock.Now().Add(-3100 * time.Millisecond); !s.Blind.Since.Equal(want) {
					t.Errorf("blind since %s, want %s (the first round of timeouts)", s.Blind.Since, want)
				}
				for _, r := range s.Replicas {
					if r.Cluster == "c3" && !strings.Contains(tt.signals, "blind_fraction") {
						continue // not hanging
					}
					if len(r.Transitions) != 1 || r.Ramp != 1 || !strings.HasPrefix(r.LastError, "health probe: timeout") {
						t.Errorf("%s/%s: transitions %+v ramp %v last error %q; want held as ready", r.Cluster, r.Address, r.Transitions, r.Ramp, r.LastError)
					}
				}
			}
			if tt.want != nil {
				if got := w.states(); !equalStates(got, tt.want) {
					t.Errorf("states %v, want %v", got, tt.want)
				}
				return
			}
			for _, r := range s.Replicas {
				hung := r.Address == w.reps["c1"][0].addr() || r.Address == w.reps["c2"][0].addr()
				if want := map[bool]State{true: StateUnhealthy, false: StateReady}[hung]; r.State != want {
					t.Errorf("%s: %s, want %s", r.Address, r.State, want)
				}
			}
		})
	}
}

func equalStates(a, b map[string][]State) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w := b[k]
		if len(v) != len(w) {
			return false
		}
		for i := range v {
			if v[i] != w[i] {
				return false
			}
		}
	}
	return true
}

// TestBlindRecovery: while blind, a definite failure still counts; when
// the replicas answer again the monitor sees, the held replicas are ready
// without a warm-up ramp, and one that still hangs is unhealthy two
// intervals after sight came back, not at once.
func TestBlindRecovery(t *testing.T) {
	w := newBlindWorld(t, baseSignals)
	var got changes
	w.m.onChange = got.record
	w.step(0)
	w.each([]string{"c1", "c2"}, hang)
	w.step(time.Second)
	if s := w.m.Snapshot(); s.Blind == nil {
		t.Fatalf("not blind after a round of timeouts in c1 and c2: %+v", s.Replicas)
	}
	got.take()
	refuse(w.reps["c3"][0])
	w.step(time.Second)            // 2s: c3 refuses once
	w.step(100 * time.Millisecond) // 2.1s: twice
	c3 := w.reps["c3"][0].addr()
	if r := w.wantState(c3, StateUnhealthy); !strings.Contains(r.Reason, "connection refused (2 in a row)") {
		t.Errorf("a refusing replica while blind: %q", r.Reason)
	}
	if calls := got.take(); len(calls) != 1 || len(calls[0]) != 1 || calls[0][0] != "c3" {
		t.Errorf("OnChange %v; want one health change of c3", calls)
	}
	for range 3 {
		w.step(time.Second)
	}

	// Sight comes back, except for one replica of c1 that really hangs.
	stuck := w.reps["c1"][0]
	w.each([]string{"c1", "c2"}, heal)
	hang(stuck)
	s := w.step(time.Second)
	if s.Blind != nil || w.blindGauge(t) != 0 {
		t.Fatalf("still blind with one replica of c1 hanging: %+v", s.Blind)
	}
	for _, f := range append(w.reps["c1"][1:], w.reps["c2"]...) {
		if r := w.wantState(f.addr(), StateReady); len(r.Transitions) != 1 || r.Ramp != 1 || r.LastError != "" {
			t.Errorf("%s after blindness: %+v; want ready all along, no warm-up", f.addr(), r)
		}
	}
	w.step(time.Second)
	w.wantState(stuck.addr(), StateReady) // one interval after sight: not yet
	w.step(time.Second)
	if r := w.wantState(stuck.addr(), StateUnhealthy); !strings.HasPrefix(r.Reason, "health probe: timeout after 300ms (") {
		t.Errorf("reason %q", r.Reason)
	}
}

// TestBlindStartingReplicasStayInitial: an ILB that starts blind holds
// its not-yet-probed replicas as starting (counted as ready) and makes
// them ready, not warming, when they answer.
func TestBlindStartingReplicasStayInitial(t *testing.T) {
	w := newBlindWorld(t, baseSignals)
	w.each([]string{"c1", "c2", "c3"}, hang)
	for _, d := range []time.Duration{0, 100 * time.Millisecond, time.Second, time.Second, time.Second} {
		if s := w.step(d); s.Blind == nil {
			t.Fatalf("not blind at %s: %+v", s.At, s.Replicas)
		}
	}
	if got := w.states(); !equalStates(got, map[string][]State{"c1": repeat(StateStarting, 2), "c2": repeat(StateStarting, 2), "c3": repeat(StateStarting, 1)}) {
		t.Fatalf("states while blind at start: %v", got)
	}
	w.each([]string{"c1", "c2", "c3"}, heal)
	w.step(time.Second)
	for _, r := range w.m.Snapshot().Replicas {
		if r.State != StateReady || r.Reason != "healthy on the first probe round" {
			t.Errorf("%s: %s (%s); want ready at once", r.Address, r.State, r.Reason)
		}
	}
}

// TestLoopLagMakesBlind runs the real loop on a fake clock: a wake more
// than one interval late (the clock jumps while the loop sleeps, as a
// starved process sees it) makes the monitor blind; on-time wakes for two
// intervals end it.
func TestLoopLagMakesBlind(t *testing.T) {
	f := newFakeReplica(t, "vllm.txt")
	cfg := testConfig(t, staticCluster("c1", f.addr()), `  {interval: 100ms, timeout: 50ms, retry_delay: 10ms}`)
	clock := newFakeClock()
	reg := prometheus.NewRegistry()
	m, err := New(Options{Config: cfg, Now: clock.Now, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { _ = m.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	waitFor := func(what string, cond func(*Snapshot) bool, tick func()) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond(m.Snapshot()) {
			if time.Now().After(deadline) {
				t.Fatalf("not %s within 10s: %+v", what, m.Snapshot())
			}
			tick()
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("ready", func(s *Snapshot) bool { return s.Clusters["c1"].Ready == 1 }, func() {})
	if b := m.Snapshot().Blind; b != nil {
		t.Fatalf("blind before any lag: %+v", b)
	}
	clock.Advance(time.Second) // ten intervals in one wake
	waitFor("blind", func(s *Snapshot) bool { return s.Blind != nil }, func() {})
	b := m.Snapshot().Blind
	if !strings.HasPrefix(b.Reason, "the signals loop woke ") || !strings.HasSuffix(b.Reason, " late (interval 100ms)") {
		t.Errorf("reason %q", b.Reason)
	}
	if v := gauge(t, reg, "ilb_signals_blind", nil); v != 1 || m.Blind() != b.Reason {
		t.Errorf("gauge %v, Blind() %q", v, m.Blind())
	}
	// On time again: the clock moves slower than the loop's timers.
	waitFor("no longer blind", func(s *Snapshot) bool { return s.Blind == nil }, func() { clock.Advance(time.Millisecond) })
	if r := m.Snapshot().Endpoints("c1")[0]; r.State != StateReady || len(r.Transitions) != 1 {
		t.Errorf("replica %+v; want ready all along", r)
	}
}

// TestSlotWaitIsNotTheReplicasFault: a scrape that waited more than an
// interval for a worker slot makes the monitor blind (it is behind), and
// its silent failure is not held against the replica.
func TestSlotWaitIsNotTheReplicasFault(t *testing.T) {
	f := newFakeReplica(t, "vllm.txt")
	cfg := testConfig(t, staticCluster("c1", f.addr()), `  {interval: 1s, timeout: 300ms, concurrency: 1}`)
	h := newHarness(t, Options{Config: cfg})
	h.step(0)
	hang(f)
	h.clock.Advance(time.Second)
	h.m.sem <- struct{}{} // every slot taken
	h.m.tick(h.ctx, h.clock.Now())
	h.clock.Advance(1500 * time.Millisecond) // the scrape waits 1.5s for its slot
	<-h.m.sem
	h.m.waitAll(h.ctx) // apply that scrape alone: the next one is due at once
	h.m.evalBlind(h.clock.Now())
	h.m.publish(h.clock.Now(), false)
	s := h.m.Snapshot()
	if s.Blind == nil || s.Blind.Reason != "scrapes waited 1.5s for a worker slot (concurrency 1, interval 1s)" {
		t.Fatalf("blind %+v; want the slot wait", s.Blind)
	}
	if r := h.wantState(f.addr(), StateReady); r.LastError != "" {
		t.Errorf("last error %q: a probe that waited for its slot was held against the replica", r.LastError)
	}
}

// TestProbeTimeoutStartsWithTheSlot: a probe that waited for a worker
// slot longer than its timeout still gets its whole timeout.
func TestProbeTimeoutStartsWithTheSlot(t *testing.T) {
	f := newFakeReplica(t, "vllm.txt")
	// A timeout a loaded machine's loopback probe always meets, and a
	// wait for the slot of three of them.
	cfg := testConfig(t, staticCluster("c1", f.addr()), `  {interval: 1s, timeout: 500ms, concurrency: 1}`)
	h := newHarness(t, Options{Config: cfg})
	h.step(0)
	h.clock.Advance(time.Second)
	h.m.sem <- struct{}{}
	h.m.tick(h.ctx, h.clock.Now())
	time.Sleep(1500 * time.Millisecond) // real time: three timeouts' worth in the queue
	<-h.m.sem
	h.step(0)
	if r := h.wantState(f.addr(), StateReady); r.LastError != "" || !r.LastScrape.Equal(h.clock.Now()) {
		t.Errorf("the probe that waited for its slot: %+v", r)
	}
}

// TestFailureKinds classifies real failures on loopback.
func TestFailureKinds(t *testing.T) {
	cfg := testConfig(t, staticCluster("c1", "127.0.0.1:1"), baseSignals)
	m, err := New(Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	listen := func(t *testing.T) net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	tests := []struct {
		name   string
		addr   func(t *testing.T) string
		silent bool
		text   string
	}{
		{"HTTP 500", func(t *testing.T) string {
			f := newFakeReplica(t, "vllm.txt")
			f.set(answer500, answerOK, nil)
			return f.addr()
		}, false, "HTTP 500"},
		{"connection refused", func(t *testing.T) string {
			ln := listen(t)
			ln.Close()
			return ln.Addr().String()
		}, false, "connection refused"},
		{"closed after connecting", func(t *testing.T) string {
			ln := listen(t)
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					buf := make([]byte, 4096)
					_, _ = c.Read(buf) // the request arrived: close it unanswered
					c.Close()
				}
			}()
			return ln.Addr().String()
		}, false, "EOF"},
		{"reset after connecting", func(t *testing.T) string {
			ln := listen(t)
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					buf := make([]byte, 1)
					_, _ = c.Read(buf) // the request arrived
					_ = c.(*net.TCPConn).SetLinger(0)
					c.Close()
				}
			}()
			return ln.Addr().String()
		}, false, "reset"},
		{"connected, never answered", func(t *testing.T) string { return listen(t).Addr().String() }, true, "timeout after 300ms"},
		{"hanging handler", func(t *testing.T) string {
			f := newFakeReplica(t, "vllm.txt")
			hang(f)
			return f.addr()
		}, true, "timeout after 300ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := m.probe(t.Context(), "http://"+tt.addr(t)+"/health")
			if err == nil {
				t.Fatal("probe succeeded")
			}
			if isSilent(err) != tt.silent || !strings.Contains(err.Error(), tt.text) {
				t.Errorf("%v: silent %v; want silent %v and %q", err, isSilent(err), tt.silent, tt.text)
			}
		})
	}
}
