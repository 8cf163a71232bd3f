package envoysim

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func reqHeaders(kv ...string) *headerMap {
	h := &headerMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.add(kv[i], kv[i+1])
	}
	return h
}

func mustTable(t *testing.T, rc *routev3.RouteConfiguration) *routeTable {
	t.Helper()
	tbl, err := compileRouteTable(rc, func(string) bool { return true }, false)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

func matchedCluster(tbl *routeTable, h *headerMap, random uint64) string {
	rr := tbl.match(h, random)
	if rr == nil {
		return "<none>"
	}
	return rr.cluster
}

// TestVirtualHostSelection follows RouteMatcher::findVirtualHost: exact,
// then the longest suffix wildcard, then the longest prefix wildcard, then
// "*"; case-insensitive; the port is part of the host unless
// ignore_port_in_host_matching.
func TestVirtualHostSelection(t *testing.T) {
	rc := routeConfig("r",
		vhost("exact", []string{"api.example.com", "api.example.com:8080"}, routeTo("exact")),
		vhost("suffix-short", []string{"*.com"}, routeTo("suffix-short")),
		vhost("suffix-long", []string{"*.example.com"}, routeTo("suffix-long")),
		vhost("prefix", []string{"api.*"}, routeTo("prefix")),
		vhost("default", []string{"*"}, routeTo("default")),
	)
	tbl := mustTable(t, rc)
	cases := []struct{ host, want string }{
		{"api.example.com", "exact"},
		{"API.Example.COM", "exact"},
		{"api.example.com:8080", "exact"},
		{"www.example.com", "suffix-long"},
		{"www.other.com", "suffix-short"},
		{".example.com", "suffix-short"}, // "*.example.com" never matches a host no longer than ".example.com"
		{"api.example.org", "prefix"},
		{"www.example.org", "default"},
		// The port is kept: the host ends with neither ".example.com" nor
		// ".com", so the prefix wildcard "api.*" matches.
		{"api.example.com:9090", "prefix"},
	}
	for _, c := range cases {
		t.Run(c.host, func(t *testing.T) {
			if got := matchedCluster(tbl, reqHeaders(":authority", c.host, ":path", "/"), 0); got != c.want {
				t.Errorf("host %q: got %s, want %s", c.host, got, c.want)
			}
		})
	}
	rc.IgnorePortInHostMatching = true
	tbl = mustTable(t, rc)
	if got := matchedCluster(tbl, reqHeaders(":authority", "www.example.com:9090", ":path", "/"), 0); got != "suffix-long" {
		t.Errorf("ignore_port_in_host_matching: got %s", got)
	}
}

func TestDuplicateDomainsRejected(t *testing.T) {
	for name, rc := range map[string]*routev3.RouteConfiguration{
		"two defaults": routeConfig("r", vhost("a", []string{"*"}, routeTo("a")), vhost("b", []string{"*"}, routeTo("b"))),
		"duplicate":    routeConfig("r", vhost("a", []string{"x.com"}, routeTo("a")), vhost("b", []string{"X.com"}, routeTo("b"))),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := compileRouteTable(rc, func(string) bool { return true }, false); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func prefixRoute(prefix, cluster string) *routev3.Route {
	r := routeTo(cluster)
	r.Match.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: prefix}
	return r
}

// TestPathMatching covers prefix, path, safe_regex and path_separated_prefix,
// case_sensitive, and that the query string never takes part.
func TestPathMatching(t *testing.T) {
	mk := func(m *routev3.RouteMatch) *routeTable {
		r := routeTo("hit")
		r.Match = m
		return mustTable(t, routeConfig("r", vhost("v", []string{"*"}, r)))
	}
	regex := func(re string) *matcherv3.RegexMatcher { return &matcherv3.RegexMatcher{Regex: re} }
	cases := []struct {
		name  string
		match *routev3.RouteMatch
		path  string
		want  bool
	}{
		{"prefix", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/v1/"}}, "/v1/chat", true},
		{"prefix case", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/v1/"}}, "/V1/chat", false},
		{"prefix insensitive", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/v1/"}, CaseSensitive: wrapperspb.Bool(false)}, "/V1/chat", true},
		{"path ignores query", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: "/v1/models"}}, "/v1/models?x=1", true},
		{"path exact", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: "/v1/models"}}, "/v1/models/x", false},
		{"regex full match", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: regex("/v[0-9]+/chat")}}, "/v12/chat?stream=1", true},
		{"regex not partial", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: regex("/v[0-9]+")}}, "/v12/chat", false},
		{"separated prefix exact", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: "/api"}}, "/api", true},
		{"separated prefix segment", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: "/api"}}, "/api/x", true},
		{"separated prefix query", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: "/api"}}, "/api?x", true},
		{"separated prefix partial", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: "/api"}}, "/apix", false},
		{"grpc needs content-type", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}, Grpc: &routev3.RouteMatch_GrpcRouteMatchOptions{}}, "/x", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := matchedCluster(mk(c.match), reqHeaders(":authority", "h", ":path", c.path), 0) == "hit"
			if got != c.want {
				t.Errorf("path %q: matched %v, want %v", c.path, got, c.want)
			}
		})
	}
}

