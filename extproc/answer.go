package extproc

import (
	"fmt"
	"slices"
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
// header is "". The values share one string (one allocation for all of
// them when their bytes fit pickedBytes): a message's values are read
// together and kept, when kept, as long as each other.
func pickHeaders(m *corev3.HeaderMap, keys []string, out []string) {
	hs := m.GetHeaders()
	lens := keyLengths(keys)
	var seen uint16
	var at [16]int // the index in hs of key i's value
	for j, h := range hs {
		i := keyIndex(h.GetKey(), keys, lens)
		if i < 0 {
			continue
		}
		if seen&(1<<i) != 0 { // repeated: joined
			pickJoined(hs, keys, out)
			return
		}
		seen, at[i] = seen|1<<i, j
	}
	var buf [pickedBytes]byte
	all := buf[:0]
	for i := range keys {
		if seen&(1<<i) != 0 {
			all = appendValue(all, hs[at[i]])
		}
	}
	values := string(all)
	for i := range keys {
		out[i] = ""
		if seen&(1<<i) != 0 {
			n := valueLen(hs[at[i]])
			out[i], values = values[:n], values[n:]
		}
	}
}

// pickedBytes is how many bytes of the values pickHeaders reads it
// gathers on the stack before their one string: request ids, paths and
// the response's names fit.
const pickedBytes = 256

// keyLengths is the set of the lengths of keys, as a bit mask (bit 63:
// 63 bytes or more).
func keyLengths(keys []string) uint64 {
	var lens uint64
	for _, k := range keys {
		lens |= 1 << min(len(k), 63)
	}
	return lens
}

// keyIndex is the index of h's key in keys, -1 when absent; lens is
// keyLengths(keys), which rules most other keys out by their length
// alone (lower case ASCII keys: strings.ToLower keeps their length).
func keyIndex(k string, keys []string, lens uint64) int {
	switch {
	case !isLowerASCII(k):
		k = strings.ToLower(k)
	case lens&(1<<min(len(k), 63)) == 0:
		return -1
	}
	for i, want := range keys {
		if k == want {
			return i
		}
	}
	return -1
}

// appendValue appends h's value as headerMap reads it: raw_value, or
// value when raw_value is empty.
func appendValue(b []byte, h *corev3.HeaderValue) []byte {
	if raw := h.GetRawValue(); len(raw) > 0 {
		return append(b, raw...)
	}
	return append(b, h.GetValue()...)
}

// valueLen is the length of what appendValue appends.
func valueLen(h *corev3.HeaderValue) int {
	if n := len(h.GetRawValue()); n > 0 {
		return n
	}
	return len(h.GetValue())
}

// pickJoined is pickHeaders for a map that repeats a key: each value
// converted apart, repeated ones joined with ",".
func pickJoined(hs []*corev3.HeaderValue, keys []string, out []string) {
	lens := keyLengths(keys)
	var seen uint16
	for _, h := range hs {
		i := keyIndex(h.GetKey(), keys, lens)
		if i < 0 {
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
	}
	for i := range keys {
		if seen&(1<<i) == 0 {
			out[i] = ""
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

// sharedHeader is an option setting key to value (raw_value) that
// decisions share: it must never be changed.
func sharedHeader(key string, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
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
