package envoysim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// defaultRouteTimeout is RouteAction.timeout when unset
// (source/common/router/config_impl.h DEFAULT_ROUTE_TIMEOUT_MS).
const defaultRouteTimeout = 15 * time.Second

// defaultMaxDirectResponseBody is max_direct_response_body_size_bytes when
// unset (source/common/router/config_impl.cc).
const defaultMaxDirectResponseBody = 4096

// perFilterConfigs maps an HTTP filter name (HttpFilter.name) to its
// per-route configuration; only ExtProcPerRoute is modelled.
type perFilterConfigs map[string]*extProcPerRoute

func compilePerFilter(m map[string]*anypb.Any) (perFilterConfigs, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := perFilterConfigs{}
	var errs []error
	for name, a := range m {
		msg, err := a.UnmarshalNew()
		if err != nil {
			errs = append(errs, fmt.Errorf("typed_per_filter_config[%s]: %w", name, err))
			continue
		}
		pr, ok := msg.(*extprocfilterv3.ExtProcPerRoute)
		if !ok {
			errs = append(errs, fmt.Errorf("typed_per_filter_config[%s]: type %T is not supported by envoysim (only ExtProcPerRoute)", name, msg))
			continue
		}
		c, err := compileExtProcPerRoute(pr)
		if err != nil {
			errs = append(errs, fmt.Errorf("typed_per_filter_config[%s]: %w", name, err))
			continue
		}
		out[name] = c
	}
	return out, errors.Join(errs...)
}

// routeTable is a compiled RouteConfiguration.
type routeTable struct {
	name             string
	exact            map[string]*virtualHost
	suffixes         []wildcardHost // longest first
	prefixes         []wildcardHost // longest first
	def              *virtualHost
	ignorePort       bool
	ignorePathParams bool
	reqHeaders       *headerParser
	respHeaders      *headerParser
	mostSpecificWins bool
	perFilter        perFilterConfigs
	internalOnly     []string
}

// wildcardHost is a "*suffix" or "prefix*" domain without its "*".
type wildcardHost struct {
	key string
	vh  *virtualHost
}

// virtualHost is a compiled VirtualHost.
type virtualHost struct {
	name        string
	table       *routeTable
	routes      []*route
	reqHeaders  *headerParser
	respHeaders *headerParser
	perFilter   perFilterConfigs
}

// compileRouteTable compiles rc. clusterExists is consulted when cluster
// validation is on: validate_clusters defaults to validateByDefault (true for
// a route_config inlined in a listener, false for RDS; RouteConfiguration
// docs).
func compileRouteTable(rc *routev3.RouteConfiguration, clusterExists func(string) bool, validateByDefault bool) (*routeTable, error) {
	t := &routeTable{
		name:             rc.GetName(),
		exact:            map[string]*virtualHost{},
		ignorePort:       rc.GetIgnorePortInHostMatching(),
		ignorePathParams: rc.GetIgnorePathParametersInPathMatching(),
		mostSpecificWins: rc.GetMostSpecificHeaderMutationsWins(),
	}
	var errs []error
	var err error
	if t.reqHeaders, err = compileHeaderParser(rc.GetRequestHeadersToAdd(), rc.GetRequestHeadersToRemove()); err != nil {
		errs = append(errs, fmt.Errorf("request headers: %w", err))
	}
	if t.respHeaders, err = compileHeaderParser(rc.GetResponseHeadersToAdd(), rc.GetResponseHeadersToRemove()); err != nil {
		errs = append(errs, fmt.Errorf("response headers: %w", err))
	}
	if t.perFilter, err = compilePerFilter(rc.GetTypedPerFilterConfig()); err != nil {
		errs = append(errs, err)
	}
	for _, h := range rc.GetInternalOnlyHeaders() {
		t.internalOnly = append(t.internalOnly, strings.ToLower(h))
	}
	maxBody := defaultMaxDirectResponseBody
	if rc.GetMaxDirectResponseBodySizeBytes() != nil {
		maxBody = int(rc.GetMaxDirectResponseBodySizeBytes().GetValue())
	}
	validate := validateByDefault
	if rc.GetValidateClusters() != nil {
		validate = rc.GetValidateClusters().GetValue()
	}
	for i, vhc := range rc.GetVirtualHosts() {
		vh, err := t.compileVirtualHost(vhc, maxBody)
		if err != nil {
			errs = append(errs, fmt.Errorf("virtual_hosts[%d] %q: %w", i, vhc.GetName(), err))
			continue
		}
		if validate {
			errs = append(errs, vh.validateClusters(clusterExists)...)
		}
		if err := t.addDomains(vh, vhc.GetDomains()); err != nil {
			errs = append(errs, err)
		}
	}
	byLen := func(a, b wildcardHost) int { return len(b.key) - len(a.key) }
	slices.SortStableFunc(t.suffixes, byLen)
	slices.SortStableFunc(t.prefixes, byLen)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return t, nil
}

