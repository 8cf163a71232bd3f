package envoysim

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	earlyheadermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ilbproject/ilb/envoy"
)

// procHandler answers one ProcessingRequest; an error ends the stream with
// that status. nil handlers answer CONTINUE to everything.
type procHandler func(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error)

// errEndStream makes the fake processor end the stream with status OK.
var errEndStream = errors.New("end stream")

// fakeProcessor is an ext_proc server on loopback recording what it gets.
type fakeProcessor struct {
	addr   string
	health *health.Server // grpc.health.v1 on the same server, SERVING

	mu       sync.Mutex
	handler  procHandler
	received []*extprocv3.ProcessingRequest
	metadata []metadata.MD
	peers    []string // per stream: the client certificate's first URI SAN over TLS, "" otherwise
	eofs     int
}

var _ extprocv3.ExternalProcessorServer = (*fakeProcessor)(nil)

// startProcessor serves ext_proc and grpc.health.v1 on loopback; opts
// (e.g. grpc.Creds for TLS) configure the server.
func startProcessor(t *testing.T, handler procHandler, opts ...grpc.ServerOption) *fakeProcessor {
	t.Helper()
	p := &fakeProcessor{handler: handler}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	srv := grpc.NewServer(opts...)
	extprocv3.RegisterExternalProcessorServer(srv, p)
	p.health = health.NewServer()
	grpc_health_v1.RegisterHealthServer(srv, p.health)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return p
}

// Process implements the ext_proc service.
func (p *fakeProcessor) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	id := ""
	if pr, ok := peer.FromContext(stream.Context()); ok {
		if ti, ok := pr.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 && len(ti.State.PeerCertificates[0].URIs) > 0 {
			id = ti.State.PeerCertificates[0].URIs[0].String()
		}
	}
	p.mu.Lock()
	p.metadata = append(p.metadata, md)
	p.peers = append(p.peers, id)
	p.mu.Unlock()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			p.mu.Lock()
			p.eofs++
			p.mu.Unlock()
			return nil
		}
		if err != nil {
			return err
		}
		p.mu.Lock()
		p.received = append(p.received, req)
		h := p.handler
		p.mu.Unlock()
		if h == nil {
			h = continueAll
		}
		resps, err := h(stream.Context(), req)
		if errors.Is(err, errEndStream) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, r := range resps {
			if err := stream.Send(r); err != nil {
				return err
			}
		}
	}
}

func (p *fakeProcessor) requests() []*extprocv3.ProcessingRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*extprocv3.ProcessingRequest(nil), p.received...)
}

// continueAll answers every message with an empty CONTINUE of its kind.
func continueAll(_ context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	return []*extprocv3.ProcessingResponse{respond(req, &extprocv3.CommonResponse{})}, nil
}

// respond builds the response of the kind matching req with common.
func respond(req *extprocv3.ProcessingRequest, common *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	switch req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: common}}}
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{Response: common}}}
	case *extprocv3.ProcessingRequest_RequestBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: common}}}
	case *extprocv3.ProcessingRequest_ResponseBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: common}}}
	}
	return &extprocv3.ProcessingResponse{}
}

// onRequestHeaders answers request headers with common and continues the rest.
func onRequestHeaders(common func(req *extprocv3.ProcessingRequest) *extprocv3.CommonResponse) procHandler {
	return func(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		if req.GetRequestHeaders() == nil {
			return continueAll(ctx, req)
		}
		return []*extprocv3.ProcessingResponse{respond(req, common(req))}, nil
	}
}

// setHeader is a set_headers entry with raw_value.
func setHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: key, RawValue: []byte(value)}}
}

// sleepCtx sleeps d unless ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// headerValue returns the raw_value of key in a proto header map.
func protoHeader(hm *corev3.HeaderMap, key string) (string, bool) {
	for _, h := range hm.GetHeaders() {
		if h.GetKey() == key {
			return string(h.GetRawValue()), true
		}
	}
	return "", false
}

func socketAddr(hostport string) *corev3.Address {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		panic(err)
	}
	p, _ := strconv.Atoi(port)
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)},
	}}}
}

func lbEndpoint(hostport string, health corev3.HealthStatus) *endpointv3.LbEndpoint {
	return &endpointv3.LbEndpoint{
		HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: socketAddr(hostport)}},
		HealthStatus:   health,
	}
}

func loadAssignment(name string, eps ...*endpointv3.LbEndpoint) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: eps}}}
}

