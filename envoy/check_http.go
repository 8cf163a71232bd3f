package envoy

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"

	"github.com/ilbproject/ilb/config"
)

// checkListener finds the HTTP connection managers of l's filter chains.
func (k *checker) checkListener(l *listenerv3.Listener) {
	chains := l.GetFilterChains()
	if dc := l.GetDefaultFilterChain(); dc != nil {
		chains = append(chains, dc)
	}
	for i, fc := range chains {
		for j, f := range fc.GetFilters() {
			var h hcmv3.HttpConnectionManager
			if f.GetTypedConfig() == nil || f.GetTypedConfig().UnmarshalTo(&h) != nil {
				continue // not an HCM (or already reported by Validate)
			}
			k.checkHCM(fmt.Sprintf("listener %q filter_chains[%d].filters[%d]", l.GetName(), i, j), &h)
		}
	}
}

// checkHCM: routes it uses, path normalisation where ILB's ext_proc runs,
// the HTTP filter chain and ext_proc's rules.
func (k *checker) checkHCM(where string, h *hcmv3.HttpConnectionManager) {
	var routes []*routev3.RouteConfiguration
	if rc := h.GetRouteConfig(); rc != nil {
		k.checkRouteConfig(where+" route_config", rc)
		routes = append(routes, rc)
	}
	if rds := h.GetRds(); rds != nil {
		name := rds.GetRouteConfigName()
		if len(k.b.Routes) > 0 && !k.routes[name] {
			k.errorf(where+" rds", "route configuration %q is not in this bundle", name)
		}
		for _, rc := range k.b.Routes {
			if rc.GetName() == name {
				routes = append(routes, rc)
			}
		}
		if rds.GetConfigSource().GetAds() != nil && k.b.Bootstrap != nil && k.b.Bootstrap.GetDynamicResources().GetAdsConfig() == nil {
			k.errorf(where+" rds", "config_source uses ads but the bootstrap has no dynamic_resources.ads_config")
		}
	}
	k.checkOverrideHeaders(where, h)
	k.checkPathNormalization(where, h)
	filters := h.GetHttpFilters()
	router := -1
	for i, f := range filters {
		fw := fmt.Sprintf("%s http_filters[%d] (%s)", where, i, f.GetName())
		m, err := f.GetTypedConfig().UnmarshalNew()
		if err != nil {
			continue // reported by Validate
		}
		switch c := m.(type) {
		case *routerv3.Router:
			router = i
		case *extprocv3.ExternalProcessor:
			k.checkExtProc(fw, c, routes)
			k.checkOverrideMetadata(fw, c)
		}
	}
	switch {
	case router < 0:
		k.errorf(where+" http_filters", "no router filter (envoy.extensions.filters.http.router.v3.Router): no request reaches an upstream")
	case router != len(filters)-1:
		k.errorf(where+" http_filters", "the router filter is at index %d of %d: Envoy requires the terminal router filter last", router, len(filters))
	}
}

