package xds

import (
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/routetable"
	"github.com/ilbproject/ilb/weights"
)

// Names of the resources ILB serves to every source.
const (
	ListenerName    = "ilb_listener"
	RouteConfigName = "ilb_routes"
	VirtualHostName = "ilb"
)

// Route names, which show in Envoy's stats and access logs.
const (
	routeOverride = "ilb_cluster_override"
	routeFallback = "ilb_fallback"
	routeNotFound = "ilb_not_found"
	routeModel    = "ilb_model:"
	routeHint     = "ilb_hint:"
)

// routeConfig renders the source's route table (routetable.Plan), in
// match order:
//
//  1. x-ilb-route-cluster present → cluster_header (ext_proc named the
//     cluster);
//  2. per model, x-ilb-route-model == model → weighted_clusters drawn by
//     x-ilb-route-draw (a direct 503 when no cluster has capacity);
//  3. fail-open sources, per model and name or alias, under each path
//     prefix that reaches the engines: the client's x-ilb-model hint →
//     the model's weights, drawn at random;
//  4. anything else under such a prefix → the fallback: the default
//     model's weights for a fail-open source, a 503 with a JSON body for
//     a fail-closed one;
//  5. any other path → a JSON 404 (path_not_found).
//
// Every route that routes reports, in response headers, the served
// cluster and the weights version; ext_proc reads them back and removes
// them.
func routeConfig(c *config.Config, w *weights.Weights, s config.Source) *routev3.RouteConfiguration {
	version := w.Version()
	var routes []*routev3.Route
	for _, st := range routetable.Plan(c, w, s) {
		switch st.Kind {
		case routetable.ToCluster:
			routes = append(routes, &routev3.Route{
				Name: routeOverride,
				Match: match(&routev3.HeaderMatcher{
					Name:                 header.RouteCluster,
					HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true},
				}),
				Action: &routev3.Route_Route{Route: streamingAction(c, &routev3.RouteAction{
					ClusterSpecifier: &routev3.RouteAction_ClusterHeader{ClusterHeader: header.RouteCluster},
				})},
				ResponseHeadersToAdd: reportHeaders(version),
			})
		case routetable.ByModel:
			r := &routev3.Route{Name: routeModel + st.Model, Match: match(exactHeader(header.RouteModel, st.Model))}
			routes = append(routes, render(c, r, st, header.RouteDraw, version))
		case routetable.ByHint:
			for i, prefix := range st.Prefixes {
				for _, name := range st.Names {
					r := &routev3.Route{Name: fmt.Sprintf("%s%s:%d", routeHint, name, i), Match: underPrefix(prefix, exactHeader(header.Model, name))}
					routes = append(routes, render(c, r, st, "", version))
				}
			}
		case routetable.Fallback:
			for i, prefix := range st.Prefixes {
				r := &routev3.Route{Name: routeFallback, Match: underPrefix(prefix)}
				if i > 0 {
					r.Name = fmt.Sprintf("%s_%d", routeFallback, i)
				}
				// No draw header: Envoy draws at random, by the same weights.
				routes = append(routes, render(c, r, st, "", version))
			}
		case routetable.NotFound:
			r := &routev3.Route{Name: routeNotFound, Match: match()}
			directJSON(r, st.Reply)
			routes = append(routes, r)
		}
	}
	return &routev3.RouteConfiguration{
		Name: RouteConfigName,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    VirtualHostName,
			Domains: []string{"*"},
			Routes:  routes,
		}},
	}
}

// render completes r with st's answer: its targets drawn by drawHeader
// ("" at random), reporting version, or its direct reply.
func render(c *config.Config, r *routev3.Route, st routetable.Step, drawHeader, version string) *routev3.Route {
	if st.Reply != nil {
		directJSON(r, st.Reply)
		return r
	}
	r.Action = &routev3.Route_Route{Route: streamingAction(c, weighted(st.Targets, drawHeader))}
	r.ResponseHeadersToAdd = reportHeaders(version)
	return r
}

// exactHeader matches value exactly in the header name.
func exactHeader(name, value string) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{
		Name: name,
		HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Exact{Exact: value},
		}},
	}
}

// underPrefix matches paths under prefix, and the given headers.
func underPrefix(prefix string, headers ...*routev3.HeaderMatcher) *routev3.RouteMatch {
	return &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: prefix}, Headers: headers}
}

