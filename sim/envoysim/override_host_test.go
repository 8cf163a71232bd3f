package envoysim

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/common/v3"
	leastrequestv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	overridehostv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/override_host/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ilbproject/ilb/envoy"
)

// GIE endpoint-picker names.
const (
	gieHeader   = "x-gateway-destination-endpoint"
	gieNS       = "envoy.lb"
	gieServed   = "x-gateway-destination-endpoint-served"
	absentEntry = "127.0.0.1:1" // a valid address no cluster of the tests has
)

// gieKey is a metadata key in the envoy.lb namespace.
func gieKey(path ...string) *metadatav3.MetadataKey {
	k := &metadatav3.MetadataKey{Key: gieNS}
	for _, p := range path {
		k.Path = append(k.Path, &metadatav3.MetadataKey_PathSegment{Segment: &metadatav3.MetadataKey_PathSegment_Key{Key: p}})
	}
	return k
}

// lbPolicies lists typed load balancing policies, each named after its type.
func lbPolicies(ms ...proto.Message) *clusterv3.LoadBalancingPolicy {
	p := &clusterv3.LoadBalancingPolicy{}
	for _, m := range ms {
		name := "envoy.load_balancing_policies." + strings.ToLower(string(m.ProtoReflect().Descriptor().Name()))
		p.Policies = append(p.Policies, &clusterv3.LoadBalancingPolicy_Policy{TypedExtensionConfig: &corev3.TypedExtensionConfig{
			Name: name, TypedConfig: envoy.MustAny(m),
		}})
	}
	return p
}

// gieOverrideHost is the override_host policy of a GIE engine cluster:
// the header, then the envoy.lb metadata, the served host reported under
// envoy.lb, least request with slow start as the fallback.
func gieOverrideHost() *overridehostv3.OverrideHost {
	return &overridehostv3.OverrideHost{
		OverrideHostSources: []*overridehostv3.OverrideHost_OverrideHostSource{
			{Header: gieHeader},
			{Metadata: gieKey(gieHeader)},
		},
		SelectedHostKey: gieKey(gieServed),
		FallbackPolicy: lbPolicies(&leastrequestv3.LeastRequest{
			ChoiceCount: u32(2),
			SlowStartConfig: &commonv3.SlowStartConfig{
				SlowStartWindow: durationpb.New(0), // slow start off: the fallback stays deterministic
			},
		}),
	}
}

// gieMetadataOptions let ext_proc write and read the envoy.lb namespace.
func gieMetadataOptions() *extprocfilterv3.MetadataOptions {
	return &extprocfilterv3.MetadataOptions{
		ForwardingNamespaces: &extprocfilterv3.MetadataOptions_MetadataNamespaces{Untyped: []string{gieNS}},
		ReceivingNamespaces:  &extprocfilterv3.MetadataOptions_MetadataNamespaces{Untyped: []string{gieNS}},
	}
}

// pick is what the fake endpoint picker answers on request headers: the
// header value and the envoy.lb metadata value ("" for none), from the
// hosts' addresses.
type pick func(addrs []string) (header, metadata string)

// answerPick answers request headers with p's header mutation and dynamic
// metadata; the rest continues.
func answerPick(addrs *[]string, p pick) procHandler {
	return func(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		if req.GetRequestHeaders() == nil || p == nil {
			return continueAll(ctx, req)
		}
		hdr, md := p(*addrs)
		common := &extprocv3.CommonResponse{}
		if hdr != "" {
			common.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader(gieHeader, hdr)}}
		}
		resp := respond(req, common)
		if md != "" {
			resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{
				gieNS: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{gieHeader: structpb.NewStringValue(md)}}),
			}}
		}
		return []*extprocv3.ProcessingResponse{resp}, nil
	}
}

// overrideResult is what an override_host case observed.
type overrideResult struct {
	resp   response
	addrs  []string // the hosts' addresses, h0 first
	served []string // names of the hosts that got the request, in order
	proc   []*extprocv3.ProcessingRequest
	stats  ClusterStats
}

