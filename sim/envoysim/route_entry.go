package envoysim

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// pathKind is the RouteMatch path specifier.
type pathKind int

const (
	pathPrefix pathKind = iota
	pathExact
	pathRegex
	pathSeparatedPrefix
)

// actionKind is the Route action.
type actionKind int

const (
	actionCluster actionKind = iota
	actionClusterHeader
	actionWeighted
	actionDirect
)

// route is a compiled Route.
type route struct {
	vh            *virtualHost
	name          string
	pathKind      pathKind
	path          string
	re            *regexp.Regexp
	caseSensitive bool
	headers       []*headerMatcher
	grpc          bool

	action        actionKind
	cluster       string
	clusterHeader string
	weighted      *weightedClusters
	direct        *directResponse
	notFoundCode  int
	timeout       time.Duration // 0 disables the route timeout
	idleTimeout   *time.Duration
	prefixRewrite string
	hostRewrite   string
	retry         *retryPolicy // nil without retry_policy

	reqHeaders  *headerParser
	respHeaders *headerParser
	perFilter   perFilterConfigs
}

// weightedClusters is a compiled WeightedCluster.
type weightedClusters struct {
	clusters   []*clusterWeight
	total      uint64
	headerName string
}

// clusterWeight is one compiled ClusterWeight.
type clusterWeight struct {
	name        string
	header      string
	weight      uint64
	hostRewrite string
	reqHeaders  *headerParser
	respHeaders *headerParser
	perFilter   perFilterConfigs
}

// directResponse is a compiled DirectResponseAction.
type directResponse struct {
	status int
	body   string
}

func compileRoute(vh *virtualHost, rc *routev3.Route, maxBody int) (*route, error) {
	r := &route{vh: vh, name: rc.GetName(), caseSensitive: true}
	var errs []error
	m := rc.GetMatch()
	if m.GetCaseSensitive() != nil {
		r.caseSensitive = m.GetCaseSensitive().GetValue()
	}
	switch p := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		r.pathKind, r.path = pathPrefix, p.Prefix
	case *routev3.RouteMatch_Path:
		r.pathKind, r.path = pathExact, p.Path
	case *routev3.RouteMatch_PathSeparatedPrefix:
		r.pathKind, r.path = pathSeparatedPrefix, p.PathSeparatedPrefix
	case *routev3.RouteMatch_SafeRegex:
		re, err := compileRegex(p.SafeRegex)
		if err != nil {
			errs = append(errs, fmt.Errorf("match.safe_regex: %w", err))
		}
		r.pathKind, r.re = pathRegex, re
	default:
		errs = append(errs, errors.New("match: a path specifier (prefix, path, safe_regex, path_separated_prefix) is required"))
	}
	if !r.caseSensitive && r.pathKind != pathRegex {
		r.path = strings.ToLower(r.path)
	}
	for i, hm := range m.GetHeaders() {
		c, err := compileHeaderMatcher(hm)
		if err != nil {
			errs = append(errs, fmt.Errorf("match.headers[%d]: %w", i, err))
			continue
		}
		r.headers = append(r.headers, c)
	}
	r.grpc = m.GetGrpc() != nil

	var err error
	if r.reqHeaders, err = compileHeaderParser(rc.GetRequestHeadersToAdd(), rc.GetRequestHeadersToRemove()); err != nil {
		errs = append(errs, fmt.Errorf("request headers: %w", err))
	}
	if r.respHeaders, err = compileHeaderParser(rc.GetResponseHeadersToAdd(), rc.GetResponseHeadersToRemove()); err != nil {
		errs = append(errs, fmt.Errorf("response headers: %w", err))
	}
	if r.perFilter, err = compilePerFilter(rc.GetTypedPerFilterConfig()); err != nil {
		errs = append(errs, err)
	}
	switch a := rc.GetAction().(type) {
	case *routev3.Route_Route:
		errs = append(errs, r.compileAction(a.Route)...)
	case *routev3.Route_DirectResponse:
		r.action = actionDirect
		body := string(a.DirectResponse.GetBody().GetInlineBytes()) + a.DirectResponse.GetBody().GetInlineString()
		if a.DirectResponse.GetBody().GetFilename() != "" {
			errs = append(errs, errors.New("direct_response.body.filename: not supported by envoysim (inline_string, inline_bytes)"))
		}
		if len(body) > maxBody {
			errs = append(errs, fmt.Errorf("direct_response: response body size is %d bytes; maximum is %d", len(body), maxBody))
		}
		r.direct = &directResponse{status: int(a.DirectResponse.GetStatus()), body: body}
	default:
		errs = append(errs, errors.New("action: route or direct_response is required"))
	}
	return r, errors.Join(errs...)
}