// TestHeaderMatchers follows HeaderUtility::matchHeaders (facts §6).
func TestHeaderMatchers(t *testing.T) {
	exact := func(v string) *routev3.HeaderMatcher {
		return &routev3.HeaderMatcher{Name: "x-model", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v}}}}
	}
	present := func(p bool) *routev3.HeaderMatcher {
		return &routev3.HeaderMatcher{Name: "x-model", HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: p}}
	}
	inv := func(m *routev3.HeaderMatcher) *routev3.HeaderMatcher { m.InvertMatch = true; return m }
	missingEmpty := func(m *routev3.HeaderMatcher) *routev3.HeaderMatcher { m.TreatMissingHeaderAsEmpty = true; return m }
	sm := func(s *matcherv3.StringMatcher) *routev3.HeaderMatcher {
		return &routev3.HeaderMatcher{Name: "x-model", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: s}}
	}
	cases := []struct {
		name    string
		m       *routev3.HeaderMatcher
		headers []string // values of x-model; nil: absent
		want    bool
	}{
		{"exact", exact("m1"), []string{"m1"}, true},
		{"exact other", exact("m1"), []string{"m2"}, false},
		{"exact missing", exact("m1"), nil, false},
		{"exact missing inverted", inv(exact("m1")), nil, false},
		{"exact inverted", inv(exact("m1")), []string{"m2"}, true},
		{"multiple values joined", exact("a,b"), []string{"a", "b"}, true},
		{"missing as empty", missingEmpty(exact("")), nil, true},
		{"missing as empty inverted", inv(missingEmpty(exact("m1"))), nil, true},
		{"present", present(true), []string{"x"}, true},
		{"present missing", present(true), nil, false},
		{"absent", present(false), nil, true},
		{"present inverted on missing", inv(present(true)), nil, true},
		{"prefix ignore case", sm(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "LLAMA"}, IgnoreCase: true}), []string{"llama-3"}, true},
		{"suffix", sm(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: "-8b"}}), []string{"llama-8b"}, true},
		{"contains", sm(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Contains{Contains: "ma-"}}), []string{"llama-8b"}, true},
		{"regex", sm(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "llama-[0-9]+b"}}}), []string{"llama-70b"}, true},
		{"deprecated exact empty matches anything", &routev3.HeaderMatcher{Name: "x-model", HeaderMatchSpecifier: &routev3.HeaderMatcher_ExactMatch{ExactMatch: ""}}, []string{"zz"}, true}, //nolint:staticcheck // the deprecated matcher is modelled
		{"range", &routev3.HeaderMatcher{Name: "x-model", HeaderMatchSpecifier: &routev3.HeaderMatcher_RangeMatch{RangeMatch: &typev3.Int64Range{Start: 1, End: 10}}}, []string{"10"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := routeTo("hit")
			r.Match.Headers = []*routev3.HeaderMatcher{c.m}
			tbl := mustTable(t, routeConfig("r", vhost("v", []string{"*"}, r)))
			h := reqHeaders(":authority", "h", ":path", "/")
			for _, v := range c.headers {
				h.add("x-model", v)
			}
			if got := matchedCluster(tbl, h, 0) == "hit"; got != c.want {
				t.Errorf("matched %v, want %v", got, c.want)
			}
		})
	}
}

func weightedRoute(header string, weights ...any) *routev3.Route {
	wc := &routev3.WeightedCluster{}
	if header != "" {
		wc.RandomValueSpecifier = &routev3.WeightedCluster_HeaderName{HeaderName: header}
	}
	for i := 0; i < len(weights); i += 2 {
		wc.Clusters = append(wc.Clusters, &routev3.WeightedCluster_ClusterWeight{Name: weights[i].(string), Weight: u32(uint32(weights[i+1].(int)))})
	}
	r := routeTo("")
	r.Action = &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{WeightedClusters: wc}}}
	return r
}

