package istio

import (
	"fmt"
	"maps"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
)

// Short names of the Istio enums.
const (
	applyListener      = networkingv1alpha3.EnvoyFilter_LISTENER
	applyNetworkFilter = networkingv1alpha3.EnvoyFilter_NETWORK_FILTER
	applyHTTPFilter    = networkingv1alpha3.EnvoyFilter_HTTP_FILTER
	applyHTTPRoute     = networkingv1alpha3.EnvoyFilter_HTTP_ROUTE
	opMerge            = networkingv1alpha3.EnvoyFilter_Patch_MERGE
	opInsertBefore     = networkingv1alpha3.EnvoyFilter_Patch_INSERT_BEFORE
	opInsertFirst      = networkingv1alpha3.EnvoyFilter_Patch_INSERT_FIRST
	applyCluster       = networkingv1alpha3.EnvoyFilter_CLUSTER
	opAdd              = networkingv1alpha3.EnvoyFilter_Patch_ADD
)

// envoyFilter gives the source's proxies, per patch context (GATEWAY for
// gateways, SIDECAR_OUTBOUND for mesh), what ILB's own listener has
// (package xds):
//
//   - with Options.TLS, CLUSTER ADD: ILB's ext_proc cluster with mutual
//     TLS from istio-agent's SDS secrets (see [TLS]);
//   - LISTENER MERGE: per_connection_buffer_limit_bytes, so a buffered
//     request body up to envoy.request_buffer_bytes fits (else Envoy
//     answers 413);
//   - NETWORK_FILTER MERGE into the HTTP connection manager: the early
//     header mutation that removes every client-sent x-ilb-route-* header
//     before any filter runs (Envoy >= 1.36, Istio >= 1.28),
//     x-request-id on every response, and ILB's path normalisation (see
//     [connectionManager]);
//   - HTTP_FILTER INSERT_BEFORE the router: ILB's ext_proc filter, with
//     x-ilb-source in its gRPC initial metadata, and every processing mode
//     off (SKIP, NONE): on the listener it does nothing, so other
//     services sharing the port and the passthrough (allow_any) routes
//     never reach ILB, as istiod does for an InferencePool's picker;
//   - HTTP_ROUTE MERGE into each of allRoutes (the VirtualService's routes,
//     by name, destinations or not: the route a request first matches is
//     one of them): ext_proc's processing mode for that route
//     (typed_per_filter_config, ExtProcPerRoute overrides), which turns
//     ILB on for ILB's routes alone;
//   - unless the source allows debug, HTTP_FILTER INSERT_FIRST: a header
//     mutation filter that removes ILB's internal response headers after
//     ext_proc has read them (first on the request, last on the
//     response), also when ext_proc is down;
//   - for each engine cluster with replica_picking, CLUSTER MERGE of the
//     override_host load-balancing policy and lb_policy CLUSTER_PROVIDED
//     into the service's outbound cluster (a DestinationRule cannot
//     express it; least request is override_host's fallback; the rule
//     turns locality weighting off for that service, which a MERGE could
//     not clear);
//   - when envoy.route_idle_timeout is set, HTTP_ROUTE MERGE of the idle
//     timeout into each of routes (the VirtualService's routes with
//     destinations, by name; the VirtualService cannot express it).
func (r *renderer) envoyFilter(p plan, routes, allRoutes []string) (Object, bool) {
	s, port := p.source, p.placement.ListenerPort
	ev := r.c.Envoy
	var patches []*networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectPatch
	add := func(apply networkingv1alpha3.EnvoyFilter_ApplyTo, m *networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectMatch,
		op networkingv1alpha3.EnvoyFilter_Patch_Operation, value proto.Message,
	) {
		v, err := toStruct(value)
		if err != nil {
			r.errorf("source %s: EnvoyFilter %s patch: %w", s.Name, apply, err)
			return
		}
		patches = append(patches, &networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectPatch{
			ApplyTo: apply, Match: m, Patch: &networkingv1alpha3.EnvoyFilter_Patch{Operation: op, Value: v},
		})
	}
	var tlsCluster *clusterv3.Cluster
	if r.o.TLS != nil {
		cl, err := r.o.TLS.cluster(r.c)
		if err != nil {
			r.errorf("source %s: EnvoyFilter: %w", s.Name, err)
		}
		tlsCluster = cl
	}
	for _, ctx := range p.contexts {
		if tlsCluster != nil {
			add(applyCluster, clusterMatch(ctx), opAdd, tlsCluster)
		}
		add(applyListener, listenerMatch(ctx, port, "", ""), opMerge,
			&listenerv3.Listener{PerConnectionBufferLimitBytes: wrapperspb.UInt32(ev.RequestBufferBytes)})
		add(applyNetworkFilter, listenerMatch(ctx, port, wellknown.HTTPConnectionManager, ""), opMerge, &listenerv3.Filter{
			Name:       wellknown.HTTPConnectionManager,
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: envoy.MustAny(connectionManager(min(int(ev.RequestBufferBytes), r.c.ExtProc.MaxBodyBytes)))},
		})
		ep := envoy.ExtProc(r.extProcCluster(), s.Name, r.c.Envoy.MessageTimeout.Std())
		mode := ep.ProcessingMode
		ep.ProcessingMode = processingOff()
		add(applyHTTPFilter, listenerMatch(ctx, port, wellknown.HTTPConnectionManager, wellknown.Router), opInsertBefore, &hcmv3.HttpFilter{
			Name:       envoy.ExtProcFilter,
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: envoy.MustAny(ep)},
		})
		on := &routev3.Route{TypedPerFilterConfig: map[string]*anypb.Any{envoy.ExtProcFilter: envoy.MustAny(&extprocfilterv3.ExtProcPerRoute{
			Override: &extprocfilterv3.ExtProcPerRoute_Overrides{Overrides: &extprocfilterv3.ExtProcOverrides{ProcessingMode: mode}},
		})}}
		for _, name := range allRoutes {
			add(applyHTTPRoute, anyRouteMatch(ctx, name), opMerge, on)
		}
		if !s.Debug {
			add(applyHTTPFilter, listenerMatch(ctx, port, wellknown.HTTPConnectionManager, ""), opInsertFirst, &hcmv3.HttpFilter{
				Name:       envoy.HeaderMutationFilter,
				ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: envoy.MustAny(envoy.StripInternal())},
			})
		}
		for _, e := range r.c.Clusters {
			if e.ReplicaPicking.Enabled && e.Service != nil && s.Allows(e.Region) {
				add(applyCluster, serviceClusterMatch(ctx, e.Service), opMerge, pickingCluster(ev.SlowStart.Std()))
			}
		}
		if ev.RouteIdleTimeout > 0 {
			idle := r.duration("envoy.route_idle_timeout", ev.RouteIdleTimeout)
			for _, name := range routes {
				add(applyHTTPRoute, routeMatch(ctx, name), opMerge, &routev3.Route{
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{IdleTimeout: idle}},
				})
			}
		}
	}
	md, ok := r.meta(s.Name, r.o.ProxyNamespace, nil, s.Name)
	if !ok {
		return Object{}, false
	}
	return Object{
		APIVersion: NetworkingV1alpha3, Kind: KindEnvoyFilter, Metadata: md,
		Spec: &networkingv1alpha3.EnvoyFilter{
			WorkloadSelector: &networkingv1alpha3.WorkloadSelector{Labels: maps.Clone(p.placement.WorkloadSelector)},
			ConfigPatches:    patches,
			Priority:         EnvoyFilterPriority,
		},
	}, true
}

