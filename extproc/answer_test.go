package extproc

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ilbproject/ilb/header"
)

// TestPickHeadersMatchesHeaderMap: pickHeaders reads each header as the
// map headerMap builds has it: raw_value, else value; keys matched after
// strings.ToLower (Unicode included: U+212A KELVIN SIGN is k); repeated
// headers joined with "," in order, empty values included.
func TestPickHeadersMatchesHeaderMap(t *testing.T) {
	hv := func(k, raw, v string) *corev3.HeaderValue {
		return &corev3.HeaderValue{Key: k, RawValue: []byte(raw), Value: v}
	}
	for _, tc := range []struct {
		name    string
		headers []*corev3.HeaderValue
	}{
		{"none", nil},
		{"raw values", []*corev3.HeaderValue{hv(":path", "/v1/chat/completions", ""), hv("x-request-id", "r1", "")}},
		{"value when raw is empty", []*corev3.HeaderValue{hv(":status", "", "200"), hv("x-ilb-model", "", "")}},
		{"raw wins over value", []*corev3.HeaderValue{hv(":method", "POST", "GET")}},
		{"upper case keys", []*corev3.HeaderValue{hv("X-Request-ID", "r2", ""), hv("Content-Length", "12", "")}},
		{"unicode folding", []*corev3.HeaderValue{hv("x-ilb-\u212Aey", "k", ""), hv("X-ILB-SESSION", "s", ""), hv("x-ilb-sess\u0130on", "no", "")}},
		{"repeated, joined in order", []*corev3.HeaderValue{
			hv("x-ilb-session", "a", ""), hv("X-ILB-Session", "", ""), hv("x-ilb-session", "", "c"), hv(":path", "/p", ""),
		}},
		{"other headers ignored", []*corev3.HeaderValue{hv("authorization", "Bearer x", ""), hv("x-ilb-debug", "1", "")}},
		{"values past pickedBytes", []*corev3.HeaderValue{
			hv(":path", "/v1/"+strings.Repeat("p", pickedBytes), ""), hv("x-request-id", "r3", ""), hv(":method", "", "POST"),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &corev3.HeaderMap{Headers: tc.headers}
			want := headerMap(m)
			for _, keys := range [][]string{requestHeaders[:], responseHeaders[:], {"x-ilb-key", "x-ilb-session"}} {
				got := make([]string, len(keys))
				pickHeaders(m, keys, got)
				for i, k := range keys {
					if got[i] != want[k] {
						t.Errorf("%s = %q; headerMap has %q", k, got[i], want[k])
					}
				}
			}
		})
	}
}

// TestSteeredReasonsMatchFmt: the steering explanation is the text
// fmt.Sprintf made of it, for ordinary and odd values.
func TestSteeredReasonsMatchFmt(t *testing.T) {
	for _, v := range []float64{0, 0.004, 0.005, 0.125, 0.5, 0.994999, 0.995, 1, 2.5, 1234.5678, 1e21, -0.001, math.Inf(1), math.Inf(-1), math.NaN()} {
		want := fmt.Sprintf("%s has %.2f queued requests per running one, others less: moved (probability 1 − %.2f) among %d clusters with less, slot %d",
			"a", v, v, -2, uint64(1<<63+5))
		if got := string(steeredByPressure([]byte{}, "a", v, v, -2, 1<<63+5)); got != want {
			t.Errorf("steeredByPressure(%v) = %q; fmt says %q", v, got, want)
		}
	}
}

