package istio

import (
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/routetable"
	"github.com/ilbproject/ilb/weights"
)

// Names of the VirtualService's HTTP routes, which become Envoy's route
// names (access logs, stats) and which the EnvoyFilter's route patches
// match.
const (
	routeClusterPrefix = "ilb-cluster-"
	routeModelPrefix   = "ilb-model-"
	routeHintPrefix    = "ilb-hint-"
	routeDefault       = "ilb-default"
	routeNotFound      = "ilb-not-found"
)

// IstioTotal is the sum of the weights of an Istio route's destinations.
const IstioTotal = 100

// virtualService renders the source's route table (routetable.Plan), in
// match order:
//
//  1. per engine cluster the source may use: x-ilb-route-cluster exact
//     name → its service (ext_proc names the cluster on every request);
//  2. per model: x-ilb-route-model exact model → the cell's weights (an
//     ext_proc that named no cluster, or a cluster without a route);
//  3. fail-open sources only, per model: the client hint x-ilb-model exact
//     name or alias → the same weights (no ext_proc decision);
//  4. the default: the default model's weights on the clusters that serve
//     every model (fail-open), or a 503 with a JSON body (fail-closed);
//  5. any other path: a JSON 404 (path_not_found).
//
// A cell without capacity is a 503 with a JSON body. Routes have no
// timeout (Istio's default; answers stream for minutes), the configured
// retries, and report the served cluster, weights version and upstream
// host in response headers for ext_proc to read back.
func (r *renderer) virtualService(p plan) (Object, bool) {
	s := p.source
	for _, m := range r.c.Models {
		r.checkCell(s, m.Name)
	}
	var routes []*networkingv1.HTTPRoute
	for _, st := range routetable.Plan(r.c, r.w, s) {
		switch st.Kind {
		case routetable.ToCluster:
			for _, e := range st.Clusters {
				if e.Service == nil {
					continue // reported with the DestinationRules
				}
				routes = append(routes, r.route(routeClusterPrefix+e.Name, matches(header.RouteCluster, e.Name),
					[]*networkingv1.HTTPRouteDestination{destination(e, 0)}))
			}
		case routetable.ByModel:
			routes = append(routes, r.weighted(routeModelPrefix+st.Model, matches(header.RouteModel, st.Model), st, s))
		case routetable.ByHint:
			routes = append(routes, r.weighted(routeHintPrefix+st.Model, underPaths(matches(header.Model, st.Names...), st.Prefixes), st, s))
		case routetable.Fallback:
			routes = append(routes, r.weighted(routeDefault, underPaths(nil, st.Prefixes), st, s))
		case routetable.NotFound:
			// Any other path (an engine's /metrics or /health) is not for clients.
			routes = append(routes, directJSON(routeNotFound, st.Reply))
		}
	}
	md, ok := r.meta(s.Name, r.o.Namespace, map[string]string{versionAnnotation: r.w.Version(), policyAnnotation: r.w.Policy()}, s.Name)
	if !ok {
		return Object{}, false
	}
	return Object{
		APIVersion: NetworkingV1, Kind: KindVirtualService, Metadata: md,
		Spec: &networkingv1.VirtualService{Hosts: slices.Clone(p.placement.Hosts), Gateways: slices.Clone(p.placement.Gateways), Http: routes},
	}, true
}

// checkCell reports a cell of (source, model) that does not fit the
// configuration: missing, or naming unknown clusters, clusters outside
// the source's residency or that do not serve the model.
func (r *renderer) checkCell(s config.Source, model string) {
	cell, ok := r.w.Cell(s.Name, model)
	if !ok {
		r.errorf("weights %s: no cell for source %s and model %s: were they computed for this configuration?", r.w.Version(), s.Name, model)
		return
	}
	for _, t := range cell.Targets {
		e, ok := r.c.Cluster(t.Cluster)
		switch {
		case !ok:
			r.errorf("weights %s: cell (%s, %s): unknown cluster %q", r.w.Version(), s.Name, model, t.Cluster)
		case !s.Allows(e.Region):
			r.errorf("weights %s: cell (%s, %s): cluster %s is in region %s, outside the allowed regions %v of source %s",
				r.w.Version(), s.Name, model, e.Name, e.Region, s.AllowedRegions, s.Name)
		case !e.Serves(model):
			r.errorf("weights %s: cell (%s, %s): cluster %s does not serve model %s", r.w.Version(), s.Name, model, e.Name, model)
		}
	}
}

// weighted renders st under match: its targets by their weights in
// Istio's integers, or its reply; a 503 no_capacity when every target
// rounds to nothing (or has no service).
func (r *renderer) weighted(name string, match []*networkingv1.HTTPMatchRequest, st routetable.Step, s config.Source) *networkingv1.HTTPRoute {
	reply := st.Reply
	if reply == nil {
		pct := percents(st.Targets)
		var dests []*networkingv1.HTTPRouteDestination
		for i, t := range st.Targets {
			e, ok := r.c.Cluster(t.Cluster)
			if pct[i] == 0 || !ok || e.Service == nil {
				continue // rounded to nothing, or reported
			}
			dests = append(dests, destination(e, pct[i]))
		}
		if len(dests) > 0 {
			return r.route(name, match, dests)
		}
		reply = routetable.NoCapacity(s.Name, st.Model)
	}
	rt := directJSON(name, reply)
	rt.Match = match
	return rt
}

