package envoysim

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ilbproject/ilb/envoy"
)

// TestWeightedClustersOverHTTP draws the weighted cluster from a request
// header, falling back to the stream's random value (Rand) when the header
// is missing, repeated or not a uint64 (facts §1).
func TestWeightedClustersOverHTTP(t *testing.T) {
	h := newHarness(t, nil)
	h.upstream("a", nil)
	h.upstream("b", nil)
	h.push(append(h.clusters(),
		httpListener("main", "routes"),
		routeConfig("routes", vhost("all", []string{"*"}, weightedRoute("x-draw", "a", 30, "b", 70))))...)
	h.start(constant(50)) // 50 % 100 = 50: cluster b
	for _, c := range []struct {
		name, draw, want string
	}{
		{"draw 0", "0", "a"},
		{"draw 29", "29", "a"},
		{"draw 30", "30", "b"},
		{"draw 99", "99", "b"},
		{"draw 100 wraps", "100", "a"},
		{"draw 129", "129", "a"},
		{"unparsable uses Rand", "abc", "b"},
		{"missing uses Rand", "", "b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			hdr := map[string]string{}
			if c.draw != "" {
				hdr["x-draw"] = c.draw
			}
			if got := do(t, "GET", h.url("main", "/"), hdr, "").header.Get("x-upstream"); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

// TestClusterHeader routes on the first value of cluster_header; a missing
// header or an unknown cluster gets cluster_not_found_response_code with an
// empty body (facts §6).
func TestClusterHeader(t *testing.T) {
	h := newHarness(t, nil)
	h.upstream("a", nil)
	byHeader := func(prefix string, code routev3.RouteAction_ClusterNotFoundResponseCode) *routev3.Route {
		r := prefixRoute(prefix, "")
		r.Action = &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier:            &routev3.RouteAction_ClusterHeader{ClusterHeader: "x-cluster"},
			ClusterNotFoundResponseCode: code,
		}}
		return r
	}
	h.push(append(h.clusters(),
		httpListener("main", "routes"),
		routeConfig("routes", vhost("all", []string{"*"},
			byHeader("/404", routev3.RouteAction_NOT_FOUND),
			byHeader("/500", routev3.RouteAction_INTERNAL_SERVER_ERROR),
			byHeader("/", routev3.RouteAction_SERVICE_UNAVAILABLE))))...)
	h.start(nil)
	for _, c := range []struct {
		name, path, cluster string
		status              int
	}{
		{"known", "/x", "a", 200},
		{"unknown default code", "/x", "nope", 503},
		{"missing header", "/x", "", 503},
		{"not found code", "/404", "nope", 404},
		{"internal error code", "/500", "", 500},
	} {
		t.Run(c.name, func(t *testing.T) {
			hdr := map[string]string{}
			if c.cluster != "" {
				hdr["x-cluster"] = c.cluster
			}
			resp := do(t, "GET", h.url("main", c.path), hdr, "")
			if resp.status != c.status {
				t.Fatalf("status %d, want %d", resp.status, c.status)
			}
			if c.status != 200 && (resp.body != "" || resp.header.Get("content-type") != "") {
				t.Errorf("cluster not found reply has body %q / content-type %q", resp.body, resp.header.Get("content-type"))
			}
		})
	}
	if got := h.env.Stats().NoCluster; got != 4 {
		t.Errorf("NoCluster = %d", got)
	}
}

// TestRouteCacheClearing: the route is computed when the ext_proc filter
// starts, on the original headers; only a response with a header_mutation
// may clear it, per route_cache_action (facts §2).
func TestRouteCacheClearing(t *testing.T) {
	mutation := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("x-target", "b")}}
	cases := []struct {
		name        string
		action      extprocfilterv3.ExternalProcessor_RouteCacheAction
		disable     bool
		common      *extprocv3.CommonResponse
		want        string
		rematches   uint64
		cleared     uint64
		ignored     uint64
		disabledCnt uint64
	}{
		{name: "mutation and clear", common: &extprocv3.CommonResponse{HeaderMutation: mutation, ClearRouteCache: true}, want: "b", rematches: 1, cleared: 1},
		{name: "clear without mutation", common: &extprocv3.CommonResponse{ClearRouteCache: true}, want: "a", ignored: 1},
		{name: "mutation without clear", common: &extprocv3.CommonResponse{HeaderMutation: mutation}, want: "a"},
		{name: "empty mutation counts as present", common: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{}, ClearRouteCache: true}, want: "a", rematches: 1, cleared: 1},
		{name: "CLEAR without clear_route_cache", action: extprocfilterv3.ExternalProcessor_CLEAR, common: &extprocv3.CommonResponse{HeaderMutation: mutation}, want: "b", rematches: 1, cleared: 1},
		{name: "RETAIN ignores clear", action: extprocfilterv3.ExternalProcessor_RETAIN, common: &extprocv3.CommonResponse{HeaderMutation: mutation, ClearRouteCache: true}, want: "a", disabledCnt: 1},
		{name: "disable_clear_route_cache is RETAIN", disable: true, common: &extprocv3.CommonResponse{HeaderMutation: mutation, ClearRouteCache: true}, want: "a", disabledCnt: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, onRequestHeaders(func(*extprocv3.ProcessingRequest) *extprocv3.CommonResponse { return c.common }))
			h.upstream("a", nil)
			ub := h.upstream("b", nil)
			toB := routeTo("b")
			toB.Match.Headers = []*routev3.HeaderMatcher{{Name: "x-target", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
				StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "b"}},
			}}}
			h.push(append(h.clusters(),
				httpListener("main", "routes", extProc("ilb", &extprocfilterv3.ExternalProcessor{RouteCacheAction: c.action, DisableClearRouteCache: c.disable})),
				routeConfig("routes", vhost("all", []string{"*"}, toB, routeTo("a"))))...)
			h.start(nil)
			resp := do(t, "GET", h.url("main", "/"), nil, "")
			if got := resp.header.Get("x-upstream"); got != c.want {
				t.Fatalf("routed to %q, want %q", got, c.want)
			}
			st := h.env.Stats()
			if st.RouteRematches != c.rematches || st.ExtProc.ClearRouteCache != c.cleared ||
				st.ExtProc.ClearRouteCacheIgnored != c.ignored || st.ExtProc.ClearRouteCacheDisabled != c.disabledCnt {
				t.Errorf("stats: rematches %d cleared %d ignored %d disabled %d", st.RouteRematches, st.ExtProc.ClearRouteCache, st.ExtProc.ClearRouteCacheIgnored, st.ExtProc.ClearRouteCacheDisabled)
			}
			if c.want == "a" && c.common.GetHeaderMutation() == mutation {
				// The mutation still reaches the upstream of the cached route.
				if got := h.ups["a"].last(t).header.Get("x-target"); got != "b" {
					t.Errorf("upstream a saw x-target %q", got)
				}
			}
			_ = ub
		})
	}
}

