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

// perFilter returns the most specific per-filter configuration for the
// filter named name: weighted cluster entry, route, virtual host, route
// configuration (RouteEntryImplBase::perFilterConfigs; for ExtProcPerRoute
// the most specific "disabled" wins, ext_proc.cc mergePerRouteConfig).
func (rr *routeResult) perFilter(name string) (perFilterConfig, bool) {
	r := rr.route
	for _, m := range []perFilterConfigs{rr.weightedPerFilter(), r.perFilter, r.vh.perFilter, r.vh.table.perFilter} {
		if c, ok := m[name]; ok {
			return c, true
		}
	}
	return perFilterConfig{}, false
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
