package envoysim

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// TestStaticBootstrap runs without xDS: a static listener with an inline
// route_config (whose clusters are validated at load), served over HTTP/1.1
// and prior-knowledge HTTP/2 (codec AUTO).
func TestStaticBootstrap(t *testing.T) {
	up := startUpstream(t, "a", false, nil)
	l := listenerWith("static", &hcmv3.HttpConnectionManager{
		StatPrefix:     "static",
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: routeConfig("inline", vhost("all", []string{"*"}, routeTo("a")))},
		HttpFilters:    []*hcmv3.HttpFilter{routerFilter()},
	})
	b := &bootstrapv3.Bootstrap{StaticResources: &bootstrapv3.Bootstrap_StaticResources{
		Clusters:  []*clusterv3.Cluster{staticCluster("a", false, up.addr())},
		Listeners: []*listenerv3.Listener{l},
	}}
	e := startEnvoy(t, b, nil)
	addr, _ := e.ListenerAddr("static")
	if got := do(t, "GET", "http://"+addr+"/", nil, "").body; got != "hello from a" {
		t.Errorf("HTTP/1.1: %q", got)
	}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: p}, Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	client.CloseIdleConnections()
	if resp.ProtoMajor != 2 || string(body) != "hello from a" {
		t.Errorf("h2c: %s %q", resp.Proto, body)
	}

	// An inline route to an unknown cluster is refused at load (validate_clusters defaults to true).
	bad := listenerWith("bad", &hcmv3.HttpConnectionManager{
		StatPrefix:     "bad",
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: routeConfig("inline", vhost("all", []string{"*"}, routeTo("nope")))},
	})
	b.StaticResources.Listeners = []*listenerv3.Listener{bad}
	if _, err := New(Options{Bootstrap: b}); err == nil || !strings.Contains(err.Error(), "unknown cluster 'nope'") {
		t.Errorf("unknown cluster in an inline route: %v", err)
	}
}

// TestExtProcMetadataAndResponseBody: initial_metadata reaches the
// processor as gRPC metadata; a BUFFERED response body is sent once and can
// be replaced.
func TestExtProcMetadataAndResponseBody(t *testing.T) {
	handler := func(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		if b := req.GetResponseBody(); b != nil && b.GetEndOfStream() {
			return []*extprocv3.ProcessingResponse{respond(req, &extprocv3.CommonResponse{
				HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: []string{"content-length"}},
				BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte("rewritten")}},
			})}, nil
		}
		return continueAll(ctx, req)
	}
	cfg := &extprocfilterv3.ExternalProcessor{ProcessingMode: &extprocfilterv3.ProcessingMode{ResponseBodyMode: extprocfilterv3.ProcessingMode_BUFFERED}}
	extProc("ilb", cfg) // fills in grpc_service
	cfg.GrpcService.InitialMetadata = []*corev3.HeaderValue{{Key: "x-ilb-tenant", Value: "t1"}}
	filter := extProc("ilb", cfg)
	h := newHarness(t, handler)
	h.upstream("a", nil)
	h.push(append(h.clusters(), httpListener("main", "routes", filter), routeConfig("routes", vhost("all", []string{"*"}, routeTo("a"))))...)
	h.start(nil)
	resp := do(t, "GET", h.url("main", "/"), nil, "")
	if resp.status != 200 || resp.body != "rewritten" {
		t.Errorf("got %d %q", resp.status, resp.body)
	}
	h.proc.mu.Lock()
	md := h.proc.metadata
	h.proc.mu.Unlock()
	if len(md) != 1 || len(md[0].Get("x-ilb-tenant")) != 1 || md[0].Get("x-ilb-tenant")[0] != "t1" {
		t.Errorf("metadata %v", md)
	}
	n := 0
	for _, r := range h.proc.requests() {
		if r.GetResponseBody() != nil {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d response_body messages", n)
	}
}
