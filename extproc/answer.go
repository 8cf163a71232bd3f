package extproc

import (
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// decisionHeader is the compact x-ilb-decision value (debug only).
func decisionHeader(r *Record) string {
	v := fmt.Sprintf("request_id=%s; model=%s; cluster=%s; reason=%s; draw=%d; slot=%d/%d; version=%s",
		r.RequestID, r.Model, r.Chosen, r.Reason, r.Draw, r.Slot, r.TotalWeight, r.WeightsVersion)
	if r.TraceID != "" {
		v += "; trace_id=" + r.TraceID
	}
	return v
}

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

// headersResponse continues the request, applying mut. rematch asks Envoy to
// re-match the route, which Envoy does only because mut is present.
func headersResponse(mut *extprocv3.HeaderMutation, rematch bool) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: mut, ClearRouteCache: rematch && mut != nil}},
	}}
}

// bodyResponse answers a request body, applying mut and re-matching the
// route when mut is set.
func bodyResponse(mut *extprocv3.HeaderMutation) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{HeaderMutation: mut, ClearRouteCache: mut != nil}},
	}}
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