// pickingCluster is what is merged into an engine service's cluster
// where ILB picks replicas: the override_host policy, and lb_policy
// CLUSTER_PROVIDED, as istiod sets it for an InferencePool's cluster
// (Envoy then reads load_balancing_policy; the DestinationRule's least
// request is the policy's fallback).
func pickingCluster(slowStart time.Duration) *clusterv3.Cluster {
	return &clusterv3.Cluster{LbPolicy: clusterv3.Cluster_CLUSTER_PROVIDED, LoadBalancingPolicy: envoy.OverrideHostPolicy(slowStart)}
}

// EnvoyFilterPriority orders ILB's EnvoyFilters after those of priority 0
// (istiod applies lower priorities first): its relative patch (ext_proc
// INSERT_BEFORE the router) then lands on the final filter chain, and
// istioctl analyze has no IST0151 ("relative patch without a priority").
const EnvoyFilterPriority = 10

// processingOff is a processing mode that sends Envoy's ext_proc nothing:
// the listener's filter, until a route turns it on.
func processingOff() *extprocfilterv3.ProcessingMode {
	return &extprocfilterv3.ProcessingMode{
		RequestHeaderMode: extprocfilterv3.ProcessingMode_SKIP, ResponseHeaderMode: extprocfilterv3.ProcessingMode_SKIP,
		RequestBodyMode: extprocfilterv3.ProcessingMode_NONE, ResponseBodyMode: extprocfilterv3.ProcessingMode_NONE,
		RequestTrailerMode: extprocfilterv3.ProcessingMode_SKIP, ResponseTrailerMode: extprocfilterv3.ProcessingMode_SKIP,
	}
}