// checkExtProc applies Envoy's own load-time checks of the ext_proc
// filter (source/extensions/filters/http/ext_proc/config.cc,
// verifyFilterConfig and verifyProcessingModeConfig: Envoy refuses the
// listener when they fail) and ILB's.
func (k *checker) checkExtProc(where string, ep *extprocv3.ExternalProcessor, routes []*routev3.RouteConfiguration) {
	pm := ep.GetProcessingMode()
	if (ep.GetGrpcService() != nil) == (ep.GetHttpService() != nil) {
		k.errorf(where, "one and only one of grpc_service or http_service must be set")
	}
	if ep.GetDisableClearRouteCache() && ep.GetRouteCacheAction() != extprocv3.ExternalProcessor_DEFAULT {
		k.errorf(where, "disable_clear_route_cache and route_cache_action %s cannot both be set", ep.GetRouteCacheAction())
	}
	if ep.GetHttpService() != nil && (pm.GetRequestBodyMode() != extprocv3.ProcessingMode_NONE || pm.GetResponseBodyMode() != extprocv3.ProcessingMode_NONE ||
		pm.GetRequestTrailerMode() == extprocv3.ProcessingMode_SEND || pm.GetResponseTrailerMode() == extprocv3.ProcessingMode_SEND) {
		k.errorf(where, "with http_service the processing modes cannot send a body or trailers (request_body_mode %s, response_body_mode %s)",
			pm.GetRequestBodyMode(), pm.GetResponseBodyMode())
	}
	full := extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED
	if pm.GetRequestBodyMode() == full && pm.GetRequestTrailerMode() != extprocv3.ProcessingMode_SEND {
		k.errorf(where, "request_body_mode FULL_DUPLEX_STREAMED needs request_trailer_mode SEND, not %s", pm.GetRequestTrailerMode())
	}
	if pm.GetResponseBodyMode() == full && pm.GetResponseTrailerMode() != extprocv3.ProcessingMode_SEND {
		k.errorf(where, "response_body_mode FULL_DUPLEX_STREAMED needs response_trailer_mode SEND, not %s", pm.GetResponseTrailerMode())
	}
	if (pm.GetRequestBodyMode() == full || pm.GetResponseBodyMode() == full) && ep.GetFailureModeAllow() {
		k.errorf(where, "failure_mode_allow must be false when a body mode is FULL_DUPLEX_STREAMED")
	}
	if gs := ep.GetGrpcService(); gs != nil {
		k.grpcCluster(where+" grpc_service", gs, false)
	}
	if ep.GetMessageTimeout() == nil {
		k.warnf(where, "message_timeout unset: Envoy's default 200ms must cover receiving a buffered prompt's decision; set it explicitly")
	}
	noClear := ep.GetDisableClearRouteCache() || ep.GetRouteCacheAction() == extprocv3.ExternalProcessor_RETAIN
	if noClear && matchesILBHeaders(routes) {
		k.errorf(where, "routes match x-ilb-route-* headers that ext_proc sets, but the route cache is never cleared (disable_clear_route_cache or route_cache_action RETAIN): the route is chosen before ILB decides")
	}
}

// matchesILBHeaders tells whether any route matches on an x-ilb-route-*
// header.
func matchesILBHeaders(rcs []*routev3.RouteConfiguration) bool {
	for _, rc := range rcs {
		for _, vh := range rc.GetVirtualHosts() {
			for _, rt := range vh.GetRoutes() {
				for _, hm := range rt.GetMatch().GetHeaders() {
					if strings.HasPrefix(strings.ToLower(hm.GetName()), "x-ilb-route") {
						return true
					}
				}
			}
		}
	}
	return false
}

// longGeneration is how long an LLM answer may stream: an explicit route
// timeout below it is worth a warning.
const longGeneration = 5 * time.Minute

// checkRouteConfig: cluster references, weights, timeouts and retries.
func (k *checker) checkRouteConfig(where string, rc *routev3.RouteConfiguration) {
	for _, vh := range rc.GetVirtualHosts() {
		vw := fmt.Sprintf("%s virtual host %q", where, vh.GetName())
		if rp := vh.GetRetryPolicy(); rp != nil {
			k.checkRetry(vw+" retry_policy", rp)
		}
		for i, rt := range vh.GetRoutes() {
			name := rt.GetName()
			if name == "" {
				name = fmt.Sprintf("#%d", i)
			}
			k.checkRoute(fmt.Sprintf("%s route %q", vw, name), rt)
		}
	}
}