// match matches every path, and the given headers.
func match(headers ...*routev3.HeaderMatcher) *routev3.RouteMatch {
	return &routev3.RouteMatch{
		PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"},
		Headers:       headers,
	}
}

// streamingAction completes an action for LLM traffic: no route timeout
// (responses stream for minutes) but an idle timeout (a stalled stream
// ends), an explicit 503 for a cluster that does not exist, and retries.
func streamingAction(c *config.Config, a *routev3.RouteAction) *routev3.RouteAction {
	a.Timeout = durationpb.New(0)
	if c.Envoy.RouteIdleTimeout > 0 {
		a.IdleTimeout = durationpb.New(c.Envoy.RouteIdleTimeout.Std())
	}
	a.ClusterNotFoundResponseCode = routev3.RouteAction_SERVICE_UNAVAILABLE
	a.RetryPolicy = retryPolicy(c.Envoy.Retry)
	return a
}

// retryPolicy retries connect failures, resets and the retriable statuses
// (503, 429) before the response started, on another host
// (previous_hosts), with jittered back-off that honours the engine's
// retry-after. Nil when retries are off.
func retryPolicy(r config.Retry) *routev3.RetryPolicy {
	if r.Attempts == 0 {
		return nil
	}
	return &routev3.RetryPolicy{
		RetryOn:              r.On,
		RetriableStatusCodes: r.StatusCodes,
		NumRetries:           wrapperspb.UInt32(r.Attempts),
		RetryHostPredicate: []*routev3.RetryPolicy_RetryHostPredicate{{
			Name:       "envoy.retry_host_predicates.previous_hosts",
			ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: envoy.MustAny(&previoushostsv3.PreviousHostsPredicate{})},
		}},
		HostSelectionRetryMaxAttempts: r.HostSelectionAttempts,
		RetryBackOff: &routev3.RetryPolicy_RetryBackOff{
			BaseInterval: durationpb.New(r.BaseInterval.Std()),
			MaxInterval:  durationpb.New(r.MaxInterval.Std()),
		},
		RateLimitedRetryBackOff: &routev3.RetryPolicy_RateLimitedRetryBackOff{
			ResetHeaders: []*routev3.RetryPolicy_ResetHeader{{Name: "retry-after", Format: routev3.RetryPolicy_SECONDS}},
			MaxInterval:  durationpb.New(r.MaxRetryAfter.Std()),
		},
	}
}

// weighted lists targets in order. drawHeader, when set, makes Envoy's
// pick deterministic.
func weighted(targets []weights.Target, drawHeader string) *routev3.RouteAction {
	wc := &routev3.WeightedCluster{}
	for _, t := range targets {
		wc.Clusters = append(wc.Clusters, &routev3.WeightedCluster_ClusterWeight{
			Name:   t.Cluster,
			Weight: wrapperspb.UInt32(t.Weight),
		})
	}
	if drawHeader != "" {
		wc.RandomValueSpecifier = &routev3.WeightedCluster_HeaderName{HeaderName: drawHeader}
	}
	return &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{WeightedClusters: wc}}
}

// reportHeaders are the route-level response headers ext_proc reads back:
// the weights version, and the cluster and host the router sent the
// request to. Those two are formatter operators, empty (so not added:
// keep_empty_value is off) when the router never picked a cluster — a
// reply ILB or a filter made from the request alone says nothing was
// served, rather than naming the cluster the route would have drawn.
func reportHeaders(version string) []*corev3.HeaderValueOption {
	return []*corev3.HeaderValueOption{
		setHeader(header.WeightsVersion, version),
		setHeader(header.ServedCluster, "%UPSTREAM_CLUSTER%"),
		setHeader(header.UpstreamHost, "%UPSTREAM_HOST%"),
	}
}

// setHeader overwrites (never appends) a response header, so an engine
// cannot forge ILB's report headers. value is an Envoy formatter string.
func setHeader(name, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: name, Value: value},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// directJSON makes r answer with reply's OpenAI-style JSON error, its
// code in x-ilb-reason.
func directJSON(r *routev3.Route, reply *routetable.Reply) {
	r.Action = &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{
		Status: reply.Status,
		Body:   &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: string(reply.Body())}},
	}}
	r.ResponseHeadersToAdd = append(r.ResponseHeadersToAdd,
		setHeader("content-type", "application/json"),
		setHeader(header.Reason, reply.Code),
	)
}
