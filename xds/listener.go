package xds

import (
	"fmt"
	"net"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
)

// listener builds the source's HTTP listener: path
// normalisation (envoy.NormalizePaths: ext_proc reads the path the engine
// routes on), the early header mutation that strips every client-sent
// x-ilb-route-* header, ext_proc with the source in its initial metadata,
// then the router on RDS routes.
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
		EarlyHeaderMutationExtensions: []*corev3.TypedExtensionConfig{envoy.StripRouteHeaders()},
		LocalReplyConfig:              envoy.LocalReplies(min(int(c.Envoy.RequestBufferBytes), c.ExtProc.MaxBodyBytes)),
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: envoy.ExtProcFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: envoy.MustAny(envoy.ExtProc(c.Envoy.ExtProcCluster, s.Name, c.Envoy.MessageTimeout.Std()))}},
			{Name: wellknown.Router, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: envoy.MustAny(&routerv3.Router{})}},
		},
	}
	envoy.NormalizePaths(hcm)
	if !s.Debug {
		// First in the chain, so last on the response: after ext_proc has
		// read them, the internal headers go, even when ext_proc is down.
		hcm.HttpFilters = append([]*hcmv3.HttpFilter{{
			Name:       envoy.HeaderMutationFilter,
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: envoy.MustAny(envoy.StripInternal())},
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