func (r *route) compileAction(a *routev3.RouteAction) []error {
	var errs []error
	switch c := a.GetClusterSpecifier().(type) {
	case *routev3.RouteAction_Cluster:
		r.action, r.cluster = actionCluster, c.Cluster
	case *routev3.RouteAction_ClusterHeader:
		r.action, r.clusterHeader = actionClusterHeader, strings.ToLower(c.ClusterHeader)
	case *routev3.RouteAction_WeightedClusters:
		w, err := compileWeighted(c.WeightedClusters)
		if err != nil {
			errs = append(errs, err)
		}
		r.action, r.weighted = actionWeighted, w
	default:
		errs = append(errs, errors.New("route: a cluster specifier (cluster, cluster_header, weighted_clusters) is required"))
	}
	// ClusterNotFoundResponseCode: SERVICE_UNAVAILABLE (default), NOT_FOUND, INTERNAL_SERVER_ERROR.
	switch a.GetClusterNotFoundResponseCode() {
	case routev3.RouteAction_NOT_FOUND:
		r.notFoundCode = 404
	case routev3.RouteAction_INTERNAL_SERVER_ERROR:
		r.notFoundCode = 500
	default:
		r.notFoundCode = 503
	}
	r.timeout = defaultRouteTimeout
	if a.GetTimeout() != nil {
		r.timeout = a.GetTimeout().AsDuration()
	}
	if a.GetIdleTimeout() != nil {
		d := a.GetIdleTimeout().AsDuration()
		r.idleTimeout = &d
	}
	r.prefixRewrite = a.GetPrefixRewrite()
	r.hostRewrite = a.GetHostRewriteLiteral()
	rp, err := compileRetryPolicy(a.GetRetryPolicy())
	if err != nil {
		errs = append(errs, err)
	}
	r.retry = rp
	return errs
}

// compileWeighted checks what WeightedClusterSpecifierPlugin checks
// (source/common/router/weighted_cluster_specifier.cc): exactly one of name
// and cluster_header per entry, a total weight in (0, 2^32-1].
func compileWeighted(wc *routev3.WeightedCluster) (*weightedClusters, error) {
	w := &weightedClusters{headerName: strings.ToLower(wc.GetHeaderName())}
	var errs []error
	for i, c := range wc.GetClusters() {
		if (c.GetName() == "") == (c.GetClusterHeader() == "") {
			if c.GetName() == "" {
				errs = append(errs, fmt.Errorf("weighted_clusters.clusters[%d]: at least one of name or cluster_header need to be specified", i))
			} else {
				errs = append(errs, fmt.Errorf("weighted_clusters.clusters[%d]: only one of name or cluster_header can be specified", i))
			}
			continue
		}
		cw := &clusterWeight{
			name:        c.GetName(),
			header:      strings.ToLower(c.GetClusterHeader()),
			weight:      uint64(c.GetWeight().GetValue()),
			hostRewrite: c.GetHostRewriteLiteral(),
		}
		var err error
		if cw.reqHeaders, err = compileHeaderParser(c.GetRequestHeadersToAdd(), c.GetRequestHeadersToRemove()); err != nil {
			errs = append(errs, fmt.Errorf("weighted_clusters.clusters[%d] request headers: %w", i, err))
		}
		if cw.respHeaders, err = compileHeaderParser(c.GetResponseHeadersToAdd(), c.GetResponseHeadersToRemove()); err != nil {
			errs = append(errs, fmt.Errorf("weighted_clusters.clusters[%d] response headers: %w", i, err))
		}
		if cw.perFilter, err = compilePerFilter(c.GetTypedPerFilterConfig()); err != nil {
			errs = append(errs, err)
		}
		w.total += cw.weight
		w.clusters = append(w.clusters, cw)
	}
	if w.total > math.MaxUint32 {
		errs = append(errs, fmt.Errorf("the sum of weights of all weighted clusters exceeds %d", uint32(math.MaxUint32)))
	}
	if w.total == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("sum of weights in the weighted_cluster must be greater than 0"))
	}
	return w, errors.Join(errs...)
}

