package xds

import (
	"fmt"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/openai"
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
)

// routeConfig builds the source's route table (DESIGN §2), in match order:
//
//  1. x-ilb-route-cluster present → cluster_header (explicit override);
//  2. per model, x-ilb-route-model == model → weighted_clusters drawn by
//     x-ilb-route-draw (a direct 503 when no cluster has capacity);
//  3. anything else under a path prefix that reaches the engines
//     (envoy.path_prefixes) → the fallback: the default model's weights
//     for a fail-open source, a 503 with a JSON body for a fail-closed one;
//  4. any other path → a JSON 404 (path_not_found).
//
// Every route reports, in response headers, the served cluster and the
// weights version; ext_proc reads them back and removes them.
func routeConfig(c *config.Config, w *weights.Weights, s config.Source) *routev3.RouteConfiguration {
	version := w.Version()
	routes := []*routev3.Route{{
		Name: routeOverride,
		Match: match(&routev3.HeaderMatcher{
			Name:                 header.RouteCluster,
			HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true},
		}),
		Action: &routev3.Route_Route{Route: streamingAction(c, &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_ClusterHeader{ClusterHeader: header.RouteCluster},
		})},
		ResponseHeadersToAdd: reportHeaders(version),
	}}
	for _, m := range c.Models {
		cell, _ := w.Cell(s.Name, m.Name)
		r := &routev3.Route{
			Name: routeModel + m.Name,
			Match: match(&routev3.HeaderMatcher{
				Name: header.RouteModel,
				HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
					MatchPattern: &matcherv3.StringMatcher_Exact{Exact: m.Name},
				}},
			}),
		}
		if len(cell.Targets) == 0 {
			noCapacity(r, s.Name, m.Name)
		} else {
			r.Action = &routev3.Route_Route{Route: streamingAction(c, weighted(cell.Targets, header.RouteDraw))}
			r.ResponseHeadersToAdd = reportHeaders(version)
		}
		routes = append(routes, r)
	}
	routes = append(routes, fallback(c, w, s)...)
	return &routev3.RouteConfiguration{
		Name: RouteConfigName,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    VirtualHostName,
			Domains: []string{"*"},
			Routes:  routes,
		}},
	}
}

// fallback are the routes of requests that carry no ILB decision, one per
// path prefix that reaches the engines (envoy.path_prefixes), then a JSON
// 404 for every other path (an engine's /metrics or /health is not for
// clients). Envoy cannot read the model without ext_proc, so a fail-open
// source routes by its default model's weights, restricted to the
// clusters that serve every model (so a request for another model does
// not land on an engine that does not serve it) when there are any.
func fallback(c *config.Config, w *weights.Weights, s config.Source) []*routev3.Route {
	cell, _ := w.Cell(s.Name, s.DefaultModel)
	cell.Targets = servingAll(c, cell.Targets)
	var routes []*routev3.Route
	for i, prefix := range c.Envoy.PathPrefixes {
		r := &routev3.Route{Name: routeFallback, Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: prefix}}}
		if i > 0 {
			r.Name = fmt.Sprintf("%s_%d", routeFallback, i)
		}
		switch {
		case s.FailMode == config.FailClosed:
			directJSON(r, 503, "service_unavailable", "routing_unavailable", fmt.Sprintf(
				"ILB could not make a routing decision for this request and source %q is fail-closed: no request is routed without one. Retry later.", s.Name))
		case len(cell.Targets) == 0:
			noCapacity(r, s.Name, s.DefaultModel)
		default:
			// No draw header: Envoy draws at random, by the same weights.
			r.Action = &routev3.Route_Route{Route: streamingAction(c, weighted(cell.Targets, ""))}
			r.ResponseHeadersToAdd = reportHeaders(w.Version())
		}
		routes = append(routes, r)
	}
	notFound := &routev3.Route{Name: routeNotFound, Match: match()}
	directJSON(notFound, 404, "invalid_request_error", "path_not_found", fmt.Sprintf(
		"this path is not served: only paths under %s reach the engines", strings.Join(c.Envoy.PathPrefixes, ", ")))
	return append(routes, notFound)
}

// servingAll keeps the targets whose cluster serves every model, or all
// targets when none does.
func servingAll(c *config.Config, targets []weights.Target) []weights.Target {
	var out []weights.Target
	for _, t := range targets {
		e, _ := c.Cluster(t.Cluster)
		if slices.ContainsFunc(c.Models, func(m config.Model) bool { return !e.Serves(m.Name) }) {
			continue
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return targets
	}
	return out
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

func noCapacity(r *routev3.Route, source, model string) {
	directJSON(r, 503, "service_unavailable", "no_capacity", fmt.Sprintf(
		"no engine cluster has capacity for model %q from source %q", model, source))
}

// directJSON makes r answer with an OpenAI-style JSON error, its code in
// x-ilb-reason.
func directJSON(r *routev3.Route, status uint32, typ, code, msg string) {
	body := openai.ErrorBody(typ, code, msg, "")
	r.Action = &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{
		Status: status,
		Body:   &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: string(body)}},
	}}
	r.ResponseHeadersToAdd = append(r.ResponseHeadersToAdd,
		setHeader("content-type", "application/json"),
		setHeader(header.Reason, code),
	)
}