// anyRouteMatch matches, in every virtual host of ctx, the routes named
// name, whatever their action (a direct response too).
func anyRouteMatch(ctx networkingv1alpha3.EnvoyFilter_PatchContext, name string) *networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectMatch {
	m := routeMatch(ctx, name)
	m.GetRouteConfiguration().GetVhost().GetRoute().Action = networkingv1alpha3.EnvoyFilter_RouteConfigurationMatch_RouteMatch_ANY
	return m
}

// extProcCluster is the cluster ext_proc's gRPC service names: ILB's own
// (added by the EnvoyFilter) with TLS, else istiod's.
func (r *renderer) extProcCluster() string {
	if r.o.TLS != nil {
		return r.c.Envoy.ExtProcCluster
	}
	return r.o.ExtProcCluster
}

// connectionManager is the part of the HTTP connection manager merged in:
// the early header mutation removing every header with the x-ilb-route-
// prefix, so no client can pick a destination, and x-request-id on every
// response, so a client has the key of its decision record (`ilb
// explain`), Envoy's own 413 as ILB's JSON error (bodyLimit bytes), and
// ILB's path normalisation (envoy.NormalizePaths). The merge sets
// normalize_path true, merge_slashes true and
// path_with_escaped_slashes_action UNESCAPE_AND_FORWARD over what istiod
// derived from meshConfig.pathNormalization (and a ProxyConfig's
// connectionSettings), for every route of the matched listener's
// connection manager: it adds to BASE (istiod's default: normalize_path
// alone) and MERGE_SLASHES, equals DECODE_AND_MERGE_SLASHES, and
// overrides NONE and the EDGE profile's UNESCAPE_AND_REDIRECT.
func connectionManager(bodyLimit int) *hcmv3.HttpConnectionManager {
	h := &hcmv3.HttpConnectionManager{
		AlwaysSetRequestIdInResponse:  true,
		EarlyHeaderMutationExtensions: []*corev3.TypedExtensionConfig{envoy.StripRouteHeaders()},
		LocalReplyConfig:              envoy.LocalReplies(bodyLimit),
	}
	envoy.NormalizePaths(h)
	return h
}

// serviceClusterMatch matches the outbound cluster of a service's port.
func serviceClusterMatch(ctx networkingv1alpha3.EnvoyFilter_PatchContext, svc *config.Service) *networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectMatch {
	return &networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectMatch{
		Context: ctx,
		ObjectTypes: &networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectMatch_Cluster{Cluster: &networkingv1alpha3.EnvoyFilter_ClusterMatch{
			Service: svc.Host, PortNumber: uint32(svc.Port),
		}},
	}
}

// listenerMatch matches the listeners of ctx (on port, when set), their
// filter named filter and its HTTP filter named sub, when set.
func listenerMatch(ctx networkingv1alpha3.EnvoyFilter_PatchContext, port uint32, filter, sub string) *networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectMatch {
	lm := &networkingv1alpha3.EnvoyFilter_ListenerMatch{PortNumber: port}
	if filter != "" {
		fm := &networkingv1alpha3.EnvoyFilter_ListenerMatch_FilterMatch{Name: filter}
		if sub != "" {
			fm.SubFilter = &networkingv1alpha3.EnvoyFilter_ListenerMatch_SubFilterMatch{Name: sub}
		}
		lm.FilterChain = &networkingv1alpha3.EnvoyFilter_ListenerMatch_FilterChainMatch{Filter: fm}
	}
	return &networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectMatch{
		Context:     ctx,
		ObjectTypes: &networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectMatch_Listener{Listener: lm},
	}
}

// routeMatch matches, in every virtual host of ctx, the routes named name
// that route to a cluster.
func routeMatch(ctx networkingv1alpha3.EnvoyFilter_PatchContext, name string) *networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectMatch {
	return &networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectMatch{
		Context: ctx,
		ObjectTypes: &networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectMatch_RouteConfiguration{
			RouteConfiguration: &networkingv1alpha3.EnvoyFilter_RouteConfigurationMatch{
				Vhost: &networkingv1alpha3.EnvoyFilter_RouteConfigurationMatch_VirtualHostMatch{
					Route: &networkingv1alpha3.EnvoyFilter_RouteConfigurationMatch_RouteMatch{
						Name:   name,
						Action: networkingv1alpha3.EnvoyFilter_RouteConfigurationMatch_RouteMatch_ROUTE,
					},
				},
			},
		},
	}
}

// toStruct turns an Envoy message into the Struct an EnvoyFilter patch
// carries: its proto JSON with Envoy's snake_case field names (the form of
// Envoy's documentation and of Istio's examples; Istio accepts both) and
// "@type" in every Any.
func toStruct(m proto.Message) (*structpb.Struct, error) {
	js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(js, s); err != nil {
		return nil, fmt.Errorf("encode %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return s, nil
}
