package envoysim

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// retryResult is what a retry case observed.
type retryResult struct {
	resp  response
	err   error
	ups   []*backend
	stats ClusterStats
	all   Stats
	waits []time.Duration
	clock *fakeClock
}

// attempts counts the application requests every backend received.
func (r retryResult) attempts() int {
	n := 0
	for _, u := range r.ups {
		n += len(u.appRequests())
	}
	return n
}

// testHost is an endpoint of a retry case: a closed address, or a backend
// with app (nil: the default handler).
type testHost struct {
	closed bool
	app    http.HandlerFunc
}

// closedHost is an address nothing listens on.
func closedHost() testHost { return testHost{closed: true} }

// shared is n backends running the same handler (sharing its state).
func shared(app http.HandlerFunc, n int) []testHost {
	out := make([]testHost, n)
	for i := range out {
		out[i] = testHost{app: app}
	}
	return out
}

// failFirst answers the first application request (across the backends
// sharing it) with status and extra headers, and every later one with 200
// "ok".
func failFirst(status int, header map[string]string) http.HandlerFunc {
	var count atomic.Int64
	return func(w http.ResponseWriter, _ *http.Request) {
		if count.Add(1) == 1 {
			for k, v := range header {
				w.Header().Set(k, v)
			}
			w.WriteHeader(status)
			_, _ = w.Write([]byte("first attempt failed"))
			return
		}
		_, _ = w.Write([]byte("ok"))
	}
}

