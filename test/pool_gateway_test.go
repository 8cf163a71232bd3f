package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	overridehostv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/override_host/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/sim/engine"
	"github.com/ilbproject/ilb/sim/envoysim"
	"github.com/ilbproject/ilb/sim/stack"
)

// poolWiring is what istiod sends a gateway for an InferencePool whose
// endpoint picker is ILB: the listener's ext_proc filter (every mode off,
// fail-open, envoy.lb received and forwarded), the per-route override that
// turns it on for the pool's route (full-duplex bodies, the picker's
// Service, fail-closed) and the pool cluster's override_host policy
// (envoy.lb x-gateway-destination-endpoint, the served host written back,
// round robin as the fallback).
type poolWiring struct {
	listenerFilter *extprocfilterv3.ExternalProcessor
	perRoute       *anypb.Any // ExtProcPerRoute
	lb             *clusterv3.LoadBalancingPolicy
	pickerCluster  string // the per-route gRPC service's cluster
}

// istiodPoolWiring is poolWiring as istiod writes it (istio
// pilot/pkg/xds/filters InferencePoolExtProc, pilot/pkg/networking/core
// route.go and cluster_builder.go); TestIstiodInferencePool plays what a
// real istiod sends instead.
func istiodPoolWiring() poolWiring {
	const picker = "outbound|9002||ilb.inference.svc.cluster.local"
	grpc := func(cluster string) *corev3.GrpcService {
		return &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster}}}
	}
	lbNS := &extprocfilterv3.MetadataOptions_MetadataNamespaces{Untyped: []string{header.LBNamespace}}
	listener := &extprocfilterv3.ExternalProcessor{
		GrpcService:      grpc("dummy"),
		FailureModeAllow: true,
		ProcessingMode: &extprocfilterv3.ProcessingMode{
			RequestHeaderMode: extprocfilterv3.ProcessingMode_SKIP, ResponseHeaderMode: extprocfilterv3.ProcessingMode_SKIP,
		},
		MessageTimeout:  durationpb.New(1000 * time.Second),
		MetadataOptions: &extprocfilterv3.MetadataOptions{ReceivingNamespaces: lbNS, ForwardingNamespaces: lbNS},
	}
	listener.GrpcService.Timeout = durationpb.New(10 * time.Second)
	perRoute := envoy.MustAny(&extprocfilterv3.ExtProcPerRoute{Override: &extprocfilterv3.ExtProcPerRoute_Overrides{Overrides: &extprocfilterv3.ExtProcOverrides{
		FailureModeAllow: wrapperspb.Bool(false),
		GrpcService:      grpc(picker),
		ProcessingMode: &extprocfilterv3.ProcessingMode{
			RequestHeaderMode: extprocfilterv3.ProcessingMode_SEND, ResponseHeaderMode: extprocfilterv3.ProcessingMode_SEND,
			RequestBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			RequestTrailerMode: extprocfilterv3.ProcessingMode_SEND, ResponseTrailerMode: extprocfilterv3.ProcessingMode_SEND,
		},
	}}})
	key := func(k string) *metadatav3.MetadataKey {
		return &metadatav3.MetadataKey{Key: header.LBNamespace, Path: []*metadatav3.MetadataKey_PathSegment{{Segment: &metadatav3.MetadataKey_PathSegment_Key{Key: k}}}}
	}
	policy := func(name string, m *anypb.Any) *clusterv3.LoadBalancingPolicy {
		return &clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{{TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: name, TypedConfig: m}}}}
	}
	lb := policy("envoy.load_balancing_policies.override_host", envoy.MustAny(&overridehostv3.OverrideHost{
		OverrideHostSources: []*overridehostv3.OverrideHost_OverrideHostSource{{Metadata: key(header.DestinationEndpoint)}},
		SelectedHostKey:     key(header.DestinationEndpointServed),
		FallbackPolicy:      policy("envoy.load_balancing_policies.round_robin", envoy.MustAny(&roundrobinv3.RoundRobin{})),
	}))
	return poolWiring{listenerFilter: listener, perRoute: perRoute, lb: lb, pickerCluster: picker}
}

