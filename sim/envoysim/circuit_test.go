package envoysim

import (
	"net/http"
	"slices"
	"sync"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/ilbproject/ilb/envoy"
)

// TestCircuitBreakerOverflow: a request beyond max_requests or
// max_pending_requests gets Envoy's overflow reply (onUpstreamReset with
// reset reason overflow, dropped: 503, x-envoy-overloaded: true unless
// suppress_envoy_headers) and counts upstream_rq_pending_overflow; it is not
// retried (wouldRetryFromReset) nor reported to outlier detection.
func TestCircuitBreakerOverflow(t *testing.T) {
	for _, c := range []struct {
		name       string
		maxReq     uint32
		maxPending uint32
		hold       bool // keep one request in flight first
		suppress   bool
	}{
		{name: "max_requests", maxReq: 1, maxPending: 100, hold: true},
		{name: "max_pending_requests 0 without a connection", maxReq: 100, maxPending: 0},
		{name: "suppress_envoy_headers", maxReq: 1, maxPending: 100, hold: true, suppress: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, nil)
			up, entered, release := holdingBackend(t)
			cl := staticCluster("pool", false, up.addr())
			cl.CircuitBreakers = ilbCircuitBreakers(10000)
			th := cl.CircuitBreakers.Thresholds[0]
			th.MaxRequests, th.MaxPendingRequests = u32(c.maxReq), u32(c.maxPending)
			cl.OutlierDetection = ilbOutlier()
			l := httpListener("main", "routes")
			if c.suppress {
				setRouter(t, l, &routerv3.Router{SuppressEnvoyHeaders: true})
			}
			h.push(cl, l, routeConfig("routes", vhost("all", []string{"*"}, ilbRoute("pool"))))
			h.start(nil)
			held := make(chan int, 1)
			if c.hold {
				go func() {
					resp, err := doErr("GET", h.url("main", "/hold"), "")
					if err != nil {
						held <- 0
						return
					}
					held <- resp.status
				}()
				<-entered
			}
			resp := do(t, "GET", h.url("main", "/"), nil, "")
			want := "upstream connect error or disconnect/reset before headers. reset reason: overflow"
			if resp.status != 503 || resp.body != want {
				t.Errorf("got %d %q, want 503 %q", resp.status, resp.body, want)
			}
			if got, wantHdr := resp.header.Get("x-envoy-overloaded"), map[bool]string{false: "true", true: ""}[c.suppress]; got != wantHdr {
				t.Errorf("x-envoy-overloaded %q, want %q", got, wantHdr)
			}
			st := h.env.Stats().Clusters["pool"]
			if st.PendingOverflow != 1 || st.RetryTotal != 0 || st.OutlierDetectedGatewayFailure != 0 {
				t.Errorf("stats %+v", st)
			}
			if n := len(up.appRequests()); n != map[bool]int{false: 0, true: 1}[c.hold] {
				t.Errorf("upstream got %d requests", n)
			}
			close(release)
			if c.hold {
				if s := <-held; s != 200 {
					t.Errorf("held request: %d", s)
				}
			}
		})
	}
}

// TestCircuitBreakerOverflowNotSent: a request that waits for a new
// connection and overflows max_requests once it is ready
// (ConnPoolImplBase::attachStreamToClient) is never sent upstream, however
// the transport's goroutines are scheduled. Each overflow races the write
// of the request on its fresh connection, so many are tried.
func TestCircuitBreakerOverflowNotSent(t *testing.T) {
	const n = 100
	h := newHarness(t, nil)
	up, entered, release := holdingBackend(t)
	cl := staticCluster("pool", false, up.addr())
	cl.CircuitBreakers = ilbCircuitBreakers(10000)
	th := cl.CircuitBreakers.Thresholds[0]
	th.MaxRequests = u32(1)
	h.push(cl, httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"}, ilbRoute("pool"))))
	h.start(nil)
	held := make(chan int, 1)
	go func() {
		resp, err := doErr("GET", h.url("main", "/hold"), "")
		if err != nil {
			held <- 0
			return
		}
		held <- resp.status
	}()
	<-entered
	for i := range n {
		if resp := do(t, "GET", h.url("main", "/"), nil, ""); resp.status != 503 {
			t.Errorf("request %d: got %d %q, want 503", i, resp.status, resp.body)
		}
	}
	if st := h.env.Stats().Clusters["pool"]; st.PendingOverflow != n {
		t.Errorf("upstream_rq_pending_overflow %d, want %d", st.PendingOverflow, n)
	}
	var paths []string
	for _, r := range up.appRequests() {
		paths = append(paths, r.path)
	}
	if !slices.Equal(paths, []string{"/hold"}) {
		t.Errorf("upstream got %q, want only /hold", paths)
	}
	close(release)
	if s := <-held; s != 200 {
		t.Errorf("held request: %d", s)
	}
}

// setRouter replaces the router filter configuration of l's HCM.
func setRouter(t *testing.T, l *listenerv3.Listener, r *routerv3.Router) {
	t.Helper()
	var hcm hcmv3.HttpConnectionManager
	f := l.GetFilterChains()[0].GetFilters()[0]
	if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	last := hcm.HttpFilters[len(hcm.HttpFilters)-1]
	last.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: envoy.MustAny(r)}
	f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: envoy.MustAny(&hcm)}
}

// holdingBackend is an upstream that holds requests for /hold until
// release is closed (or the client goes away); entered is closed when the
// first one arrives.
func holdingBackend(t *testing.T) (up *backend, entered <-chan struct{}, release chan struct{}) {
	t.Helper()
	in := make(chan struct{})
	release = make(chan struct{})
	var once sync.Once
	up = startBackend(t, "a", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			once.Do(func() { close(in) })
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	})
	return up, in, release
}