// servedMetadata returns, for the messages of kind sel, the envoy.lb
// namespace Envoy sent in metadata_context.
func (r overrideResult) servedMetadata(sel func(*extprocv3.ProcessingRequest) bool) []*structpb.Struct {
	var out []*structpb.Struct
	for _, m := range r.proc {
		if sel(m) {
			out = append(out, m.GetMetadataContext().GetFilterMetadata()[gieNS])
		}
	}
	return out
}

func isResponseHeaders(m *extprocv3.ProcessingRequest) bool { return m.GetResponseHeaders() != nil }
func isRequestHeaders(m *extprocv3.ProcessingRequest) bool  { return m.GetRequestHeaders() != nil }

// TestOverrideHost runs the override_host policy of a GIE engine cluster:
// an ext_proc endpoint picker names hosts by header and by envoy.lb
// metadata. The cluster has h0 (HEALTHY), h1 and h2 (UNHEALTHY) and panic
// mode off, so the fallback policy can only pick h0 and only an override
// reaches h1 or h2. The route is ILB's: 503 retried twice with
// previous_hosts.
func TestOverrideHost(t *testing.T) {
	for _, c := range []struct {
		name    string
		pick    pick
		health  map[int]corev3.HealthStatus // overrides of the default health by host index
		fail    map[int]int                 // hosts answering this status always
		cluster func(c *clusterv3.Cluster)
		extProc func(e *extprocfilterv3.ExternalProcessor)
		header  []string // x-gateway-destination-endpoint values the client sends
		served  []string
		check   func(t *testing.T, r overrideResult)
	}{
		{
			name:   "header picks the host",
			pick:   func(a []string) (string, string) { return a[1], "" },
			served: []string{"h1"},
			check: func(t *testing.T, r overrideResult) {
				if got := r.resp.header.Get("x-upstream-host"); got != r.addrs[1] {
					t.Errorf("%%UPSTREAM_HOST%% = %q, want %s", got, r.addrs[1])
				}
			},
		},
		{
			name:   "metadata picks the host",
			pick:   func(a []string) (string, string) { return "", a[2] },
			served: []string{"h2"},
		},
		{
			name:   "header entries come before metadata entries",
			pick:   func(a []string) (string, string) { return a[1], a[2] },
			served: []string{"h1"},
		},
		{
			name: "sources are read in their configured order",
			pick: func(a []string) (string, string) { return a[1], a[2] },
			cluster: func(c *clusterv3.Cluster) {
				withOverrideHost(c, func(o *overridehostv3.OverrideHost) {
					o.OverrideHostSources[0], o.OverrideHostSources[1] = o.OverrideHostSources[1], o.OverrideHostSources[0]
				})
			},
			served: []string{"h2"},
		},
		{
			name:   "an entry absent from the cluster is skipped",
			pick:   func(a []string) (string, string) { return absentEntry + " , " + a[2], "" },
			served: []string{"h2"},
		},
		{
			name:   "unhealthy and draining hosts are picked without a health check",
			pick:   func(a []string) (string, string) { return a[2], "" },
			health: map[int]corev3.HealthStatus{2: corev3.HealthStatus_DRAINING},
			served: []string{"h2"},
		},
		{
			name:   "an empty list leaves the pick to the fallback",
			pick:   func([]string) (string, string) { return " , ,", "" },
			served: []string{"h0"},
		},
		{
			name:   "unparseable entries leave the pick to the fallback",
			pick:   func(a []string) (string, string) { return "not-an-address, " + strings.Split(a[1], ":")[0], "" },
			served: []string{"h0"},
		},
		{
			name:   "no picker answer: fallback",
			served: []string{"h0"},
		},
		{
			name:   "only the first header value counts",
			header: []string{"h2", "h1"},
			served: []string{"h2"},
		},
		{
			name:   "retries consume the next entries, then the fallback",
			pick:   func(a []string) (string, string) { return a[1] + "," + a[2], "" },
			fail:   map[int]int{1: 503, 2: 503},
			served: []string{"h1", "h2", "h0"},
			check: func(t *testing.T, r overrideResult) {
				if r.resp.status != 200 || r.stats.RetryTotal != 2 {
					t.Errorf("status %d, retries %d: want 200 after 2 retries", r.resp.status, r.stats.RetryTotal)
				}
				if got := r.resp.header.Get("x-upstream-host"); got != r.addrs[0] {
					t.Errorf("%%UPSTREAM_HOST%% = %q, want the fallback's %s", got, r.addrs[0])
				}
			},
		},
		{
			name:   "retry host predicates do not apply to entries",
			pick:   func(a []string) (string, string) { return a[1] + "," + a[1], "" },
			fail:   map[int]int{1: 503},
			served: []string{"h1", "h1", "h0"},
		},
		{
			name:   "the header entries then the metadata entries on retries",
			pick:   func(a []string) (string, string) { return a[1], a[2] },
			fail:   map[int]int{1: 503},
			served: []string{"h1", "h2"},
		},
		{
			name:    "metadata outside the receiving namespaces is dropped",
			pick:    func(a []string) (string, string) { return "", a[1] },
			extProc: func(e *extprocfilterv3.ExternalProcessor) { e.MetadataOptions.ReceivingNamespaces = nil },
			served:  []string{"h0"},
		},
		{
			name:   "the served host reaches ext_proc on the response",
			pick:   func(a []string) (string, string) { return a[1], a[2] },
			fail:   map[int]int{1: 503},
			served: []string{"h1", "h2"},
			check: func(t *testing.T, r overrideResult) {
				if md := r.servedMetadata(isRequestHeaders); len(md) != 1 || md[0] != nil {
					t.Errorf("request headers metadata_context envoy.lb = %v, want none yet", md)
				}
				md := r.servedMetadata(isResponseHeaders)
				if len(md) != 1 {
					t.Fatalf("%d response headers messages", len(md))
				}
				f := md[0].GetFields()
				if got := f[gieServed].GetStringValue(); got != r.addrs[2] {
					t.Errorf("%s = %q, want the retried host %s", gieServed, got, r.addrs[2])
				}
				// The picker's own key stays: setDynamicMetadata merges.
				if got := f[gieHeader].GetStringValue(); got != r.addrs[2] {
					t.Errorf("%s = %q, want the picker's list", gieHeader, got)
				}
			},
		},
		{
			name:    "without forwarding namespaces nothing is sent",
			pick:    func(a []string) (string, string) { return a[1], "" },
			extProc: func(e *extprocfilterv3.ExternalProcessor) { e.MetadataOptions.ForwardingNamespaces = nil },
			served:  []string{"h1"},
			check: func(t *testing.T, r overrideResult) {
				for _, m := range r.proc {
					if m.GetMetadataContext() == nil || len(m.GetMetadataContext().GetFilterMetadata()) != 0 {
						t.Errorf("metadata_context %v, want an empty one", m.GetMetadataContext())
					}
				}
			},
		},
		{
			name:   "a fallback pick is reported as served",
			pick:   func([]string) (string, string) { return absentEntry, "" },
			served: []string{"h0"},
			check: func(t *testing.T, r overrideResult) {
				if md := r.servedMetadata(isResponseHeaders); len(md) != 1 || md[0].GetFields()[gieServed].GetStringValue() != r.addrs[0] {
					t.Errorf("served metadata %v, want %s", md, r.addrs[0])
				}
			},
		},
		{
			name: "a nested selected_host_key path",
			pick: func(a []string) (string, string) { return a[2], "" },
			cluster: func(c *clusterv3.Cluster) {
				withOverrideHost(c, func(o *overridehostv3.OverrideHost) { o.SelectedHostKey = gieKey("served", "addr") })
			},
			served: []string{"h2"},
			check: func(t *testing.T, r overrideResult) {
				md := r.servedMetadata(isResponseHeaders)
				if len(md) != 1 || md[0].GetFields()["served"].GetStructValue().GetFields()["addr"].GetStringValue() != r.addrs[2] {
					t.Errorf("served metadata %v, want envoy.lb.served.addr %s", md, r.addrs[2])
				}
			},
		},
		{
			name: "round robin fallback",
			pick: func([]string) (string, string) { return "", "" },
			cluster: func(c *clusterv3.Cluster) {
				withOverrideHost(c, func(o *overridehostv3.OverrideHost) { o.FallbackPolicy = lbPolicies(&roundrobinv3.RoundRobin{}) })
			},
			served: []string{"h0"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			var addrs []string
			h := newHarness(t, answerPick(&addrs, c.pick))
			var mu sync.Mutex
			var served []string
			cla := loadAssignment("pool")
			health := []corev3.HealthStatus{corev3.HealthStatus_HEALTHY, corev3.HealthStatus_UNHEALTHY, corev3.HealthStatus_UNHEALTHY}
			for i := range health {
				if hs, ok := c.health[i]; ok {
					health[i] = hs
				}
				name, status := "h"+strconv.Itoa(i), c.fail[i]
				b := startBackend(t, name, func(w http.ResponseWriter, _ *http.Request) {
					mu.Lock()
					served = append(served, name)
					mu.Unlock()
					if status != 0 {
						w.WriteHeader(status)
					}
					_, _ = io.WriteString(w, "hello from "+name)
				})
				addrs = append(addrs, b.addr())
				cla.Endpoints[0].LbEndpoints = append(cla.Endpoints[0].LbEndpoints, lbEndpoint(b.addr(), health[i]))
			}
			cl := edsCluster("pool", clusterv3.Cluster_LEAST_REQUEST)
			cl.LoadBalancingPolicy = lbPolicies(gieOverrideHost())
			cl.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: 0}}
			if c.cluster != nil {
				c.cluster(cl)
			}
			ep := &extprocfilterv3.ExternalProcessor{FailureModeAllow: false, MetadataOptions: gieMetadataOptions()}
			if c.extProc != nil {
				c.extProc(ep)
			}
			r := ilbRoute("pool")
			r.ResponseHeadersToAdd = []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-upstream-host", Value: "%UPSTREAM_HOST%"}}}
			h.push(cl, cla, httpListener("main", "routes", extProc("ilb", ep)), routeConfig("routes", vhost("all", []string{"*"}, r)))
			h.startOpts(Options{Rand: counter(0), RetrySleep: (&sleepRecorder{}).sleep})

			req, err := http.NewRequest(http.MethodGet, h.url("main", "/v1/chat"), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range c.header {
				i, _ := strconv.Atoi(strings.TrimPrefix(v, "h"))
				req.Header.Add(gieHeader, addrs[i])
			}
			res := overrideResult{addrs: addrs}
			res.resp = send(t, req)
			mu.Lock()
			res.served = append([]string(nil), served...)
			mu.Unlock()
			res.proc = h.proc.requests()
			res.stats = h.env.Stats().Clusters["pool"]
			if strings.Join(res.served, ",") != strings.Join(c.served, ",") {
				t.Errorf("served by %v, want %v", res.served, c.served)
			}
			if last := c.served[len(c.served)-1]; c.fail[int(last[1]-'0')] == 0 && (res.resp.status != 200 || res.resp.body != "hello from "+last) {
				t.Errorf("response %d %q, want 200 from %s", res.resp.status, res.resp.body, last)
			}
			if c.check != nil {
				c.check(t, res)
			}
		})
	}
}