// TestRetries runs ILB's retry policy (connect-failure, reset and
// retriable status codes 503 and 429, two retries on other hosts, jittered
// back-off, retry-after honoured up to 5 s, a retry budget) against real
// upstreams. Host picks are deterministic: Rand counts from 0, so with two
// endpoints the first attempt goes to the second one.
func TestRetries(t *testing.T) {
	clock := newFakeClock()
	for _, c := range []struct {
		name     string
		hosts    []testHost
		policy   func(p *routev3.RetryPolicy)
		cluster  func(c *clusterv3.Cluster)
		listener func(l *listenerv3.Listener)
		body     string
		check    func(t *testing.T, r retryResult)
	}{
		{
			name:  "503 retried on another host",
			hosts: shared(failFirst(503, nil), 2),
			check: func(t *testing.T, r retryResult) {
				if r.resp.status != 200 || r.resp.body != "ok" {
					t.Fatalf("got %d %q", r.resp.status, r.resp.body)
				}
				if a, b := len(r.ups[0].appRequests()), len(r.ups[1].appRequests()); a != 1 || b != 1 {
					t.Errorf("attempts per host %d, %d: want 1 each (previous_hosts)", a, b)
				}
				if r.stats.RetryTotal != 1 || r.stats.RetrySuccess != 1 || r.stats.RetryBackoffExponential != 1 {
					t.Errorf("stats %+v", r.stats)
				}
				if len(r.waits) != 1 || r.waits[0] >= 25*time.Millisecond {
					t.Errorf("back-off %v, want one wait in [0, 25ms)", r.waits)
				}
			},
		},
		{
			name:  "retry-after delays the retry",
			hosts: shared(failFirst(429, map[string]string{"retry-after": "2"}), 2),
			check: func(t *testing.T, r retryResult) {
				if r.resp.status != 200 || len(r.waits) != 1 || r.waits[0] < 2*time.Second || r.waits[0] >= 3*time.Second {
					t.Errorf("status %d waits %v: want a wait in [2s, 3s)", r.resp.status, r.waits)
				}
				if r.stats.RetryBackoffRatelimited != 1 {
					t.Errorf("stats %+v", r.stats)
				}
			},
		},
		{
			name:  "retry-after beyond max_interval is ignored",
			hosts: shared(failFirst(503, map[string]string{"retry-after": "60"}), 2),
			check: func(t *testing.T, r retryResult) {
				if r.resp.status != 200 || len(r.waits) != 1 || r.waits[0] >= 25*time.Millisecond {
					t.Errorf("status %d waits %v: want the exponential back-off", r.resp.status, r.waits)
				}
			},
		},
		{
			name:  "unix timestamp reset header",
			hosts: shared(failFirst(429, map[string]string{"x-ratelimit-reset": strconv.FormatInt(clock.Now().Unix()+3, 10)}), 2),
			policy: func(p *routev3.RetryPolicy) {
				p.RateLimitedRetryBackOff.ResetHeaders = []*routev3.RetryPolicy_ResetHeader{{Name: "X-RateLimit-Reset", Format: routev3.RetryPolicy_UNIX_TIMESTAMP}}
			},
			check: func(t *testing.T, r retryResult) {
				if len(r.waits) != 1 || r.waits[0] < 3*time.Second || r.waits[0] >= 4500*time.Millisecond {
					t.Errorf("waits %v: want one in [3s, 4.5s)", r.waits)
				}
			},
		},
		{
			name:  "connect failure retried",
			hosts: []testHost{{}, closedHost()},
			check: func(t *testing.T, r retryResult) {
				if r.resp.status != 200 || r.attempts() != 1 || r.all.UpstreamConnectFailures != 1 || r.stats.RetryTotal != 1 {
					t.Errorf("status %d attempts %d stats %+v", r.resp.status, r.attempts(), r.stats)
				}
			},
		},
		{
			name:  "num_retries respected",
			hosts: shared(always(503), 3),
			check: func(t *testing.T, r retryResult) {
				if r.resp.status != 503 || r.resp.body != "nope" || r.attempts() != 3 {
					t.Errorf("got %d %q after %d attempts, want the upstream's 503 after 3", r.resp.status, r.resp.body, r.attempts())
				}
				if r.stats.RetryTotal != 2 || r.stats.RetryLimitExceeded != 1 || r.stats.RetrySuccess != 0 {
					t.Errorf("stats %+v", r.stats)
				}
			},
		},
		{
			name:    "retry budget exhausted",
			hosts:   shared(failFirst(503, nil), 2),
			cluster: func(c *clusterv3.Cluster) { c.CircuitBreakers = budget(0, 0) },
			check: func(t *testing.T, r retryResult) {
				if r.resp.status != 503 || r.attempts() != 1 || r.stats.RetryOverflow != 1 || r.stats.RetryTotal != 0 {
					t.Errorf("got %d after %d attempts, stats %+v", r.resp.status, r.attempts(), r.stats)
				}
			},
		},
		{
			name:  "body replayed on the retry",
			hosts: shared(failFirst(503, nil), 2),
			body:  "0123456789abcdef",
			check: func(t *testing.T, r retryResult) {
				a, b := r.ups[0].appRequests(), r.ups[1].appRequests()
				if r.resp.status != 200 || len(a) != 1 || len(b) != 1 || a[0].body != "0123456789abcdef" || b[0].body != a[0].body {
					t.Errorf("status %d bodies %v / %v", r.resp.status, a, b)
				}
			},
		},
		{
			name:     "no retry when the body exceeds the buffer limit",
			hosts:    shared(failFirst(503, nil), 2),
			listener: func(l *listenerv3.Listener) { l.PerConnectionBufferLimitBytes = u32(8) },
			body:     "0123456789abcdef",
			check: func(t *testing.T, r retryResult) {
				if r.resp.status != 503 || r.attempts() != 1 || r.stats.RetryOrShadowAbandoned != 1 || r.stats.RetryTotal != 0 {
					t.Errorf("got %d after %d attempts, stats %+v", r.resp.status, r.attempts(), r.stats)
				}
			},
		},
		{
			name:  "no retry once the response started",
			hosts: shared(resetAfterHeaders, 2),
			check: func(t *testing.T, r retryResult) {
				if r.err == nil || r.resp.status != 200 || !strings.HasPrefix(r.resp.body, "partial") || r.attempts() != 1 {
					t.Errorf("got %d %q err %v after %d attempts: want a truncated 200 and no retry", r.resp.status, r.resp.body, r.err, r.attempts())
				}
			},
		},
		{
			name:   "per try timeout retried",
			hosts:  []testHost{{}, {app: stall}},
			policy: func(p *routev3.RetryPolicy) { p.PerTryTimeout = durationpb.New(100 * time.Millisecond) },
			check: func(t *testing.T, r retryResult) {
				if r.resp.status != 200 || r.all.UpstreamPerTryTimeouts != 1 || r.stats.RetryTotal != 1 {
					t.Errorf("got %d, stats %+v", r.resp.status, r.all)
				}
			},
		},
		{
			name:  "connect failures exhaust the retries",
			hosts: []testHost{closedHost(), closedHost()},
			check: func(t *testing.T, r retryResult) {
				want := "upstream connect error or disconnect/reset before headers. retried and the latest reset reason: connection failure"
				if r.resp.status != 503 || r.resp.body != want || r.all.UpstreamConnectFailures != 3 {
					t.Errorf("got %d %q, stats %+v", r.resp.status, r.resp.body, r.all)
				}
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, nil)
			res := retryResult{clock: clock}
			cla := loadAssignment("pool")
			for i, th := range c.hosts {
				addr := closedAddr(t)
				if !th.closed {
					b := startBackend(t, "h"+strconv.Itoa(i), th.app)
					res.ups = append(res.ups, b)
					addr = b.addr()
				}
				cla.Endpoints[0].LbEndpoints = append(cla.Endpoints[0].LbEndpoints, lbEndpoint(addr, corev3.HealthStatus_HEALTHY))
			}
			cl := edsCluster("pool", clusterv3.Cluster_LEAST_REQUEST)
			cl.CircuitBreakers = ilbCircuitBreakers(10000)
			if c.cluster != nil {
				c.cluster(cl)
			}
			r := ilbRoute("pool")
			if c.policy != nil {
				c.policy(r.GetRoute().GetRetryPolicy())
			}
			l := httpListener("main", "routes")
			if c.listener != nil {
				c.listener(l)
			}
			h.push(cl, cla, l, routeConfig("routes", vhost("all", []string{"*"}, r)))
			rec := &sleepRecorder{}
			h.startOpts(Options{Rand: counter(0), Clock: clock, RetrySleep: rec.sleep})
			method := "GET"
			if c.body != "" {
				method = "POST"
			}
			res.resp, res.err = doErr(method, h.url("main", "/v1/chat"), c.body)
			res.waits = rec.recorded()
			res.all = h.env.Stats()
			res.stats = res.all.Clusters["pool"]
			c.check(t, res)
		})
	}
}

// always answers every request with status and body "nope".
func always(status int) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		_, _ = w.Write([]byte("nope"))
	}
}

// resetAfterHeaders sends 200 and part of the body, then drops the
// connection.
func resetAfterHeaders(w http.ResponseWriter, _ *http.Request) {
	_, _ = w.Write([]byte("partial"))
	w.(http.Flusher).Flush()
	panic(http.ErrAbortHandler)
}

// stall answers only after the request is cancelled or 5 s.
func stall(w http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(5 * time.Second):
	}
	w.WriteHeader(http.StatusOK)
}

// budget is a circuit breaker whose retry budget allows
// max(percent × active, minConcurrency) retries.
func budget(percent float64, minConcurrency uint32) *clusterv3.CircuitBreakers {
	cb := ilbCircuitBreakers(10000)
	cb.Thresholds[0].RetryBudget = &clusterv3.CircuitBreakers_Thresholds_RetryBudget{
		BudgetPercent:       &typev3.Percent{Value: percent},
		MinRetryConcurrency: u32(minConcurrency),
	}
	return cb
}
