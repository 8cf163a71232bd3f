package envoysim

import (
	"fmt"
	"net/http"
	"strings"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// Path normalisation of the HTTP connection manager
// (ConnectionManagerUtility::maybeNormalizePath,
// source/common/http/conn_manager_utility.cc), run by
// ActiveStream::decodeHeaders (conn_manager_impl.cc) on every request
// before the host normalisation, the request header mutations, the route
// and the HTTP filters: what the filters (ext_proc), the route table and
// the upstream see is the normalised :path.
//
// Runtime defaults assumed (envoysim has no runtime layer):
// envoy.reloadable_features.http_reject_path_with_fragment on (a :path
// with '#' is refused whatever the configuration);
// http_connection_manager.normalize_path unset (0%: normalize_path unset
// is false); http_connection_manager.path_with_escaped_slashes_action
// unset (IMPLEMENTATION_SPECIFIC_DEFAULT is KEEP_UNCHANGED) and
// path_with_escaped_slashes_action_enabled 100%;
// envoy.reloadable_features.strip_dotdot_segments_with_parameters on;
// no header validator (UHV) extension.

// pathNormalization is the compiled path configuration of a connection
// manager.
type pathNormalization struct {
	normalize bool // normalize_path
	merge     bool // merge_slashes
	// escapedSlashes is path_with_escaped_slashes_action, never
	// IMPLEMENTATION_SPECIFIC_DEFAULT.
	escapedSlashes hcmv3.HttpConnectionManager_PathWithEscapedSlashesAction
}

// compilePathNormalization reads normalize_path, merge_slashes and
// path_with_escaped_slashes_action (HttpConnectionManagerConfig). The
// three are independent: merge_slashes applies with or without
// normalize_path. An action outside the enum is refused.
func compilePathNormalization(c *hcmv3.HttpConnectionManager) (pathNormalization, error) {
	p := pathNormalization{
		normalize:      c.GetNormalizePath().GetValue(),
		merge:          c.GetMergeSlashes(),
		escapedSlashes: c.GetPathWithEscapedSlashesAction(),
	}
	switch p.escapedSlashes {
	case hcmv3.HttpConnectionManager_IMPLEMENTATION_SPECIFIC_DEFAULT:
		p.escapedSlashes = hcmv3.HttpConnectionManager_KEEP_UNCHANGED
	case hcmv3.HttpConnectionManager_KEEP_UNCHANGED, hcmv3.HttpConnectionManager_REJECT_REQUEST,
		hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT, hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD:
	default:
		return p, fmt.Errorf("path_with_escaped_slashes_action %d is not a PathWithEscapedSlashesAction (KEEP_UNCHANGED, REJECT_REQUEST, UNESCAPE_AND_REDIRECT, UNESCAPE_AND_FORWARD)", int32(p.escapedSlashes))
	}
	return p, nil
}

// pathVerdict is ConnectionManagerUtility::NormalizePathAction.
type pathVerdict int

const (
	pathContinue pathVerdict = iota
	pathReject               // 400, path_normalization_failed
	pathRedirect             // 307 to the normalised path
)

// apply is maybeNormalizePath on a :path value: the path to go on with
// and the verdict. In order:
//  1. a '#' anywhere refuses the request;
//  2. unless KEEP_UNCHANGED, %2F and %2f become '/' and %5C and %5c
//     become '\' in the path before '?' (PathUtil::unescapeSlashes); if
//     any was found, REJECT_REQUEST refuses, UNESCAPE_AND_REDIRECT will
//     redirect once the steps below are done, UNESCAPE_AND_FORWARD goes on;
//  3. normalize_path: canonicalPath (path_normalize_canon.go), which may
//     refuse;
//  4. merge_slashes: PathUtil::mergeSlashes.
func (p pathNormalization) apply(path string) (string, pathVerdict) {
	if strings.IndexByte(path, '#') >= 0 {
		return path, pathReject
	}
	verdict := pathContinue
	if p.escapedSlashes != hcmv3.HttpConnectionManager_KEEP_UNCHANGED {
		var found bool
		if path, found = unescapeSlashes(path); found {
			switch p.escapedSlashes {
			case hcmv3.HttpConnectionManager_REJECT_REQUEST:
				return path, pathReject
			case hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT:
				verdict = pathRedirect
			}
		}
	}
	if p.normalize {
		var ok bool
		if path, ok = canonicalPath(path); !ok {
			return path, pathReject
		}
	}
	if p.merge {
		path = mergeSlashes(path)
	}
	return path, verdict
}

// slashEscapes are the escapes PathUtil::unescapeSlashes decodes.
var slashEscapes = strings.NewReplacer("%2F", "/", "%2f", "/", "%5C", `\`, "%5c", `\`)

// unescapeSlashes is PathUtil::unescapeSlashes: %2F, %2f, %5C and %5c
// decoded in one left-to-right pass over the path before '?'; found says
// whether any was.
func unescapeSlashes(p string) (string, bool) {
	path, query := p, ""
	if i := strings.IndexByte(p, '?'); i >= 0 {
		path, query = p[:i], p[i:]
	}
	if strings.IndexByte(path, '%') < 0 {
		return p, false
	}
	out := slashEscapes.Replace(path) + query
	return out, len(out) != len(p)
}

// mergeSlashes is PathUtil::mergeSlashes: in the path before '?', runs of
// '/' become one; a leading and a trailing '/' are kept.
func mergeSlashes(p string) string {
	path, query := p, ""
	if i := strings.IndexByte(p, '?'); i >= 0 {
		path, query = p[:i], p[i:]
	}
	if !strings.Contains(path, "//") {
		return p
	}
	var b strings.Builder
	if strings.HasPrefix(path, "/") {
		b.WriteByte('/')
	}
	first := true
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "" {
			continue
		}
		if !first {
			b.WriteByte('/')
		}
		b.WriteString(seg)
		first = false
	}
	if strings.HasSuffix(path, "/") {
		b.WriteByte('/')
	}
	return b.String() + query
}

// normalizePath applies the connection manager's path normalisation to
// the request's :path. It returns the local reply ActiveStream::
// decodeHeaders sends instead of going on: 400 with no body (details
// path_normalization_failed) when the path is refused, or when a gRPC
// request (content-type application/grpc...) would be redirected; 307
// with location set to the normalised :path (query included) for
// UNESCAPE_AND_REDIRECT.
func (s *stream) normalizePath() *localReply {
	orig, ok := s.req.first(":path")
	if !ok {
		return nil
	}
	path, verdict := s.hcm.paths.apply(orig)
	if verdict == pathRedirect && isGRPC(s.req.value("content-type")) {
		verdict = pathReject
	}
	switch verdict {
	case pathReject:
		return &localReply{status: http.StatusBadRequest, details: "path_normalization_failed"}
	case pathRedirect:
		return &localReply{
			status: http.StatusTemporaryRedirect, details: "path_normalization_failed",
			modify: func(h *headerMap) { h.set("location", path) },
		}
	}
	if path != orig {
		s.req.set(":path", path)
	}
	return nil
}

// isGRPC is Grpc::Common::hasGrpcContentType.
func isGRPC(ct string) bool {
	rest, ok := strings.CutPrefix(ct, "application/grpc")
	return ok && (rest == "" || rest[0] == '+' || rest[0] == ';')
}

// replyBeforeFilters sends a local reply of the connection manager
// itself, before the filter chain exists (ActiveStream::decodeHeaders
// replies before createFilterChain and refreshCachedRoute): no filter
// sees it and no route adds headers to it; local_reply_config applies.
func (s *stream) replyBeforeFilters(lr *localReply) {
	s.routeCached = true // no route was computed: the reply has none
	s.countLocalReply(lr)
	h, text := s.localReplyHeaders(lr)
	_, _ = s.writeResponse(h, &responseBody{buf: []byte(text), buffered: true, has: text != ""}, nil)
}