// startPoolGateway runs an envoysim gateway wired by w: one listener whose
// connection manager has w's ext_proc filter and the router, a route of
// /v1/ to the pool's cluster (STATIC, endpoints, w's load balancing) with
// w's per-route configuration, and the picker's cluster (HTTP/2 to
// pickerAddr). It returns the listener's URL and the envoysim.
func startPoolGateway(t *testing.T, w poolWiring, endpoints []string, pickerAddr string) (string, *envoysim.Envoy) {
	t.Helper()
	static := func(name string, addrs ...string) *clusterv3.Cluster {
		c := &clusterv3.Cluster{
			Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
			ConnectTimeout: durationpb.New(time.Second),
			LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{}}},
		}
		for _, a := range addrs {
			host, port, _ := strings.Cut(a, ":")
			p, _ := strconv.Atoi(port)
			c.LoadAssignment.Endpoints[0].LbEndpoints = append(c.LoadAssignment.Endpoints[0].LbEndpoints, &endpointv3.LbEndpoint{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
					SocketAddress: &corev3.SocketAddress{Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)}},
				}}}},
			})
		}
		return c
	}
	pool := static("outbound|8000||vllm-llama.inference.svc.cluster.local", endpoints...)
	pool.LbPolicy = clusterv3.Cluster_CLUSTER_PROVIDED
	pool.LoadBalancingPolicy = w.lb
	picker := static(w.pickerCluster, pickerAddr)
	picker.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": envoy.MustAny(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
		}},
	})}
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "inference-gateway",
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: "http.80",
			VirtualHosts: []*routev3.VirtualHost{{Name: "inference-gateway", Domains: []string{"*"}, Routes: []*routev3.Route{{
				Match:                &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/v1/"}},
				Action:               &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: pool.Name}, Timeout: durationpb.New(0)}},
				TypedPerFilterConfig: map[string]*anypb.Any{envoy.ExtProcFilter: w.perRoute},
			}}}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: envoy.ExtProcFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: envoy.MustAny(w.listenerFilter)}},
			{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: envoy.MustAny(&routerv3.Router{})}},
		},
	}
	b := &bootstrapv3.Bootstrap{StaticResources: &bootstrapv3.Bootstrap_StaticResources{
		Clusters: []*clusterv3.Cluster{pool, picker},
		Listeners: []*listenerv3.Listener{{
			Name:    "0.0.0.0_80",
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{}}}},
			FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
				Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: envoy.MustAny(hcm)},
			}}}},
		}},
	}}
	e, err := envoysim.New(envoysim.Options{Bootstrap: b})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if err := e.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	addr, _ := e.ListenerAddr("0.0.0.0_80")
	return "http://" + addr, e
}

// startPickerWorld is the demo world with a source "gateway-us" whose
// routing is picker over us-east-vllm, engines fast enough for many
// requests.
func startPickerWorld(t *testing.T) *stack.Stack {
	t.Helper()
	timing := &engine.FixedTiming{MaxRunning: 16, PrefillPerToken: 2 * time.Microsecond, InterTokenLatency: 200 * time.Microsecond}
	return startWorld(t, timing, func(c *config.Config) {
		c.Sources = append(c.Sources, config.Source{
			Name: "gateway-us", Region: "us-east", AllowedRegions: []string{"us-east"}, FailMode: config.FailClosed,
			DefaultModel: "llama-3.1-8b-instruct", DefaultPriority: "standard",
			Routing: config.RoutingPicker, Picker: &config.SourcePicker{Listen: "127.0.0.1:0", Cluster: "us-east-vllm"},
		})
	})
}