// withOverrideHost changes the override_host policy of c.
func withOverrideHost(c *clusterv3.Cluster, mut func(o *overridehostv3.OverrideHost)) {
	o := &overridehostv3.OverrideHost{}
	if err := c.GetLoadBalancingPolicy().GetPolicies()[0].GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(o); err != nil {
		panic(err)
	}
	mut(o)
	c.LoadBalancingPolicy = lbPolicies(o)
}

// TestLoadBalancingPolicyConfig: the typed policies envoysim models are
// accepted; anything else is refused with the field, the value and what is
// supported.
func TestLoadBalancingPolicyConfig(t *testing.T) {
	cluster := func(p *clusterv3.LoadBalancingPolicy, mut ...func(c *clusterv3.Cluster)) *clusterv3.Cluster {
		c := ilbEngineCluster("engine")
		c.LbConfig = nil
		c.LoadBalancingPolicy = p
		for _, m := range mut {
			m(c)
		}
		return c
	}
	override := func(mut func(o *overridehostv3.OverrideHost)) *clusterv3.LoadBalancingPolicy {
		o := gieOverrideHost()
		mut(o)
		return lbPolicies(o)
	}
	for _, c := range []struct {
		name string
		c    *clusterv3.Cluster
		want string // "" for accepted
	}{
		{"GIE override_host", cluster(lbPolicies(gieOverrideHost())), ""},
		{"ILB's override_host (envoy.OverrideHostPolicy)", cluster(envoy.OverrideHostPolicy(30e9), func(c *clusterv3.Cluster) {
			c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
		}), ""},
		{"override_host with slow start", cluster(override(func(o *overridehostv3.OverrideHost) {
			o.FallbackPolicy = lbPolicies(&leastrequestv3.LeastRequest{SlowStartConfig: &commonv3.SlowStartConfig{SlowStartWindow: durationpb.New(30e9)}})
		})), ""},
		{"typed least_request", cluster(lbPolicies(&leastrequestv3.LeastRequest{ChoiceCount: u32(3)})), ""},
		{"typed round_robin", cluster(lbPolicies(&roundrobinv3.RoundRobin{})), ""},
		{"lb_policy is ignored beside load_balancing_policy", cluster(lbPolicies(&roundrobinv3.RoundRobin{}), func(c *clusterv3.Cluster) {
			c.LbPolicy = clusterv3.Cluster_RING_HASH
		}), ""},
		{"a policy type without a factory is skipped", cluster(&clusterv3.LoadBalancingPolicy{Policies: append(
			[]*clusterv3.LoadBalancingPolicy_Policy{{TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: "not.a.policy", TypedConfig: envoy.MustAny(&typev3.Percent{})}}},
			lbPolicies(&roundrobinv3.RoundRobin{}).GetPolicies()...)}), ""},
		{
			"ring_hash", cluster(lbPolicies(&ringhashv3.RingHash{})),
			"load_balancing_policy.policies[0].typed_extension_config.typed_config(RingHash): type envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash is not supported by envoysim (load balancing policies supported: envoy.load_balancing_policies.override_host",
		},
		{
			"ring_hash fallback", cluster(override(func(o *overridehostv3.OverrideHost) { o.FallbackPolicy = lbPolicies(&ringhashv3.RingHash{}) })),
			"fallback_policy.policies[0].typed_extension_config.typed_config(RingHash): type envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash is not supported",
		},
		{"no policy Envoy knows", cluster(&clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{
			{TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: "not.a.policy", TypedConfig: envoy.MustAny(&typev3.Percent{})}},
		}}), "cluster: didn't find a registered load balancer factory implementation for cluster: 'engine' with names from [not.a.policy]"},
		{"empty policy list", cluster(&clusterv3.LoadBalancingPolicy{}), "with names from []"},
		{"LOAD_BALANCING_POLICY_CONFIG without a policy", cluster(nil, func(c *clusterv3.Cluster) {
			c.LbPolicy = clusterv3.Cluster_LOAD_BALANCING_POLICY_CONFIG
		}), "cluster: field load_balancing_policy need to be set"},
		{"consistent hashing config", cluster(lbPolicies(gieOverrideHost()), func(c *clusterv3.Cluster) {
			c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{ConsistentHashingLbConfig: &clusterv3.Cluster_CommonLbConfig_ConsistentHashingLbConfig{}}
		}), "load_balancing_policy cannot be combined with partial fields"},
		{"no source", cluster(override(func(o *overridehostv3.OverrideHost) { o.OverrideHostSources = nil })), "OverrideHostSources: value must contain at least 1 item"},
		{"empty source", cluster(override(func(o *overridehostv3.OverrideHost) {
			o.OverrideHostSources = append(o.OverrideHostSources, &overridehostv3.OverrideHost_OverrideHostSource{})
		})), "override_host_sources[2]: Empty override source"},
		{"source with header and metadata", cluster(override(func(o *overridehostv3.OverrideHost) {
			o.OverrideHostSources[0].Metadata = gieKey(gieHeader)
		})), "override_host_sources[0]: Only one override source must be set"},
		{"no fallback", cluster(override(func(o *overridehostv3.OverrideHost) { o.FallbackPolicy = nil })), "FallbackPolicy: value is required"},
		{
			"override_host as its own fallback", cluster(override(func(o *overridehostv3.OverrideHost) { o.FallbackPolicy = lbPolicies(gieOverrideHost()) })),
			"override_host as the fallback of override_host is not supported by envoysim",
		},
		{"metadata path index", cluster(override(func(o *overridehostv3.OverrideHost) {
			o.SelectedHostKey.Path[0].Segment = &metadatav3.MetadataKey_PathSegment_Index{Index: 0}
		})), "selected_host_key.path[0].index: field not supported"},
		{"locality configuration", cluster(override(func(o *overridehostv3.OverrideHost) {
			o.FallbackPolicy = lbPolicies(&leastrequestv3.LeastRequest{LocalityLbConfig: &commonv3.LocalityLbConfig{}})
		})), "locality_lb_config: field not supported"},
		{"full scan", cluster(lbPolicies(&leastrequestv3.LeastRequest{SelectionMethod: leastrequestv3.LeastRequest_FULL_SCAN})), "selection_method: field not supported"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkAndCompile(c.c)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.want != "" && err == nil:
				t.Errorf("accepted, want an error containing %q", c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Errorf("error %q, want it to contain %q", err, c.want)
			}
		})
	}
}