// addDomains registers vh's domains as RouteMatcher's constructor does
// (source/common/router/config_impl.cc): lower-cased; "*" is the single
// default; "*x" a suffix and "x*" a prefix wildcard; duplicates are errors.
func (t *routeTable) addDomains(vh *virtualHost, domains []string) error {
	for _, d := range domains {
		d = strings.ToLower(d)
		dup := false
		switch {
		case d == "*":
			if t.def != nil {
				return fmt.Errorf("only a single wildcard domain is permitted in route %s", t.name)
			}
			t.def = vh
		case strings.HasPrefix(d, "*"):
			dup = slices.ContainsFunc(t.suffixes, func(w wildcardHost) bool { return w.key == d[1:] })
			t.suffixes = append(t.suffixes, wildcardHost{key: d[1:], vh: vh})
		case strings.HasSuffix(d, "*"):
			dup = slices.ContainsFunc(t.prefixes, func(w wildcardHost) bool { return w.key == d[:len(d)-1] })
			t.prefixes = append(t.prefixes, wildcardHost{key: d[:len(d)-1], vh: vh})
		default:
			_, dup = t.exact[d]
			t.exact[d] = vh
		}
		if dup {
			return fmt.Errorf("only unique values for domains are permitted. Duplicate entry of domain %s in route %s", d, t.name)
		}
	}
	return nil
}

func (t *routeTable) compileVirtualHost(vhc *routev3.VirtualHost, maxBody int) (*virtualHost, error) {
	vh := &virtualHost{name: vhc.GetName(), table: t}
	var errs []error
	var err error
	if vh.reqHeaders, err = compileHeaderParser(vhc.GetRequestHeadersToAdd(), vhc.GetRequestHeadersToRemove()); err != nil {
		errs = append(errs, fmt.Errorf("request headers: %w", err))
	}
	if vh.respHeaders, err = compileHeaderParser(vhc.GetResponseHeadersToAdd(), vhc.GetResponseHeadersToRemove()); err != nil {
		errs = append(errs, fmt.Errorf("response headers: %w", err))
	}
	if vh.perFilter, err = compilePerFilter(vhc.GetTypedPerFilterConfig()); err != nil {
		errs = append(errs, err)
	}
	for i, rc := range vhc.GetRoutes() {
		r, err := compileRoute(vh, rc, maxBody)
		if err != nil {
			errs = append(errs, fmt.Errorf("routes[%d] %q: %w", i, rc.GetName(), err))
			continue
		}
		vh.routes = append(vh.routes, r)
	}
	return vh, errors.Join(errs...)
}

func (vh *virtualHost) validateClusters(exists func(string) bool) []error {
	var errs []error
	for _, r := range vh.routes {
		if r.cluster != "" && !exists(r.cluster) {
			errs = append(errs, fmt.Errorf("route: unknown cluster '%s'", r.cluster))
		}
		if r.weighted != nil {
			for _, c := range r.weighted.clusters {
				if c.name != "" && !exists(c.name) {
					errs = append(errs, fmt.Errorf("route: unknown weighted cluster '%s'", c.name))
				}
			}
		}
	}
	return errs
}

// findVirtualHost is RouteMatcher::findVirtualHost: a fast path when the
// default is the only virtual host; otherwise the (lower-cased) authority,
// without its port only when ignore_port_in_host_matching, is looked up
// exactly, then against suffix wildcards and prefix wildcards, longest first
// (a wildcard never matches a host no longer than itself), then the default.
func (t *routeTable) findVirtualHost(h *headerMap) *virtualHost {
	if len(t.exact) == 0 && len(t.suffixes) == 0 && len(t.prefixes) == 0 {
		return t.def
	}
	host, ok := h.first(":authority")
	if !ok {
		return nil
	}
	if t.ignorePort {
		if i := portStart(host); i >= 0 {
			host = host[:i]
		}
	}
	host = strings.ToLower(host)
	if vh, ok := t.exact[host]; ok {
		return vh
	}
	for _, w := range t.suffixes {
		if len(w.key) < len(host) && strings.HasSuffix(host, w.key) {
			return w.vh
		}
	}
	for _, w := range t.prefixes {
		if len(w.key) < len(host) && strings.HasPrefix(host, w.key) {
			return w.vh
		}
	}
	return t.def
}

// portStart is HeaderUtility::getPortStart: the index of the ':' that starts
// the port, or -1 (an IPv6 literal must be bracketed).
func portStart(host string) int {
	i := strings.LastIndexByte(host, ':')
	if i < 0 {
		return -1
	}
	if j := strings.LastIndexByte(host, ']'); j >= 0 && j > i {
		return -1
	}
	return i
}

// match finds the route for h: the virtual host, then the first matching
// route in order (VirtualHostImpl::getRouteFromEntries). random is the
// stream's random value, used by weighted clusters. It returns nil when
// nothing matches.
func (t *routeTable) match(h *headerMap, random uint64) *routeResult {
	vh := t.findVirtualHost(h)
	if vh == nil {
		return nil
	}
	if !h.has(":path") {
		return nil
	}
	for _, r := range vh.routes {
		if res := r.matches(h, random); res != nil {
			return res
		}
	}
	return nil
}