// sanitizePath removes ";..." when ignore_path_parameters_in_path_matching,
// then the query and fragment (RouteEntryImplBase::sanitizePathBeforePathMatching
// and PathUtil::removeQueryAndFragment).
func (r *route) sanitizePath(path string) string {
	if r.vh.table.ignorePathParams {
		if i := strings.IndexByte(path, ';'); i >= 0 {
			path = path[:i]
		}
	}
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	return path
}

// pathMatches applies the path specifier; it returns the length of the
// matched prefix, used by prefix_rewrite.
func (r *route) pathMatches(path string) (int, bool) {
	p := r.sanitizePath(path)
	cmp := p
	if !r.caseSensitive {
		cmp = strings.ToLower(p)
	}
	switch r.pathKind {
	case pathPrefix:
		return len(r.path), strings.HasPrefix(cmp, r.path)
	case pathExact:
		return len(r.path), cmp == r.path
	case pathRegex:
		return len(p), r.re.MatchString(p)
	default: // path_separated_prefix
		ok := len(cmp) >= len(r.path) && strings.HasPrefix(cmp, r.path) &&
			(len(cmp) == len(r.path) || cmp[len(r.path)] == '/')
		return len(r.path), ok
	}
}

// isGrpcRequest is Grpc::Common::isGrpcRequestHeaders: content-type
// "application/grpc" or "application/grpc+..." / "application/grpc;...".
func isGrpcRequest(h *headerMap) bool {
	ct := h.value("content-type")
	if !strings.HasPrefix(ct, "application/grpc") {
		return false
	}
	return len(ct) == len("application/grpc") || ct[len("application/grpc")] == '+' || ct[len("application/grpc")] == ';'
}

// matches is RouteEntryImplBase::matchRoute plus the path matcher; on a match
// it resolves the cluster (clusterEntry): cluster_header reads the first value
// (absent: ""), weighted clusters pick with random.
func (r *route) matches(h *headerMap, random uint64) *routeResult {
	if r.grpc && !isGrpcRequest(h) {
		return nil
	}
	if !matchAllHeaders(r.headers, h) {
		return nil
	}
	if _, ok := r.pathMatches(h.value(":path")); !ok {
		return nil
	}
	res := &routeResult{route: r}
	switch r.action {
	case actionCluster:
		res.cluster = r.cluster
	case actionClusterHeader:
		res.cluster = h.value(r.clusterHeader)
	case actionWeighted:
		res.weighted = r.weighted.pick(h, random)
		if res.weighted.name != "" {
			res.cluster = res.weighted.name
		} else {
			res.cluster = h.value(res.weighted.header)
		}
	}
	return res
}

// pick is WeightedClusterSpecifierPlugin::pickWeightedCluster: the random
// value comes from header_name when that header has exactly one value that
// absl::SimpleAtoi parses as a uint64, else from the stream's random value;
// selected = value % total; the first cluster whose half-open interval
// [begin, end) holds selected wins (weight-0 clusters never do).
func (w *weightedClusters) pick(h *headerMap, random uint64) *clusterWeight {
	value := random
	if w.headerName != "" {
		if vals := h.get(w.headerName); len(vals) == 1 {
			if v, ok := simpleAtoiU64(vals[0]); ok {
				value = v
			}
		}
	}
	selected := value % w.total
	var begin uint64
	for _, c := range w.clusters {
		end := begin + c.weight
		if selected >= begin && selected < end {
			return c
		}
		begin = end
	}
	return w.clusters[len(w.clusters)-1] // unreachable: total > 0
}

// simpleAtoiU64 is absl::SimpleAtoi for uint64: surrounding ASCII whitespace
// and one leading '+' are accepted; a '-', other characters, an empty number
// or overflow are not.
func simpleAtoiU64(s string) (uint64, bool) {
	s = strings.Trim(s, " \t\n\v\f\r")
	s = strings.TrimPrefix(s, "+")
	if s == "" {
		return 0, false
	}
	var v uint64
	for i := range len(s) {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}
