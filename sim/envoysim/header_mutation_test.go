package envoysim

import (
	"net/http"
	"testing"

	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/ilbproject/ilb/envoy"
)

// ilbHeaderMutation is the filter ILB puts first: it strips the internal
// x-ilb-* response headers ext_proc reads, after ext_proc saw them.
func ilbHeaderMutation(request ...*mutationrulesv3.HeaderMutation) *hcmv3.HttpFilter {
	var response []*mutationrulesv3.HeaderMutation
	for _, h := range []string{"x-ilb-served-cluster", "x-ilb-weights-version", "x-ilb-upstream-host"} {
		response = append(response, &mutationrulesv3.HeaderMutation{Action: &mutationrulesv3.HeaderMutation_Remove{Remove: h}})
	}
	hm := &headermutationv3.HeaderMutation{Mutations: &headermutationv3.Mutations{RequestMutations: request, ResponseMutations: response}}
	return &hcmv3.HttpFilter{Name: "envoy.filters.http.header_mutation", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: envoy.MustAny(hm)}}
}

// TestHeaderMutationFilter: first in the chain, header_mutation mutates the
// request before ext_proc sees it and the response after ext_proc saw it,
// local replies included.
func TestHeaderMutationFilter(t *testing.T) {
	h := newHarness(t, nil)
	up := h.upstream("a", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("x-ilb-served-cluster", "a")
		w.Header().Set("x-ilb-upstream-host", "10.0.0.1:8000")
		w.Header().Set("x-upstream", "a")
	})
	routed := routeTo("a")
	missing := prefixRoute("/missing", "nope")
	for _, r := range []*routev3.Route{routed, missing} {
		r.ResponseHeadersToAdd = []*corev3.HeaderValueOption{addHeader("x-ilb-weights-version", "v7", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)}
	}
	request := []*mutationrulesv3.HeaderMutation{
		{Action: &mutationrulesv3.HeaderMutation_Append{Append: &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "x-hm", Value: "from %REQ(x-in)%"}}}},
		{Action: &mutationrulesv3.HeaderMutation_Remove{Remove: "x-drop"}},
	}
	h.push(append(h.clusters(),
		httpListener("main", "routes", ilbHeaderMutation(request...), extProc("ilb", &extprocfilterv3.ExternalProcessor{})),
		routeConfig("routes", vhost("all", []string{"*"}, missing, routed)))...)
	h.start(nil)

	internal := []string{"x-ilb-served-cluster", "x-ilb-weights-version", "x-ilb-upstream-host"}
	for _, c := range []struct {
		name, path string
		status     int
		seen       []string // internal headers ext_proc must see
	}{
		{"upstream response", "/", 200, internal},
		{"local reply", "/missing", 503, []string{"x-ilb-weights-version"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(h.proc.requests())
			resp := do(t, "GET", h.url("main", c.path), map[string]string{"x-in": "client", "x-drop": "1"}, "")
			if resp.status != c.status {
				t.Fatalf("status %d, want %d", resp.status, c.status)
			}
			for _, k := range internal {
				if v := resp.header.Get(k); v != "" {
					t.Errorf("client saw %s: %q", k, v)
				}
			}
			var sawResp, sawReq *corev3.HeaderMap
			for _, r := range h.proc.requests()[before:] {
				if rh := r.GetResponseHeaders(); rh != nil {
					sawResp = rh.GetHeaders()
				}
				if rq := r.GetRequestHeaders(); rq != nil {
					sawReq = rq.GetHeaders()
				}
			}
			for _, k := range c.seen {
				if _, ok := protoHeader(sawResp, k); !ok {
					t.Errorf("ext_proc did not see %s in the response headers", k)
				}
			}
			if v, _ := protoHeader(sawReq, "x-hm"); v != "from client" {
				t.Errorf("ext_proc saw x-hm %q, want the request mutation applied before it", v)
			}
			if _, ok := protoHeader(sawReq, "x-drop"); ok {
				t.Error("ext_proc saw x-drop")
			}
		})
	}
	if got := up.last(t).header; got.Get("x-hm") != "from client" || got.Get("x-drop") != "" {
		t.Errorf("upstream headers %v", got)
	}
}