// playPool sends n chat requests through the gateway at url, every other
// one streamed, a few prompts sharing prefixes, and checks each: 200; a
// streamed answer arrives as several server-sent events ending in
// [DONE], a plain one as a chat completion; the replica that answered
// (the engine's own header) is the one ILB picked; ILB's decision record
// says why it picked it and that Envoy served it. It returns how many
// requests each replica served.
func playPool(t *testing.T, s *stack.Stack, url string, n int) map[string]int {
	t.Helper()
	pool, _ := s.Config.Cluster("us-east-vllm")
	client := &http.Client{Timeout: time.Minute}
	// ILB picks once it knows the pool's replicas (the first engine
	// poll): until then Envoy's fallback would choose.
	warm := 0
	waitUntil(t, "ILB's picker knowing the pool's replicas", time.Minute, func() bool {
		warm++
		id := fmt.Sprintf("warm-up-%d", warm)
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{"model":"llama3-8b","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`))
		req.Header.Set(header.RequestID, id)
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		rec, ok := s.App.ExtProc.Decisions().Get(id)
		return ok && rec.Replica != nil && rec.Replica.Chosen != ""
	})
	served := map[string]int{}
	for i := range n {
		id := fmt.Sprintf("pool-%d", i)
		streamed := i%2 == 0
		body := fmt.Sprintf(`{"model":"llama3-8b","messages":[{"role":"system","content":"%s"},{"role":"user","content":"question %d"}],"max_tokens":8,"stream":%v}`,
			strings.Repeat(fmt.Sprintf("shared context %d ", i%5), 40), i, streamed)
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("content-type", "application/json")
		req.Header.Set(header.RequestID, id)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %s: %v", id, err)
		}
		events, text := 0, ""
		if streamed {
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					events++
					text = line
				}
			}
		} else {
			b, _ := io.ReadAll(resp.Body)
			text = string(b)
		}
		resp.Body.Close()
		replica := resp.Header.Get(engine.HeaderReplica)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %s: status %d %q", id, resp.StatusCode, text)
		}
		var plain struct {
			Choices []json.RawMessage `json:"choices"`
		}
		switch {
		case streamed && (events < 3 || text != "[DONE]"):
			t.Fatalf("request %s: %d server-sent events ending %q; want the tokens as events, then [DONE]", id, events, text)
		case !streamed && (json.Unmarshal([]byte(text), &plain) != nil || len(plain.Choices) != 1):
			t.Fatalf("request %s: not a chat completion: %q", id, text)
		}
		idx := strings.TrimPrefix(replica, "us-east-vllm/")
		k, err := strconv.Atoi(idx)
		if err != nil || k < 0 || k >= len(pool.Endpoints) {
			t.Fatalf("request %s: answered by %q, not a replica of the pool %v", id, replica, pool.Endpoints)
		}
		addr := pool.Endpoints[k]
		served[addr]++
		rec, ok := s.App.ExtProc.Decisions().Get(id)
		if !ok {
			t.Fatalf("request %s: no decision record", id)
		}
		r := rec.Replica
		if rec.Source != "gateway-us" || rec.Chosen != "us-east-vllm" || r == nil || r.Chosen != addr || r.Reason == "" || r.Served != "chosen" || rec.UpstreamHost != addr {
			t.Fatalf("request %s: served by %s; record source %s chosen %s upstream %q replica %+v; want the picked replica served, with its reason", id, addr, rec.Source, rec.Chosen, rec.UpstreamHost, r)
		}
	}
	return served
}

// TestInferencePoolGateway: ILB as an InferencePool's endpoint picker,
// end to end through envoysim wired as istiod wires a pool (per-route
// full-duplex ext_proc, override_host on envoy.lb): 1,000 chat requests,
// half of them streamed, all answered, each by the replica ILB picked
// and recorded why.
func TestInferencePoolGateway(t *testing.T) {
	s := startPickerWorld(t)
	url, e := startPoolGateway(t, istiodPoolWiring(), mustCluster(t, s, "us-east-vllm").Endpoints, s.App.PickerAddr("gateway-us"))
	served := playPool(t, s, url, 1000)
	st := e.Stats().ExtProc
	if st.SpuriousMessages != 0 || st.StreamsFailed != 0 || st.MessageTimeouts != 0 {
		t.Errorf("ext_proc stats %+v", st)
	}
	t.Logf("1000 requests served by %v; ext_proc messages sent %d received %d", served, st.MessagesSent, st.MessagesReceived)
}

func mustCluster(t *testing.T, s *stack.Stack, name string) config.EngineCluster {
	t.Helper()
	c, ok := s.Config.Cluster(name)
	if !ok {
		t.Fatalf("no cluster %s", name)
	}
	return c
}
