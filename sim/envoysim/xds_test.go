package envoysim

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ilbproject/ilb/envoy"
)

// TestNACKKeepsPreviousConfig: a listener using a field envoysim does not
// model is NACKed with an error detail naming the field; the previous
// listener keeps serving and Versions keeps the ACKed version.
func TestNACKKeepsPreviousConfig(t *testing.T) {
	h := newHarness(t, nil)
	h.upstream("a", nil)
	good := []any{httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"}, routeTo("a")))}
	v1 := h.push(append(h.clusters(), good[0].(*listenerv3.Listener), good[1].(*routev3.RouteConfiguration))...)
	h.start(nil)

	bad := httpListener("main", "routes")
	bad.ListenerFilters = []*listenerv3.ListenerFilter{{Name: "envoy.filters.listener.tls_inspector"}}
	h.push(append(h.clusters(), bad, good[1].(*routev3.RouteConfiguration))...)
	waitFor(t, "LDS NACK", func() bool { return len(h.xds.nacks(typeListener)) > 0 })
	nack := h.xds.nacks(typeListener)[0]
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, "listener_filters") {
		t.Errorf("error detail %q does not name the field", msg)
	}
	if nack.GetVersionInfo() != v1 {
		t.Errorf("NACK version_info %q, want previous %q", nack.GetVersionInfo(), v1)
	}
	if got := h.env.Versions()[typeListener]; got != v1 {
		t.Errorf("Versions()[LDS] = %q, want %q", got, v1)
	}
	if st := h.env.Stats().XDS[typeListener]; st.Nacks == 0 || !strings.Contains(st.LastNackError, "listener_filters") {
		t.Errorf("stats %+v", st)
	}
	if resp := do(t, "GET", h.url("main", "/"), nil, ""); resp.status != 200 {
		t.Errorf("previous config not kept: %d", resp.status)
	}

	// A route using a retry feature envoysim does not model is refused too.
	retry := routeTo("a")
	retry.GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: "5xx", PerTryIdleTimeout: durationpbNew(time.Second)}
	h.push(append(h.clusters(), good[0].(*listenerv3.Listener), routeConfig("routes", vhost("all", []string{"*"}, retry)))...)
	waitFor(t, "RDS NACK", func() bool { return len(h.xds.nacks(typeRoute)) > 0 })
	if msg := h.xds.nacks(typeRoute)[0].GetErrorDetail().GetMessage(); !strings.Contains(msg, "retry_policy.per_try_idle_timeout") {
		t.Errorf("RDS error detail %q", msg)
	}

	v4 := h.push(append(h.clusters(), good[0].(*listenerv3.Listener), good[1].(*routev3.RouteConfiguration))...)
	waitFor(t, "ACK of the fixed config", func() bool { return h.env.Versions()[typeListener] == v4 && h.env.Versions()[typeRoute] == v4 })
}