// TestWeightedPick is pickWeightedCluster (facts §1) without the network.
func TestWeightedPick(t *testing.T) {
	tbl := mustTable(t, routeConfig("r", vhost("v", []string{"*"}, weightedRoute("x-draw", "zero", 0, "a", 30, "b", 70))))
	for _, c := range []struct {
		draws  []string
		random uint64
		want   string
	}{
		{[]string{"0"}, 99, "a"},
		{[]string{"29"}, 99, "a"},
		{[]string{"30"}, 0, "b"},
		{[]string{"99"}, 0, "b"},
		{[]string{"100"}, 99, "a"},
		{[]string{" +130\t"}, 0, "b"},
		{[]string{"-1"}, 0, "a"},                    // unparsable: random 0
		{[]string{"1x"}, 45, "b"},                   // unparsable: random 45
		{[]string{"0", "0"}, 45, "b"},               // repeated: random
		{nil, 29, "a"},                              // missing: random
		{[]string{"18446744073709551616"}, 31, "b"}, // overflow: random
	} {
		h := reqHeaders(":authority", "h", ":path", "/")
		for _, d := range c.draws {
			h.add("x-draw", d)
		}
		if got := matchedCluster(tbl, h, c.random); got != c.want {
			t.Errorf("draws %q random %d: got %s, want %s", c.draws, c.random, got, c.want)
		}
	}
	if _, err := compileRouteTable(routeConfig("r", vhost("v", []string{"*"}, weightedRoute("", "a", 0))), nil, false); err == nil || !strings.Contains(err.Error(), "greater than 0") {
		t.Errorf("zero total weight: %v", err)
	}
}

// TestHeaderParserOrder checks removes, then overwrites, then appends, with
// formatting against the original headers and empty values skipped unless
// keep_empty_value (HeaderParser::evaluateHeaders).
func TestHeaderParserOrder(t *testing.T) {
	opt := func(k, v string, a corev3.HeaderValueOption_HeaderAppendAction) *corev3.HeaderValueOption {
		return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v}, AppendAction: a}
	}
	p, err := compileHeaderParser([]*corev3.HeaderValueOption{
		opt("x-copy", "%REQ(x-in)%", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD),
		opt("x-in", "new", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD),
		opt("x-app", "2", corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD),
		opt("x-absent", "v", corev3.HeaderValueOption_ADD_IF_ABSENT),
		opt("x-app", "ignored", corev3.HeaderValueOption_ADD_IF_ABSENT),
		opt("x-none", "v", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS),
		opt("x-empty", "%REQ(x-missing)%", corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD),
		{Header: &corev3.HeaderValue{Key: "x-kept", Value: "%REQ(x-missing)%"}, KeepEmptyValue: true},
		{Header: &corev3.HeaderValue{Key: "x-legacy", Value: "L"}, Append: wrapperspb.Bool(false)},
	}, []string{"x-gone"})
	if err != nil {
		t.Fatal(err)
	}
	h := reqHeaders("x-in", "old", "x-app", "1", "x-gone", "g", "x-legacy", "old")
	p.evaluate(h, formatContext{req: h})
	for k, want := range map[string]string{"x-copy": "old", "x-in": "new", "x-app": "1,2", "x-absent": "v", "x-kept": "", "x-legacy": "L"} {
		if got, _ := h.joined(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	for _, k := range []string{"x-gone", "x-none", "x-empty"} {
		if h.has(k) {
			t.Errorf("%s present", k)
		}
	}
	for name, bad := range map[string]*corev3.HeaderValueOption{
		"pseudo header":     opt(":path", "/x", 0),
		"host":              opt("Host", "x", 0),
		"append and action": {Header: &corev3.HeaderValue{Key: "k", Value: "v"}, Append: wrapperspb.Bool(true), AppendAction: corev3.HeaderValueOption_ADD_IF_ABSENT},
		"unknown operator":  opt("k", "%START_TIME%", 0),
		"unterminated":      opt("k", "50%", 0),
	} {
		if _, err := compileHeaderParser([]*corev3.HeaderValueOption{bad}, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	f, err := parseFormat("%UPSTREAM_CLUSTER%@%UPSTREAM_HOST% 100%% %REQ(x-a?x-b):3%")
	if err != nil {
		t.Fatal(err)
	}
	if got := f.format(formatContext{req: reqHeaders("x-b", "abcdef"), upstreamHost: "10.0.0.1:80", upstreamCluster: "c"}); got != "c@10.0.0.1:80 100% abc" {
		t.Errorf("format = %q", got)
	}
}
