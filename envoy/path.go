package envoy

import (
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ilbproject/ilb/header"
)

// NormalizePaths sets on h how Envoy normalises a request's :path before
// any filter, the route table or the engine sees it
// (ConnectionManagerUtility::maybeNormalizePath), so that ILB's ext_proc
// classifies the very path the engine routes on (issue 24: model
// smuggling through the path). ILB's own listener (package xds) and the
// HTTP connection manager its Istio EnvoyFilter merges into istiod's
// (package istio) both call it.
//
// Envoy applies, in this order:
//   - path_with_escaped_slashes_action UNESCAPE_AND_FORWARD: %2F and %5C
//     (either case) in the path are decoded to '/' and '\' and the
//     request goes on: GET /v1/models/org%2Fmodel becomes
//     /v1/models/org/model for Envoy, ILB and the engine alike, which is
//     what engines that decode the path before routing (uvicorn: vLLM,
//     SGLang) read anyway. REJECT_REQUEST would refuse such a model id,
//     UNESCAPE_AND_REDIRECT would answer it 307 (and gRPC 400);
//   - normalize_path: RFC 3986 normalisation: escapes of unreserved
//     characters decoded (/v1/chat/completion%73 is
//     /v1/chat/completions), '\' read as '/', "." and ".." segments
//     resolved (also spelled %2e, and after the slashes above were
//     decoded: /v1/..%2fmetrics is /metrics); a NUL is answered 400;
//   - merge_slashes: "//" merged (/v1//chat/completions).
//
// Envoy answers a :path holding '#' 400 whatever these settings. What
// Envoy leaves alone, ILB still refuses (400 ambiguous_path): a path
// parameter (';'), and any escape that changes the endpoint ILB reads.
// The query is never touched.
func NormalizePaths(h *hcmv3.HttpConnectionManager) {
	h.NormalizePath = wrapperspb.Bool(true)
	h.MergeSlashes = true
	h.PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD
}

// checkPathNormalization warns when h runs ILB's ext_proc filter (the one
// with x-ilb-source in its gRPC initial metadata) without the path
// settings of [NormalizePaths]: ILB then refuses (400 ambiguous_path)
// requests Envoy would have made plain, and Envoy's route table matches
// another path than the engine reads.
func (k *checker) checkPathNormalization(where string, h *hcmv3.HttpConnectionManager) {
	if !runsILB(h) {
		return
	}
	want := &hcmv3.HttpConnectionManager{}
	NormalizePaths(want)
	if h.GetNormalizePath().GetValue() == want.GetNormalizePath().GetValue() && h.GetMergeSlashes() == want.GetMergeSlashes() &&
		h.GetPathWithEscapedSlashesAction() == want.GetPathWithEscapedSlashesAction() {
		return
	}
	k.warnf(where, "normalize_path %v, merge_slashes %v, path_with_escaped_slashes_action %s: ILB's listener has %v, %v, %s; without them ILB answers 400 ambiguous_path to paths Envoy would make plain (/v1/chat/completion%%73, /v1//chat/completions)",
		h.GetNormalizePath().GetValue(), h.GetMergeSlashes(), h.GetPathWithEscapedSlashesAction(),
		want.GetNormalizePath().GetValue(), want.GetMergeSlashes(), want.GetPathWithEscapedSlashesAction())
}

// runsILB tells whether one of h's HTTP filters is ILB's ext_proc.
func runsILB(h *hcmv3.HttpConnectionManager) bool {
	for _, f := range h.GetHttpFilters() {
		var ep extprocv3.ExternalProcessor
		if f.GetTypedConfig().UnmarshalTo(&ep) != nil {
			continue
		}
		for _, m := range ep.GetGrpcService().GetInitialMetadata() {
			if strings.EqualFold(m.GetKey(), header.Source) {
				return true
			}
		}
	}
	return false
}