func (k *checker) checkRoute(where string, rt *routev3.Route) {
	a := rt.GetRoute()
	if a == nil {
		return // direct response, redirect, filter action
	}
	if c := a.GetCluster(); c != "" {
		k.cluster(where, "cluster", c)
	}
	if wc := a.GetWeightedClusters(); wc != nil {
		var total uint64
		for i, cw := range wc.GetClusters() {
			if cw.GetName() != "" {
				k.cluster(where, fmt.Sprintf("weighted_clusters.clusters[%d]", i), cw.GetName())
			}
			total += uint64(cw.GetWeight().GetValue())
		}
		switch {
		case total == 0:
			k.errorf(where, "weighted_clusters: the weights sum to 0; Envoy needs a positive total")
		case total > math.MaxUint32:
			k.errorf(where, "weighted_clusters: the weights sum to %d, more than Envoy's 32-bit maximum %d", total, uint64(math.MaxUint32))
		}
		if tw := wc.GetTotalWeight(); tw != nil && uint64(tw.GetValue()) != total { //nolint:staticcheck // deprecated, still enforced
			k.errorf(where, "weighted_clusters: total_weight %d differs from the sum of the weights %d", tw.GetValue(), total)
		}
	}
	var timeout time.Duration
	switch t := a.GetTimeout(); {
	case t == nil:
		k.errorf(where, "timeout unset: Envoy's default 15s ends every response after 15s, and LLM answers stream for minutes; set timeout: 0s and an idle_timeout")
	case t.AsDuration() > 0 && t.AsDuration() < longGeneration:
		timeout = t.AsDuration()
		k.warnf(where, "timeout %s cuts any generation that streams longer; prefer timeout: 0s with an idle_timeout", timeout)
	default:
		timeout = t.AsDuration()
	}
	if rp := a.GetRetryPolicy(); rp != nil {
		k.checkRetry(where+" retry_policy", rp)
		if pt := rp.GetPerTryTimeout(); pt != nil && timeout > 0 && pt.AsDuration() >= timeout {
			k.warnf(where+" retry_policy", "per_try_timeout %s is not below the route timeout %s: no retry can happen in time", pt.AsDuration(), timeout)
		}
	}
}

// retryConditions are the retry_on values Envoy knows, HTTP and gRPC
// (config.RetryOnHTTP, config.RetryOnGRPC).
var retryConditions = func() map[string]bool {
	m := map[string]bool{}
	for _, on := range append(slices.Clone(config.RetryOnHTTP), config.RetryOnGRPC...) {
		m[on] = true
	}
	return m
}()

func (k *checker) checkRetry(where string, rp *routev3.RetryPolicy) {
	codes := false
	for _, on := range strings.Split(rp.GetRetryOn(), ",") {
		on = strings.TrimSpace(on)
		if on == "" {
			continue
		}
		if !retryConditions[on] {
			k.errorf(where, "retry_on: unknown condition %q (Envoy ignores it silently)", on)
		}
		codes = codes || on == "retriable-status-codes"
	}
	switch n := len(rp.GetRetriableStatusCodes()); {
	case codes && n == 0:
		k.errorf(where, "retry_on has retriable-status-codes but retriable_status_codes is empty: no status is retried")
	case !codes && n > 0:
		k.errorf(where, "retriable_status_codes %v are ignored: retry_on lacks retriable-status-codes", rp.GetRetriableStatusCodes())
	}
	for i, c := range rp.GetRetriableStatusCodes() {
		if c < 100 || c > 599 {
			k.errorf(where, "retriable_status_codes[%d]: %d is not an HTTP status", i, c)
		}
	}
	if rp.GetRetryOn() != "" && rp.GetNumRetries() != nil && rp.GetNumRetries().GetValue() == 0 {
		k.warnf(where, "num_retries is 0: retry_on %q never retries", rp.GetRetryOn())
	}
	for _, p := range rp.GetRetryHostPredicate() {
		var ph previoushostsv3.PreviousHostsPredicate
		if p.GetName() == "envoy.retry_host_predicates.previous_hosts" || p.GetTypedConfig().UnmarshalTo(&ph) == nil {
			if rp.GetHostSelectionRetryMaxAttempts() < 2 {
				k.warnf(where, "previous_hosts with host_selection_retry_max_attempts %d: the retry is likely to pick the host that just failed; allow 3 or more", rp.GetHostSelectionRetryMaxAttempts())
			}
		}
	}
}