// staticCluster is a STATIC cluster over hostports, HTTP/2 (h2c) when http2.
func staticCluster(name string, http2 bool, hostports ...string) *clusterv3.Cluster {
	var eps []*endpointv3.LbEndpoint
	for _, hp := range hostports {
		eps = append(eps, lbEndpoint(hp, corev3.HealthStatus_UNKNOWN))
	}
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(time.Second),
		LoadAssignment:       loadAssignment(name, eps...),
	}
	if http2 {
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{
			httpProtocolOptionsKey: envoy.MustAny(&upstreamhttpv3.HttpProtocolOptions{
				UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
					ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
				}},
			}),
		}
	}
	return c
}

// edsCluster is an EDS cluster fed by ADS.
func edsCluster(name string, lb clusterv3.Cluster_LbPolicy) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource()},
		ConnectTimeout:       durationpb.New(time.Second),
		LbPolicy:             lb,
	}
}

func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}
}

// testBootstrap is the bootstrap of the tests: ADS to xdsAddr, the ext_proc
// cluster "ext-proc" at procAddr.
func testBootstrap(xdsAddr, procAddr string) *bootstrapv3.Bootstrap {
	return &bootstrapv3.Bootstrap{
		Node: &corev3.Node{Id: "envoysim-test", Cluster: testNodeCluster},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{
				ApiType:             corev3.ApiConfigSource_GRPC,
				TransportApiVersion: corev3.ApiVersion_V3,
				GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "xds"},
				}}},
			},
			CdsConfig: adsSource(),
			LdsConfig: adsSource(),
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: []*clusterv3.Cluster{
			staticCluster("xds", true, xdsAddr),
			staticCluster("ext-proc", true, procAddr),
		}},
	}
}

// extProc is an ext_proc HTTP filter on the "ext-proc" cluster.
func extProc(name string, cfg *extprocfilterv3.ExternalProcessor) *hcmv3.HttpFilter {
	if cfg.GrpcService == nil {
		cfg.GrpcService = &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "ext-proc"}}}
	}
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: envoy.MustAny(cfg)}}
}

func routerFilter() *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: envoy.MustAny(&routerv3.Router{})}}
}

// httpListener is a listener on 127.0.0.1:0 whose HCM uses RDS routeName.
func httpListener(name, routeName string, filters ...*hcmv3.HttpFilter) *listenerv3.Listener {
	return listenerWith(name, &hcmv3.HttpConnectionManager{
		StatPrefix:     name,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: routeName, ConfigSource: adsSource()}},
		HttpFilters:    append(filters, routerFilter()),
	})
}

func listenerWith(name string, hcm *hcmv3.HttpConnectionManager) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name:    name,
		Address: socketAddr("127.0.0.1:0"),
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name:       "envoy.filters.network.http_connection_manager",
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: envoy.MustAny(hcm)},
		}}}},
	}
}

// routeTo is a prefix "/" route to cluster.
func routeTo(cluster string) *routev3.Route {
	return &routev3.Route{
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}},
	}
}

func vhost(name string, domains []string, routes ...*routev3.Route) *routev3.VirtualHost {
	return &routev3.VirtualHost{Name: name, Domains: domains, Routes: routes}
}

func routeConfig(name string, vhs ...*routev3.VirtualHost) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: vhs}
}

func u32(v uint32) *wrapperspb.UInt32Value { return wrapperspb.UInt32(v) }

// setEarly adds an early header mutation to l's HCM: remove exact, remove
// every header starting with prefix (ignoring case), append x-early from
// %REQ(x-keep)%.
func setEarly(t *testing.T, l *listenerv3.Listener, exact, prefix string) {
	t.Helper()
	var hcm hcmv3.HttpConnectionManager
	f := l.GetFilterChains()[0].GetFilters()[0]
	if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	em := &earlyheadermutationv3.HeaderMutation{Mutations: []*mutationrulesv3.HeaderMutation{
		{Action: &mutationrulesv3.HeaderMutation_Remove{Remove: exact}},
		{Action: &mutationrulesv3.HeaderMutation_RemoveOnMatch_{RemoveOnMatch: &mutationrulesv3.HeaderMutation_RemoveOnMatch{
			KeyMatcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: prefix}, IgnoreCase: true},
		}}},
		{Action: &mutationrulesv3.HeaderMutation_Append{Append: &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "x-early", Value: "%REQ(x-keep)%"}}}},
	}}
	hcm.EarlyHeaderMutationExtensions = []*corev3.TypedExtensionConfig{{Name: "envoy.http.early_header_mutation.header_mutation", TypedConfig: envoy.MustAny(em)}}
	f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: envoy.MustAny(&hcm)}
}

func durationpbNew(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
