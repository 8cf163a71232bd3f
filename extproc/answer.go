package extproc

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/header"
)

// decisionHeader is the compact x-ilb-decision value (debug only).
func decisionHeader(r *decision.Record) string {
	v := fmt.Sprintf("request_id=%s; model=%s; cluster=%s; reason=%s; draw=%d; slot=%d/%d; version=%s",
		r.RequestID, r.Model, r.Chosen, r.Reason, r.Draw, r.Slot, r.TotalWeight, r.WeightsVersion)
	if rd := r.Replica; rd != nil && rd.Chosen != "" {
		v += fmt.Sprintf("; replica=%s; replica_reason=%s; cached_tokens=%d; cost=%.0f", rd.Chosen, rd.Reason, rd.Terms.Cached, rd.Terms.Cost)
		if rd.RunnerUp != nil {
			v += fmt.Sprintf("; runner_up=%s; runner_up_cost=%.0f", rd.RunnerUp.Address, rd.RunnerUp.Cost)
		}
	}
	if r.TraceID != "" {
		v += "; trace_id=" + r.TraceID
	}
	return v
}

// reportHeaders are the response headers ILB removes unless the client
// may see them: one slice shared by every answer, never changed (its
// capacity is its length, so an append copies).
var reportHeaders = slices.Clip(header.Report())

// headerMap flattens Envoy's header map; Envoy sends values in raw_value
// (value on older versions). Repeated headers are joined with ",".
func headerMap(m *corev3.HeaderMap) map[string]string {
	out := make(map[string]string, len(m.GetHeaders()))
	for _, h := range m.GetHeaders() {
		v := string(h.GetRawValue())
		if v == "" {
			v = h.GetValue()
		}
		k := strings.ToLower(h.GetKey())
		if prev, ok := out[k]; ok {
			v = prev + "," + v
		}
		out[k] = v
	}
	return out
}

// pickHeaders reads the values of keys (lower case, at most 16) from
// Envoy's header map into out (len(out) >= len(keys)) as headerMap would
// give them, without building the map or converting the values of other
// headers: a key matches case-insensitively, the value is raw_value (value
// when empty), and repeated headers are joined with ",". An absent
// header is "".
func pickHeaders(m *corev3.HeaderMap, keys []string, out []string) {
	var seen uint16
	for _, h := range m.GetHeaders() {
		k := h.GetKey()
		if !isLowerASCII(k) {
			k = strings.ToLower(k)
		}
		for i, want := range keys {
			if k != want {
				continue
			}
			v := string(h.GetRawValue())
			if v == "" {
				v = h.GetValue()
			}
			if seen&(1<<i) != 0 {
				v = out[i] + "," + v
			}
			out[i], seen = v, seen|1<<i
			break
		}
	}
}

// isLowerASCII reports whether strings.ToLower would return s unchanged
// because it is ASCII without upper case letters.
func isLowerASCII(s string) bool {
	for i := range len(s) {
		if c := s[i]; c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}

// headersResponse continues the request, applying mut. rematch asks Envoy to
// re-match the route, which Envoy does only because mut is present.
// Without mut the answer is shared: it must not be changed.
func headersResponse(mut *extprocv3.HeaderMutation, rematch bool) *extprocv3.ProcessingResponse {
	if mut == nil {
		return continueHeaders
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: mut, ClearRouteCache: rematch}},
	}}
}

// bodyResponse answers a request body, applying mut and re-matching the
// route when mut is set and rematch. Without mut the answer is shared: it
// must not be changed.
func bodyResponse(mut *extprocv3.HeaderMutation, rematch bool) *extprocv3.ProcessingResponse {
	if mut == nil {
		return continueBody
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{HeaderMutation: mut, ClearRouteCache: rematch}},
	}}
}

// The answers that change nothing, or only strip the report headers, are
// the same for every request: one message each, shared by every stream
// and never changed (gRPC only reads the messages it sends, and
// protobuf's marshalling may share a message between goroutines).
var (
	continueHeaders = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}},
	}}
	continueBody = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}},
	}}
	continueResponseBody = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{},
	}}
	continueRequestTrailers = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
		RequestTrailers: &extprocv3.TrailersResponse{},
	}}
	continueResponseTrailers = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extprocv3.TrailersResponse{},
	}}
	// stripReport answers the response headers: the report headers go.
	stripReport = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: reportHeaders},
		}},
	}}
	// stripReportFollow is stripReport asking for the response body
	// (follow.go).
	stripReportFollow = &extprocv3.ProcessingResponse{Response: stripReport.Response, ModeOverride: followMode}
)

// routeMutation is the header mutation of a decision: the model, the draw
// and the cluster, and the override-host list when ILB picked a replica,
// values as raw_value; model and cluster are shared bytes (never
// changed). Its messages are allocated together, as many as it sets.
func routeMutation(model []byte, draw uint64, cluster []byte, endpoint string) *extprocv3.HeaderMutation {
	kvs := [4]headerKV{{header.RouteModel, model}, {header.RouteDraw, strconv.AppendUint(nil, draw, 10)}, {header.RouteCluster, cluster}}
	if endpoint == "" {
		m := new(mutation3)
		return setHeaders(&m.mut, m.opts[:], m.vals[:], m.ptrs[:], kvs[:3])
	}
	kvs[3] = headerKV{header.DestinationEndpoint, []byte(endpoint)}
	m := new(mutation4)
	return setHeaders(&m.mut, m.opts[:], m.vals[:], m.ptrs[:], kvs[:])
}

type headerKV struct {
	key   string
	value []byte
}

// mutation3 and mutation4 are a header mutation with its 3 or 4 options,
// values and pointers, in one allocation.
type (
	mutation3 struct {
		mut  extprocv3.HeaderMutation
		opts [3]corev3.HeaderValueOption
		vals [3]corev3.HeaderValue
		ptrs [3]*corev3.HeaderValueOption
	}
	mutation4 struct {
		mut  extprocv3.HeaderMutation
		opts [4]corev3.HeaderValueOption
		vals [4]corev3.HeaderValue
		ptrs [4]*corev3.HeaderValueOption
	}
)

// setHeaders sets kvs in mut, in opts, vals and ptrs (as long as kvs).
func setHeaders(mut *extprocv3.HeaderMutation, opts []corev3.HeaderValueOption, vals []corev3.HeaderValue, ptrs []*corev3.HeaderValueOption, kvs []headerKV) *extprocv3.HeaderMutation {
	for i, kv := range kvs {
		vals[i].Key, vals[i].RawValue = kv.key, kv.value
		opts[i].Header, opts[i].AppendAction = &vals[i], corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		ptrs[i] = &opts[i]
	}
	mut.SetHeaders = ptrs
	return mut
}

// skipBody is the mode override of the header-only fast path: Envoy sends
// no request body; response headers still come. Every field is explicit,
// as older Envoys replace the whole mode.
func skipBody() *extprocfilterv3.ProcessingMode {
	return &extprocfilterv3.ProcessingMode{
		RequestHeaderMode:   extprocfilterv3.ProcessingMode_SEND,
		ResponseHeaderMode:  extprocfilterv3.ProcessingMode_SEND,
		RequestBodyMode:     extprocfilterv3.ProcessingMode_NONE,
		ResponseBodyMode:    extprocfilterv3.ProcessingMode_NONE,
		RequestTrailerMode:  extprocfilterv3.ProcessingMode_SKIP,
		ResponseTrailerMode: extprocfilterv3.ProcessingMode_SKIP,
	}
}