// route is a streaming route to dests with the configured retries.
func (r *renderer) route(name string, match []*networkingv1.HTTPMatchRequest, dests []*networkingv1.HTTPRouteDestination) *networkingv1.HTTPRoute {
	return &networkingv1.HTTPRoute{
		Name:    name,
		Match:   match,
		Route:   dests,
		Retries: r.retries(),
		Headers: responseHeaders(map[string]string{
			header.WeightsVersion: r.w.Version(),
			header.UpstreamHost:   "%UPSTREAM_HOST%",
		}),
	}
}

// retries: the configured attempts on the configured conditions, to
// another host, with the configured base back-off. Istio takes retriable
// status codes inside retryOn. Attempts 0 renders `retries: {}`, which
// Istio reads as no retries.
func (r *renderer) retries() *networkingv1.HTTPRetry {
	rt := r.c.Envoy.Retry
	if rt.Attempts == 0 {
		return &networkingv1.HTTPRetry{}
	}
	var on []string
	for part := range strings.SplitSeq(rt.On, ",") {
		if p := strings.TrimSpace(part); p != "" {
			on = append(on, p)
		}
	}
	for _, code := range rt.StatusCodes {
		on = append(on, strconv.FormatUint(uint64(code), 10))
	}
	return &networkingv1.HTTPRetry{
		Attempts:                 int32Of(rt.Attempts),
		RetryOn:                  strings.Join(on, ","),
		RetryIgnorePreviousHosts: wrapperspb.Bool(true),
		Backoff:                  r.duration("envoy.retry.base_interval", rt.BaseInterval),
	}
}

// destination is the service of e, reporting e as the served cluster.
func destination(e config.EngineCluster, weight uint32) *networkingv1.HTTPRouteDestination {
	return &networkingv1.HTTPRouteDestination{
		Destination: &networkingv1.Destination{
			Host: e.Service.Host,
			Port: &networkingv1.PortSelector{Number: uint32(e.Service.Port)}, // validated: 1..65535
		},
		Weight:  int32Of(weight),
		Headers: responseHeaders(map[string]string{header.ServedCluster: e.Name}),
	}
}

// matches matches any of values exactly in the header name.
func matches(name string, values ...string) []*networkingv1.HTTPMatchRequest {
	out := make([]*networkingv1.HTTPMatchRequest, len(values))
	for i, v := range values {
		out[i] = &networkingv1.HTTPMatchRequest{Headers: map[string]*networkingv1.StringMatch{
			name: {MatchType: &networkingv1.StringMatch_Exact{Exact: v}},
		}}
	}
	return out
}

// underPaths restricts match to the path prefixes that reach the engines:
// each of its alternatives (or, for nil, any request) under each prefix.
func underPaths(match []*networkingv1.HTTPMatchRequest, prefixes []string) []*networkingv1.HTTPMatchRequest {
	if match == nil {
		match = []*networkingv1.HTTPMatchRequest{{}}
	}
	var out []*networkingv1.HTTPMatchRequest
	for _, m := range match {
		for _, p := range prefixes {
			c := proto.CloneOf(m)
			c.Uri = &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Prefix{Prefix: p}}
			out = append(out, c)
		}
	}
	return out
}

// responseHeaders sets (overwrites: an engine cannot forge them) response
// headers.
func responseHeaders(set map[string]string) *networkingv1.Headers {
	return &networkingv1.Headers{Response: &networkingv1.Headers_HeaderOperations{Set: set}}
}

// directJSON answers with reply's OpenAI-style JSON error, its code in
// x-ilb-reason, as ILB's own routes do.
func directJSON(name string, reply *routetable.Reply) *networkingv1.HTTPRoute {
	return &networkingv1.HTTPRoute{
		Name: name,
		DirectResponse: &networkingv1.HTTPDirectResponse{
			Status: reply.Status,
			Body:   &networkingv1.HTTPBody{Specifier: &networkingv1.HTTPBody_String_{String_: string(reply.Body())}},
		},
		Headers: responseHeaders(map[string]string{
			"content-type": "application/json",
			header.Reason:  reply.Code,
		}),
	}
}

// percents converts weights summing to weights.Total into Istio's, summing
// to IstioTotal, by largest remainder in list order (ties to the earlier
// target). A target may round to 0; at least one gets a positive weight.
func percents(targets []weights.Target) []uint32 {
	shares := make([]float64, len(targets))
	for i, t := range targets {
		shares[i] = float64(t.Weight)
	}
	return weights.Quantize(shares, IstioTotal)
}
