package envoysim

// routeResult is the route selected for a stream, with the cluster it
// resolved to (Envoy's RouteEntry, or a DynamicRouteEntry /
// WeightedClusterEntry wrapping it). It is cached per stream until a filter
// clears the route cache.
type routeResult struct {
	route    *route
	cluster  string         // resolved cluster name; "" when the header was missing
	weighted *clusterWeight // the picked entry of weighted_clusters, or nil
}

// perFilter returns the per-route configuration of the filter named name,
// merged from the least specific level to the most specific one: route
// configuration, virtual host, route, weighted cluster entry
// (traversePerFilterConfig, then FilterConfigPerRoute's merge in
// ext_proc.cc mergePerRouteConfig); nil when no level has one.
func (rr *routeResult) perFilter(name string) *extProcPerRoute {
	r := rr.route
	var merged *extProcPerRoute
	for _, m := range []perFilterConfigs{r.vh.table.perFilter, r.vh.perFilter, r.perFilter, rr.weightedPerFilter()} {
		c, ok := m[name]
		switch {
		case !ok:
		case merged == nil:
			merged = c
		default:
			merged = mergeExtProcPerRoute(merged, c)
		}
	}
	return merged
}

func (rr *routeResult) weightedPerFilter() perFilterConfigs {
	if rr.weighted == nil {
		return nil
	}
	return rr.weighted.perFilter
}

// parsers returns the route, virtual host and route configuration parsers
// in evaluation order: most specific first unless
// most_specific_header_mutations_wins, so that by default the later (outer)
// one wins on overwrite (config_impl.cc getHeaderParsers).
func (rr *routeResult) parsers(response bool) []*headerParser {
	r := rr.route
	route, vh, global := r.reqHeaders, r.vh.reqHeaders, r.vh.table.reqHeaders
	if response {
		route, vh, global = r.respHeaders, r.vh.respHeaders, r.vh.table.respHeaders
	}
	if r.vh.table.mostSpecificWins {
		return []*headerParser{global, vh, route}
	}
	return []*headerParser{route, vh, global}
}

// finalizeRequestHeaders applies request_headers_to_add/remove, host and
// prefix rewrites, as WeightedClusterEntry::finalizeRequestHeaders (entry
// parser, entry host_rewrite_literal) followed by
// RouteEntryImplBase::finalizeRequestHeaders (parsers, host_rewrite_literal,
// prefix_rewrite with x-envoy-original-path unless suppressed).
func (rr *routeResult) finalizeRequestHeaders(h *headerMap, fc formatContext, insertOriginalPath bool) {
	if w := rr.weighted; w != nil {
		w.reqHeaders.evaluate(h, fc)
		if w.hostRewrite != "" {
			h.set(":authority", w.hostRewrite)
		}
	}
	for _, p := range rr.parsers(false) {
		p.evaluate(h, fc)
	}
	r := rr.route
	if r.hostRewrite != "" {
		h.set(":authority", r.hostRewrite)
	}
	if r.prefixRewrite == "" {
		return
	}
	path := h.value(":path")
	n, ok := r.pathMatches(path)
	if !ok {
		return // the path changed after the route was cached; Envoy asserts here
	}
	if insertOriginalPath {
		h.set("x-envoy-original-path", path)
	}
	h.set(":path", r.prefixRewrite+path[n:])
}

// finalizeResponseHeaders applies response_headers_to_add/remove: the
// weighted cluster entry's first, then the route's, virtual host's and route
// configuration's (WeightedClusterEntry::finalizeResponseHeaders).
func (rr *routeResult) finalizeResponseHeaders(h *headerMap, fc formatContext) {
	if rr.weighted != nil {
		rr.weighted.respHeaders.evaluate(h, fc)
	}
	for _, p := range rr.parsers(true) {
		p.evaluate(h, fc)
	}
}
