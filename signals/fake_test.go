package signals

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
)

// fakeClock is a settable clock, safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Answers a fake replica can give.
const (
	answerOK   = "ok"
	answer500  = "500"
	answerHang = "hang" // block until the client gives up
	answerHuge = "huge" // metrics only: an endless body
)

// fakeReplica is an engine on 127.0.0.1 whose /health and /metrics answers
// the test scripts.
type fakeReplica struct {
	srv *httptest.Server

	mu          sync.Mutex
	health      string
	metrics     string
	body        []byte
	contentType string
	healthHits  int
}

func newFakeReplica(t testing.TB, fixture string) *fakeReplica {
	t.Helper()
	f := &fakeReplica{health: answerOK, metrics: answerOK, body: readFixture(t, fixture), contentType: "text/plain; version=0.0.4; charset=utf-8"}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeReplica) addr() string { return strings.TrimPrefix(f.srv.URL, "http://") }

// set scripts the next answers; body nil keeps the current body.
func (f *fakeReplica) set(health, metrics string, body []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.health, f.metrics = health, metrics
	if body != nil {
		f.body = body
	}
}

// healthProbes counts the health probes received.
func (f *fakeReplica) healthProbes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.healthHits
}

func (f *fakeReplica) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	answer, body, ct := f.health, f.body, f.contentType
	if r.URL.Path == "/metrics" {
		answer = f.metrics
	} else {
		f.healthHits++
	}
	f.mu.Unlock()
	switch answer {
	case answer500:
		http.Error(w, "engine error", http.StatusInternalServerError)
	case answerHang:
		<-r.Context().Done()
	case answerHuge:
		w.Header().Set("Content-Type", ct)
		line := []byte("# padding padding padding padding padding padding padding padding\n")
		for r.Context().Err() == nil {
			if _, err := w.Write(line); err != nil {
				return
			}
		}
	default:
		if r.URL.Path != "/metrics" {
			_, _ = w.Write([]byte("ok"))
			return
		}
		w.Header().Set("Content-Type", ct)
		_, _ = w.Write(body)
	}
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fakeResolver answers DNS lookups from maps; err, when set, fails every
// lookup.
type fakeResolver struct {
	mu    sync.Mutex
	hosts map[string][]string
	srv   map[string][]*net.SRV
	err   error
}

var _ Resolver = (*fakeResolver)(nil)

func (r *fakeResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return nil, r.err
	}
	a, ok := r.hosts[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return a, nil
}

func (r *fakeResolver) LookupSRV(_ context.Context, _, _, name string) (string, []*net.SRV, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return "", nil, r.err
	}
	return name, r.srv[name], nil
}

func (r *fakeResolver) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
}

var errDNS = errors.New("i/o timeout")

// testConfig builds a validated config with the given clusters (YAML list
// items) and signals settings (YAML mapping body).
func testConfig(t testing.TB, clusters, signals string) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`
regions: [{name: r1}]
sources: [{name: s1, region: r1}]
models: [{name: m1}]
profiles: [{name: p1, capacity_per_replica: 100}]
clusters:
%s
signals:
%s
`, clusters, signals)
	c, err := config.Parse([]byte(y))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, y)
	}
	return c
}

// staticCluster is a vLLM cluster item with the given endpoints.
func staticCluster(name string, addrs ...string) string {
	return fmt.Sprintf("  - {name: %s, region: r1, engine: vllm, models: [m1], profile: p1, endpoints: [%s]}\n",
		name, `"`+strings.Join(addrs, `", "`)+`"`)
}

// baseSignals: 1s interval, 300ms timeout (hanging answers cost that much
// real time), 100ms retry, thresholds 2/2, stale after 3, 10s warmup.
const baseSignals = `  {interval: 1s, timeout: 300ms, retry_delay: 100ms, unhealthy_after: 2, healthy_after: 2, stale_after: 3, warmup: 10s}`

// harness is a monitor on a fake clock with zero jitter.
type harness struct {
	t     testing.TB
	m     *Monitor
	clock *fakeClock
	ctx   context.Context
}

func newHarness(t testing.TB, o Options) *harness {
	t.Helper()
	clock := newFakeClock()
	o.Now = clock.Now
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	m.jitter = func(string, uint64) float64 { return 0 }
	return &harness{t: t, m: m, clock: clock, ctx: t.Context()}
}

// step advances the clock by d, then runs one round.
func (h *harness) step(d time.Duration) *Snapshot {
	h.clock.Advance(d)
	h.m.step(h.ctx)
	return h.m.Snapshot()
}

// replica returns the replica at addr in the latest snapshot.
func (h *harness) replica(addr string) Replica {
	h.t.Helper()
	for _, r := range h.m.Snapshot().Replicas {
		if r.Address == addr {
			return r
		}
	}
	h.t.Fatalf("no replica %s in %+v", addr, h.m.Snapshot().Replicas)
	return Replica{}
}

// wantState fails unless the replica at addr is in state want.
func (h *harness) wantState(addr string, want State) Replica {
	h.t.Helper()
	r := h.replica(addr)
	if r.State != want {
		h.t.Fatalf("%s: state %s (%s), want %s; last error %q", addr, r.State, r.Reason, want, r.LastError)
	}
	return r
}