// TestADSReconnectKeepsConfig: when the xDS server goes away the config
// keeps serving; on reconnect new versions apply.
func TestADSReconnectKeepsConfig(t *testing.T) {
	h := newHarness(t, nil)
	h.upstream("a", nil)
	h.upstream("b", nil)
	h.push(append(h.clusters(), httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"}, routeTo("a"))))...)
	h.start(nil)
	h.xds.stop()
	time.Sleep(100 * time.Millisecond)
	if got := do(t, "GET", h.url("main", "/"), nil, "").header.Get("x-upstream"); got != "a" {
		t.Fatalf("without xDS: %q", got)
	}
	v := h.push(append(h.clusters(), httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"}, routeTo("b"))))...)
	h.xds.restart(t)
	waitFor(t, "new routes after reconnect", func() bool { return h.env.Versions()[typeRoute] == v })
	if got := do(t, "GET", h.url("main", "/"), nil, "").header.Get("x-upstream"); got != "b" {
		t.Errorf("after reconnect: %q", got)
	}
}

// TestEDSHealthStatus: UNHEALTHY, TIMEOUT and DRAINING hosts get no traffic
// while enough hosts are healthy; below the 50% panic threshold every host
// is used (LoadBalancerBase::isHostSetInPanic).
func TestEDSHealthStatus(t *testing.T) {
	h := newHarness(t, nil)
	names := []string{"healthy", "unknown", "unhealthy", "draining", "timeout"}
	statuses := []corev3.HealthStatus{corev3.HealthStatus_HEALTHY, corev3.HealthStatus_UNKNOWN, corev3.HealthStatus_UNHEALTHY, corev3.HealthStatus_DRAINING, corev3.HealthStatus_TIMEOUT}
	ups := map[string]*upstream{}
	for _, n := range names {
		ups[n] = startUpstream(t, n, false, nil)
	}
	cla := loadAssignment("pool")
	for i, n := range names {
		cla.Endpoints[0].LbEndpoints = append(cla.Endpoints[0].LbEndpoints, lbEndpoint(ups[n].addr(), statuses[i]))
	}
	h.push(edsCluster("pool", clusterv3.Cluster_ROUND_ROBIN), cla, httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"}, routeTo("pool"))))
	h.start(counter(7))
	seen := map[string]int{}
	for range 10 {
		seen[do(t, "GET", h.url("main", "/"), nil, "").header.Get("x-upstream")]++
	}
	if seen["healthy"] != 5 || seen["unknown"] != 5 || len(seen) != 2 {
		t.Errorf("round robin over healthy hosts: %v", seen)
	}

	// One healthy host of three counted ones: panic mode, all hosts are used.
	panicCLA := loadAssignment("pool",
		lbEndpoint(ups["healthy"].addr(), corev3.HealthStatus_HEALTHY),
		lbEndpoint(ups["unhealthy"].addr(), corev3.HealthStatus_UNHEALTHY),
		lbEndpoint(ups["timeout"].addr(), corev3.HealthStatus_TIMEOUT))
	v := h.push(edsCluster("pool", clusterv3.Cluster_ROUND_ROBIN), panicCLA, httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"}, routeTo("pool"))))
	waitFor(t, "EDS update", func() bool { return h.env.Versions()[typeEndpoint] == v })
	seen = map[string]int{}
	for range 6 {
		seen[do(t, "GET", h.url("main", "/"), nil, "").header.Get("x-upstream")]++
	}
	if seen["healthy"] != 2 || seen["unhealthy"] != 2 || seen["timeout"] != 2 {
		t.Errorf("panic mode: %v", seen)
	}

	// With panic disabled and no healthy host: 503 no healthy upstream.
	noPanic := edsCluster("pool", clusterv3.Cluster_ROUND_ROBIN)
	noPanic.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: 0}}
	v = h.push(noPanic, loadAssignment("pool", lbEndpoint(ups["unhealthy"].addr(), corev3.HealthStatus_UNHEALTHY)),
		httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"}, routeTo("pool"))))
	waitFor(t, "EDS update", func() bool { return h.env.Versions()[typeEndpoint] == v })
	resp := do(t, "GET", h.url("main", "/"), nil, "")
	if resp.status != 503 || resp.body != "no healthy upstream" || resp.header.Get("content-type") != "text/plain" {
		t.Errorf("got %d %q", resp.status, resp.body)
	}
}

// TestLeastRequest: with two hosts and one request in flight on the first,
// power-of-two-choices sends the next requests to the other host.
func TestLeastRequest(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	entered := make(chan struct{})
	slow := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hold" {
				once.Do(func() { close(entered) })
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}
			w.Header().Set("x-upstream", name)
		}
	}
	h := newHarness(t, nil)
	a := startUpstream(t, "a", false, slow("a"))
	b := startUpstream(t, "b", false, slow("b"))
	c := edsCluster("lr-pool", clusterv3.Cluster_LEAST_REQUEST)
	h.push(c, loadAssignment("lr-pool", lbEndpoint(a.addr(), corev3.HealthStatus_HEALTHY), lbEndpoint(b.addr(), corev3.HealthStatus_HEALTHY)),
		httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"}, routeTo("lr-pool"))))
	h.start(counter(0))
	held := make(chan string, 1)
	go func() {
		resp, err := http.Get(h.url("main", "/hold"))
		if err != nil {
			held <- err.Error()
			return
		}
		resp.Body.Close()
		held <- resp.Header.Get("x-upstream")
	}()
	<-entered
	busy := "a"
	if len(b.requests()) == 1 {
		busy = "b"
	}
	for range 4 {
		if got := do(t, "GET", h.url("main", "/"), nil, "").header.Get("x-upstream"); got == busy {
			t.Errorf("request went to the busy host %s", busy)
		}
	}
	close(release)
	if got := <-held; got != busy {
		t.Errorf("held request answered by %q", got)
	}
	if st := h.env.Stats().UpstreamEndpointRequests["lr-pool"]; len(st) != 2 {
		t.Errorf("per-endpoint stats %v", st)
	}
}

// TestUpstreamFailures: route timeout (504), timeout 0 disabled, connect
// failure (503).
func TestUpstreamFailures(t *testing.T) {
	h := newHarness(t, nil)
	h.upstream("slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(300 * time.Millisecond):
		case <-r.Context().Done():
		}
	})
	timed := prefixRoute("/timeout", "slow")
	timed.GetRoute().Timeout = durationpbNew(50 * time.Millisecond)
	unlimited := prefixRoute("/unlimited", "slow")
	unlimited.GetRoute().Timeout = durationpbNew(0)
	h.push(append(h.clusters(), staticCluster("closed", false, closedAddr(t)),
		httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"}, timed, unlimited, prefixRoute("/closed", "closed"))))...)
	h.start(nil)
	for _, c := range []struct {
		path, body string
		status     int
	}{
		{"/timeout", "upstream request timeout", 504},
		{"/unlimited", "", 200},
		{"/closed", "upstream connect error or disconnect/reset before headers. reset reason: connection failure", 503},
	} {
		resp := do(t, "GET", h.url("main", c.path), nil, "")
		if resp.status != c.status || resp.body != c.body {
			t.Errorf("%s: got %d %q", c.path, resp.status, resp.body)
		}
	}
	st := h.env.Stats()
	if st.UpstreamTimeouts != 1 || st.UpstreamConnectFailures != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestHTTP2Upstream proxies to a prior-knowledge HTTP/2 (h2c) upstream.
func TestHTTP2Upstream(t *testing.T) {
	h := newHarness(t, nil)
	up := startUpstream(t, "h2", true, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-proto", r.Proto)
	})
	h.push(staticCluster("h2", true, up.addr()), httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"}, routeTo("h2"))))
	h.start(nil)
	if got := do(t, "GET", h.url("main", "/"), nil, "").header.Get("x-proto"); got != "HTTP/2.0" {
		t.Errorf("upstream protocol %q", got)
	}
}

// TestStrictDNSCluster resolves localhost (IPv4 only).
func TestStrictDNSCluster(t *testing.T) {
	h := newHarness(t, nil)
	up := startUpstream(t, "dns", false, nil)
	c := staticCluster("dns", false, strings.Replace(up.addr(), "127.0.0.1", "localhost", 1))
	c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS}
	c.DnsLookupFamily = clusterv3.Cluster_V4_ONLY
	h.push(c, httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"}, routeTo("dns"))))
	h.start(nil)
	if got := do(t, "GET", h.url("main", "/"), nil, "").header.Get("x-upstream"); got != "dns" {
		t.Errorf("got %q", got)
	}
}

// TestBootstrapRefusesUnsupportedFields: New reports every unsupported field.
func TestBootstrapRefusesUnsupportedFields(t *testing.T) {
	b := testBootstrap("127.0.0.1:1", "127.0.0.1:2")
	b.StaticResources.Clusters[1].OutlierDetection = &clusterv3.OutlierDetection{DetectDegradedHosts: wrapperspb.Bool(true)}
	b.StaticResources.Clusters[1].LbPolicy = clusterv3.Cluster_RING_HASH
	l := httpListener("static", "routes")
	var hcm hcmv3.HttpConnectionManager
	_ = l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm)
	hcm.AddUserAgent = wrapperspb.Bool(true)
	l.GetFilterChains()[0].GetFilters()[0].ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: envoy.MustAny(&hcm)}
	b.StaticResources.Listeners = []*listenerv3.Listener{l}
	b.DynamicResources.AdsConfig.ApiType = corev3.ApiConfigSource_AGGREGATED_DELTA_GRPC
	_, err := New(Options{Bootstrap: b})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"outlier_detection.detect_degraded_hosts", "add_user_agent"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
	// The policy reports every field before compilation; fix them and the
	// semantic errors appear.
	b.StaticResources.Clusters[1].OutlierDetection = nil
	hcm.AddUserAgent = nil
	l.GetFilterChains()[0].GetFilters()[0].ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: envoy.MustAny(&hcm)}
	_, err = New(Options{Bootstrap: b})
	for _, want := range []string{"RING_HASH", "AGGREGATED_DELTA_GRPC"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}

// TestLoadBootstrap reads a YAML bootstrap.
func TestLoadBootstrap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	yaml := `
node: {id: n1, cluster: c1}
dynamic_resources:
  ads_config:
    api_type: GRPC
    transport_api_version: V3
    grpc_services: [{envoy_grpc: {cluster_name: xds}}]
  cds_config: {ads: {}, resource_api_version: V3}
  lds_config: {ads: {}, resource_api_version: V3}
static_resources:
  clusters:
  - name: xds
    type: STRICT_DNS
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: xds
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: localhost, port_value: 18000}}}}]}]
`
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := LoadBootstrap(path)
	if err != nil {
		t.Fatal(err)
	}
	if b.GetNode().GetId() != "n1" {
		t.Errorf("node %v", b.GetNode())
	}
	if err := os.WriteFile(path, []byte(yaml+"  listeners: [{name: l, address: {socket_address: {address: 0.0.0.0, port_value: 0}}, listener_filters: [{name: x}]}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadBootstrap(path); err == nil || !strings.Contains(err.Error(), "listener_filters") {
		t.Errorf("unsupported field accepted: %v", err)
	}
}