// TestPerRouteDisable turns the ext_proc filter off for one route with
// ExtProcPerRoute{disabled: true}.
func TestPerRouteDisable(t *testing.T) {
	h := newHarness(t, nil)
	h.upstream("a", nil)
	off := prefixRoute("/off", "a")
	off.TypedPerFilterConfig = map[string]*anypb.Any{"ilb": envoy.MustAny(&extprocfilterv3.ExtProcPerRoute{
		Override: &extprocfilterv3.ExtProcPerRoute_Disabled{Disabled: true},
	})}
	h.push(append(h.clusters(),
		httpListener("main", "routes", extProc("ilb", &extprocfilterv3.ExternalProcessor{})),
		routeConfig("routes", vhost("all", []string{"*"}, off, routeTo("a"))))...)
	h.start(nil)
	if resp := do(t, "GET", h.url("main", "/off"), nil, ""); resp.status != 200 {
		t.Fatalf("status %d", resp.status)
	}
	if n := len(h.proc.requests()); n != 0 {
		t.Errorf("disabled route sent %d messages", n)
	}
	do(t, "GET", h.url("main", "/on"), nil, "")
	if n := len(h.proc.requests()); n != 2 {
		t.Errorf("enabled route sent %d messages, want 2", n)
	}
}

// TestTwoExtProcFilters: filters decode in order and encode in reverse; the
// second filter sees the first one's header mutation; each has its own
// stream (identified here by its initial_metadata).
func TestTwoExtProcFilters(t *testing.T) {
	var mu sync.Mutex
	var order []string
	handler := func(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		name := md.Get("x-filter")[0]
		mu.Lock()
		switch {
		case req.GetRequestHeaders() != nil:
			_, sawFirst := protoHeader(req.GetRequestHeaders().GetHeaders(), "x-first")
			order = append(order, fmt.Sprintf("%s:request(x-first=%v)", name, sawFirst))
		case req.GetResponseHeaders() != nil:
			order = append(order, name+":response")
		}
		mu.Unlock()
		common := &extprocv3.CommonResponse{}
		if name == "first" && req.GetRequestHeaders() != nil {
			common.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("x-first", "1")}}
		}
		return []*extprocv3.ProcessingResponse{respond(req, common)}, nil
	}
	filter := func(name string) *hcmv3.HttpFilter {
		cfg := &extprocfilterv3.ExternalProcessor{}
		extProc(name, cfg)
		cfg.GrpcService.InitialMetadata = []*corev3.HeaderValue{{Key: "x-filter", Value: name}}
		return extProc(name, cfg)
	}
	h := newHarness(t, handler)
	h.upstream("a", nil)
	h.push(append(h.clusters(),
		httpListener("two", "two-routes", filter("first"), filter("second")),
		routeConfig("two-routes", vhost("all", []string{"*"}, routeTo("a"))))...)
	h.start(nil)
	if resp := do(t, "GET", h.url("two", "/"), nil, ""); resp.status != 200 {
		t.Fatalf("status %d", resp.status)
	}
	mu.Lock()
	defer mu.Unlock()
	want := "first:request(x-first=false) second:request(x-first=true) second:response first:response"
	if got := strings.Join(order, " "); got != want {
		t.Errorf("order %q, want %q", got, want)
	}
	if st := h.env.Stats().ExtProc.StreamsStarted; st != 2 {
		t.Errorf("StreamsStarted = %d", st)
	}
}