// TestEndpointMetadataWire: the dynamic metadata a decision's answer
// carries as wire bytes is, byte for byte, what protobuf writes for the
// Struct envoy.lb / x-gateway-destination-endpoint, and the answers
// carrying it (request headers', body's) decode to their header mutation
// plus that metadata.
func TestEndpointMetadataWire(t *testing.T) {
	for _, tc := range []struct{ name, endpoint string }{
		{"one host", "10.0.0.1:8000"},
		{"a fallback list", "10.0.0.1:8000,10.0.0.2:8000"},
		{"IPv6", "[fd00::1]:8000"},
		{"long (two-byte lengths)", strings.Repeat("10.0.0.1:8000,", 20) + "10.0.0.9:8000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			meta := &structpb.Struct{Fields: map[string]*structpb.Value{
				header.LBNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
					header.DestinationEndpoint: structpb.NewStringValue(tc.endpoint),
				}}),
			}}
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(&extprocv3.ProcessingResponse{DynamicMetadata: meta})
			if err != nil {
				t.Fatal(err)
			}
			set := func(key, value string) *corev3.HeaderValueOption {
				return &corev3.HeaderValueOption{
					Header:       &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
					AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
				}
			}
			mut := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				set(header.RouteModel, "m"), set(header.RouteDraw, "7"), set(header.RouteCluster, "c"), set(header.DestinationEndpoint, tc.endpoint),
			}}
			common := &extprocv3.CommonResponse{HeaderMutation: mut, ClearRouteCache: true}
			for _, side := range []struct {
				name   string
				answer func(*verdict, *extprocv3.HeaderMutation) *extprocv3.ProcessingResponse
				want   *extprocv3.ProcessingResponse
			}{
				{
					"headers", func(v *verdict, m *extprocv3.HeaderMutation) *extprocv3.ProcessingResponse {
						return v.headersResponse(m, true)
					},
					&extprocv3.ProcessingResponse{
						Response:        &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: common}},
						DynamicMetadata: meta,
					},
				},
				{
					"body", func(v *verdict, m *extprocv3.HeaderMutation) *extprocv3.ProcessingResponse {
						return v.bodyResponse(m, true)
					},
					&extprocv3.ProcessingResponse{
						Response:        &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: common}},
						DynamicMetadata: meta,
					},
				},
			} {
				var v verdict
				v.setHosts(strings.Split(tc.endpoint, ","))
				if !bytes.Equal(v.meta, want) {
					t.Errorf("the metadata = %x\nwant %x", v.meta, want)
				}
				if string(v.endpoint) != tc.endpoint {
					t.Errorf("the endpoint = %q; want %q", v.endpoint, tc.endpoint)
				}
				m := v.mutation(sharedHeader(header.RouteModel, "m"), 7, sharedHeader(header.RouteCluster, "c"))
				wire, err := proto.Marshal(side.answer(&v, m))
				if err != nil {
					t.Fatal(err)
				}
				var got extprocv3.ProcessingResponse
				if err := proto.Unmarshal(wire, &got); err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(&got, side.want) {
					t.Errorf("the %s answer decodes to %v\nwant %v", side.name, &got, side.want)
				}
			}
		})
	}
}

// TestVerdictWithoutHosts: without an override-host list a decision's
// answer carries the route headers alone and no metadata; without a
// mutation it is the shared answer that changes nothing.
func TestVerdictWithoutHosts(t *testing.T) {
	var v verdict
	resp := v.bodyResponse(v.mutation(sharedHeader(header.RouteModel, "m"), 42, sharedHeader(header.RouteCluster, "c")), false)
	wire, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var got extprocv3.ProcessingResponse
	if err := proto.Unmarshal(wire, &got); err != nil {
		t.Fatal(err)
	}
	hs := got.GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders()
	if len(hs) != 3 || string(hs[1].GetHeader().GetRawValue()) != "42" || got.GetDynamicMetadata() != nil || got.GetRequestBody().GetResponse().GetClearRouteCache() {
		t.Errorf("the answer decodes to %v; want the model, draw 42 and cluster headers, no metadata, no re-match", &got)
	}
	if v.headersResponse(nil, true) != continueHeaders || v.bodyResponse(nil, true) != continueBody {
		t.Error("without a mutation the answers are not the shared ones")
	}
}
