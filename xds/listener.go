package xds

import (
	"fmt"
	"net"
	"strconv"

	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	earlyheadermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/header"
)

// stripInternal removes ILB's internal response headers (the served
// cluster, weights version and upstream host the routes report to
// ext_proc) before the client sees them.
func stripInternal() *headermutationv3.HeaderMutation {
	var muts []*mutationrulesv3.HeaderMutation
	for _, h := range []string{header.ServedCluster, header.WeightsVersion, header.UpstreamHost} {
		muts = append(muts, &mutationrulesv3.HeaderMutation{Action: &mutationrulesv3.HeaderMutation_Remove{Remove: h}})
	}
	return &headermutationv3.HeaderMutation{Mutations: &headermutationv3.Mutations{ResponseMutations: muts}}
}

// listener builds the source's HTTP listener (DESIGN §2): the early header
// mutation that strips every client-sent x-ilb-route-* header, ext_proc
// with the source in its initial metadata, then the router on RDS routes.
//
// The ext_proc filter runs with failure_mode_allow for both fail modes:
// when ext_proc cannot decide (unreachable, error, message timeout), the
// request goes on without ILB's headers and the route table decides: the
// fallback route serves a fail-open source by its default weights and
// answers a fail-closed source 503 with a JSON body that says why. Every
// failure thus ends in one clear, uniform answer, which Envoy's own
// fail-closed replies (an empty 500 or 504) do not give.
func listener(c *config.Config, s config.Source) (*listenerv3.Listener, error) {
	addr := c.ListenerOf(s)
	host, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("listener address %q: %w", addr, err)
	}
	port, err := strconv.ParseUint(portS, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("listener address %q: port: %w", addr, err)
	}
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "ilb",
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		// Clients get the x-request-id of their request back: the key of
		// its decision record (`ilb explain ID`).
		AlwaysSetRequestIdInResponse: true,
		UseRemoteAddress:             wrapperspb.Bool(c.Envoy.UseRemoteAddress),
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: RouteConfigName,
		}},
		EarlyHeaderMutationExtensions: []*corev3.TypedExtensionConfig{{
			Name: envoy.EarlyHeaderMutation,
			TypedConfig: envoy.MustAny(&earlyheadermutationv3.HeaderMutation{
				Mutations: []*mutationrulesv3.HeaderMutation{{
					Action: &mutationrulesv3.HeaderMutation_RemoveOnMatch_{RemoveOnMatch: &mutationrulesv3.HeaderMutation_RemoveOnMatch{
						KeyMatcher: &matcherv3.StringMatcher{
							MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: header.RoutePrefix},
						},
					}},
				}},
			}),
		}},
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: envoy.ExtProcFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: envoy.MustAny(extProc(c, s))}},
			{Name: wellknown.Router, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: envoy.MustAny(&routerv3.Router{})}},
		},
	}
	if !s.Debug {
		// First in the chain, so last on the response: after ext_proc has
		// read them, the internal headers go, even when ext_proc is down.
		hcm.HttpFilters = append([]*hcmv3.HttpFilter{{
			Name:       envoy.HeaderMutationFilter,
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: envoy.MustAny(stripInternal())},
		}}, hcm.HttpFilters...)
	}
	return &listenerv3.Listener{
		Name:                          ListenerName,
		Address:                       socketAddress(host, uint32(port)),
		PerConnectionBufferLimitBytes: wrapperspb.UInt32(c.Envoy.RequestBufferBytes),
		FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{{
				Name:       wellknown.HTTPConnectionManager,
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: envoy.MustAny(hcm)},
			}},
		}},
	}, nil
}

// extProc is the ext_proc filter config: request headers and the buffered
// request body (the OpenAI JSON) go to ILB, response headers too (to read
// back the served cluster); response bodies stream through untouched.
// allow_mode_override lets ILB skip the body when the client names the
// model in x-ilb-model.
func extProc(c *config.Config, s config.Source) *extprocfilterv3.ExternalProcessor {
	return &extprocfilterv3.ExternalProcessor{
		GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{
				ClusterName: c.Envoy.ExtProcCluster,
			}},
			InitialMetadata: []*corev3.HeaderValue{{Key: header.Source, Value: s.Name}},
		},
		FailureModeAllow: true,
		ProcessingMode: &extprocfilterv3.ProcessingMode{
			RequestHeaderMode:   extprocfilterv3.ProcessingMode_SEND,
			ResponseHeaderMode:  extprocfilterv3.ProcessingMode_SEND,
			RequestBodyMode:     extprocfilterv3.ProcessingMode_BUFFERED,
			ResponseBodyMode:    extprocfilterv3.ProcessingMode_NONE,
			RequestTrailerMode:  extprocfilterv3.ProcessingMode_SKIP,
			ResponseTrailerMode: extprocfilterv3.ProcessingMode_SKIP,
		},
		MessageTimeout:    durationpb.New(c.Envoy.MessageTimeout.Std()),
		AllowModeOverride: true,
	}
}

// ListenerAt is a copy of the source's listener bound to addr
// (host:port): what a sidecar Envoy keeps static while it takes
// clusters, endpoints and routes from ILB.
func (r *Resources) ListenerAt(addr string) (*listenerv3.Listener, error) {
	if len(r.Listeners) != 1 {
		return nil, fmt.Errorf("want one listener, have %d", len(r.Listeners))
	}
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("listener address: %w", err)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || port == 0 {
		return nil, fmt.Errorf("listener address %q: want a port in 1..65535", addr)
	}
	l := proto.CloneOf(r.Listeners[0])
	l.Address = &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)},
	}}}
	return l, nil
}