// TestLoadBalancingPolicyNACK: a CDS cluster with a policy envoysim does not
// model is NACKed with an error naming it.
func TestLoadBalancingPolicyNACK(t *testing.T) {
	h := newHarness(t, nil)
	h.upstream("web", nil)
	cl := staticCluster("ring", false, "127.0.0.1:1")
	cl.LoadBalancingPolicy = lbPolicies(&ringhashv3.RingHash{})
	h.push(append(h.clusters(), cl)...)
	h.start(counter(0))
	waitFor(t, "CDS NACK", func() bool { return len(h.xds.nacks(typeCluster)) > 0 })
	msg := h.xds.nacks(typeCluster)[0].GetErrorDetail().GetMessage()
	for _, want := range []string{"ring: ", "load_balancing_policy.policies[0]", "RingHash is not supported by envoysim", "override_host"} {
		if !strings.Contains(msg, want) {
			t.Errorf("NACK %q does not contain %q", msg, want)
		}
	}
}

// TestDynamicMetadataLookup checks metadataValue and the list parsing of
// the override sources on their own.
func TestDynamicMetadataLookup(t *testing.T) {
	var md dynamicMetadata
	md.set("ns", &structpb.Struct{Fields: map[string]*structpb.Value{
		"list": structpb.NewStringValue(" 10.0.0.1:80 ,, [::1]:8080 ,\t"),
		"num":  structpb.NewNumberValue(1),
		"deep": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"x": structpb.NewStringValue("10.0.0.2:80")}}),
	}})
	md.set("ns", &structpb.Struct{Fields: map[string]*structpb.Value{"other": structpb.NewStringValue("kept")}})
	for _, c := range []struct {
		name string
		key  metadataKey
		want []string
	}{
		{"split and trimmed", metadataKey{key: "ns", path: []string{"list"}}, []string{"10.0.0.1:80", "[::1]:8080"}},
		{"not a string", metadataKey{key: "ns", path: []string{"num"}}, nil},
		{"nested", metadataKey{key: "ns", path: []string{"deep", "x"}}, []string{"10.0.0.2:80"}},
		{"through a non-struct", metadataKey{key: "ns", path: []string{"num", "x"}}, nil},
		{"a struct, not a string", metadataKey{key: "ns", path: []string{"deep"}}, nil},
		{"missing namespace", metadataKey{key: "other", path: []string{"list"}}, nil},
		{"merged key kept", metadataKey{key: "ns", path: []string{"other"}}, []string{"kept"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := &overrideHostConfig{sources: []overrideSource{{metadata: &c.key}}}
			got := o.selectedHosts(&lbRequest{headers: &headerMap{}, info: &streamInfo{metadata: md}})
			if strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
	if got := hostMapKey("[0:0:0:0:0:0:0:1]:80"); got != "[::1]:80" {
		t.Errorf("hostMapKey = %q, want Envoy's [::1]:80", got)
	}
}
