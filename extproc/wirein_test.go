package extproc

import (
	"fmt"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// wireRequestCases are ext_proc requests, as bytes, that decodeRequest
// decodes itself (fast) or leaves to proto.Unmarshal.
func wireRequestCases(t testing.TB) []struct {
	name string
	wire []byte
	fast bool
} {
	t.Helper()
	hdrs := func(kv ...string) *corev3.HeaderMap {
		m := &corev3.HeaderMap{}
		for i := 0; i+1 < len(kv); i += 2 {
			m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
		}
		return m
	}
	marshal := func(m *extprocv3.ProcessingRequest) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	lbStruct, err := structpb.NewStruct(map[string]any{"x-gateway-destination-endpoint-served": "10.0.0.7:8000", "n": 2.5, "ok": true})
	if err != nil {
		t.Fatal(err)
	}
	var manyHeaders []string
	for i := range maxNotedHeaders + 8 {
		manyHeaders = append(manyHeaders, fmt.Sprintf("x-h%d", i), strings.Repeat("v", 60*i))
	}
	reqHeaders := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs(
			":authority", "api.example.com", ":path", "/v1/chat/completions", ":method", "POST",
			"content-type", "application/json", "x-request-id", "req-1", "accept", "",
		)}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: extprocfilterv3.ProcessingMode_BUFFERED},
	}
	body := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
		Body: []byte(`{"model":"m","messages":[]}`), EndOfStream: true,
	}}}
	tag := protowire.AppendTag
	lenField := func(b []byte, num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(tag(b, num, protowire.BytesType), v)
	}
	header := func(fields ...[]byte) []byte { // a request whose headers hold one HeaderValue of fields
		var hv []byte
		for _, f := range fields {
			hv = append(hv, f...)
		}
		return lenField(nil, fieldReqRequestHeaders, lenField(nil, fieldHeadersMap, lenField(nil, fieldMapHeaders, hv)))
	}
	return []struct {
		name string
		wire []byte
		fast bool
	}{
		{"request headers with protocol config", marshal(reqHeaders), true},
		{"request body", marshal(body), true},
		{"empty message", nil, true},
		{"response headers, end of stream", marshal(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
			ResponseHeaders: &extprocv3.HttpHeaders{Headers: hdrs(":status", "200", "x-ilb-served-cluster", "c"), EndOfStream: true},
		}}), true},
		{"headers by value, empty key and values", marshal(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				{Key: "a", Value: "b"}, {}, {Key: "c", Value: "d", RawValue: []byte("e")}, {Key: "é", Value: "ü"},
			}}},
		}}), true},
		{"more headers than noted on the stack, long values", marshal(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs(manyHeaders...)},
		}}), true},
		{"empty headers and header map", marshal(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{}},
		}}), true},
		{"empty request headers", marshal(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{},
		}}), true},
		{"response body, every flag", marshal(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: []byte("data: {}\n\n"), EndOfStream: true, EndOfStreamWithoutMessage: true, GrpcMessageCompressed: true},
		}}), true},
		{"empty body", marshal(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{}}}), true},
		{"observability mode and full protocol config", marshal(&extprocv3.ProcessingRequest{
			ObservabilityMode: true, Request: body.Request,
			ProtocolConfig: &extprocv3.ProtocolConfiguration{
				RequestBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseBodyMode: extprocfilterv3.ProcessingMode_STREAMED,
				SendBodyWithoutWaitingForHeaderResponse: true,
			},
		}), true},
		{"explicit false mode, empty protocol config", protowire.AppendVarint(tag(
			protowire.AppendVarint(tag(marshal(body), fieldReqObservabilityMode, protowire.VarintType), 0),
			fieldReqProtocolConfig, protowire.BytesType), 0), true},
		{"bool varint 2", protowire.AppendVarint(tag(nil, fieldReqObservabilityMode, protowire.VarintType), 2), true},

		{"empty metadata context (Envoy's, every message)", marshal(&extprocv3.ProcessingRequest{
			Request: reqHeaders.Request, MetadataContext: &corev3.Metadata{}, ProtocolConfig: reqHeaders.ProtocolConfig,
		}), true},
		{"metadata context of the replica picked", marshal(&extprocv3.ProcessingRequest{
			Request:         &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hdrs(":status", "200")}},
			MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.lb": lbStruct}},
		}), true},
		{"metadata context twice (merged)", append(marshal(&extprocv3.ProcessingRequest{MetadataContext: &corev3.Metadata{}}),
			marshal(&extprocv3.ProcessingRequest{MetadataContext: &corev3.Metadata{}})...), false},
		{"malformed metadata context", lenField(nil, fieldReqMetadataContext, []byte{0x0a, 0x05}), false},
		{"request trailers", marshal(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
			RequestTrailers: &extprocv3.HttpTrailers{Trailers: hdrs("grpc-status", "0")},
		}}), false},
		{"attributes", marshal(&extprocv3.ProcessingRequest{
			Request:    reqHeaders.Request,
			Attributes: map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {}},
		}), false},
		{"header attributes", marshal(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{Attributes: map[string]*structpb.Struct{"a": {}}}, //nolint:staticcheck // deprecated, but Envoy may send it
		}}), false},
		{"unknown field", protowire.AppendVarint(tag(marshal(body), 99, protowire.VarintType), 1), false},
		{"request headers twice (merged)", append(marshal(reqHeaders), marshal(reqHeaders)...), false},
		{"two members of the oneof (replaced)", append(marshal(reqHeaders), marshal(body)...), false},
		{"body twice", append(marshal(body), marshal(body)[2:]...), false},
		{"protocol config twice", append(marshal(reqHeaders), lenField(nil, fieldReqProtocolConfig, nil)...), false},
		{"invalid UTF-8 key", header(lenField(nil, fieldHeaderKey, []byte{0xff})), false},
		{"invalid UTF-8 value", header(lenField(nil, fieldHeaderValue, []byte{0xc3})), false},
		{"raw value not UTF-8", header(lenField(nil, fieldHeaderRawValue, []byte{0xff})), true},
		{"header field 16 (two-byte tag)", header(protowire.AppendVarint(tag(nil, 16, protowire.VarintType), 1)), false},
		{"unknown header field", header(protowire.AppendVarint(tag(nil, 4, protowire.VarintType), 1)), false},
		{"header key twice", header(lenField(nil, fieldHeaderKey, []byte("a")), lenField(nil, fieldHeaderKey, []byte("b"))), false},
		{"header key as varint", header(protowire.AppendVarint(tag(nil, fieldHeaderKey, protowire.VarintType), 1)), false},
		{"request headers as varint", protowire.AppendVarint(tag(nil, fieldReqRequestHeaders, protowire.VarintType), 1), false},
		{"observability mode as bytes", lenField(nil, fieldReqObservabilityMode, []byte{1}), false},
		{"end of stream as bytes", lenField(nil, fieldReqRequestBody, lenField(nil, fieldBodyEndOfStream, nil)), false},
		{"body as varint", lenField(nil, fieldReqRequestBody, protowire.AppendVarint(tag(nil, fieldBodyBody, protowire.VarintType), 1)), false},
		{"unknown body field", lenField(nil, fieldReqRequestBody, protowire.AppendVarint(tag(nil, 9, protowire.VarintType), 1)), false},
		{"unknown protocol config field", lenField(nil, fieldReqProtocolConfig, protowire.AppendVarint(tag(nil, 4, protowire.VarintType), 1)), false},
		{"header map with another field", lenField(nil, fieldReqRequestHeaders, lenField(nil, fieldHeadersMap, protowire.AppendVarint(tag(nil, 2, protowire.VarintType), 1))), false},
		{"truncated", marshal(reqHeaders)[:40], false},
		{"truncated varint", []byte{byte(fieldReqObservabilityMode<<3 | protowire.VarintType), 0x80}, false},
		{"field number 0", []byte{0x00, 0x01}, false},
		{"huge field number", protowire.AppendVarint(tag(nil, 1<<20, protowire.VarintType), 1), false},
	}
}

// TestDecodeRequest: what decodeRequest decodes is what proto.Unmarshal
// decodes (proto.Equal), owns its memory, and its byte slices are capped;
// what it leaves to proto.Unmarshal leaves the message untouched, and
// the codec then answers as gRPC's proto codec, whether the message
// comes in one buffer or in several.
func TestDecodeRequest(t *testing.T) {
	codec := newWireCodec()
	for _, tc := range wireRequestCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			want := new(extprocv3.ProcessingRequest)
			wantErr := proto.Unmarshal(tc.wire, want)
			wire := append([]byte(nil), tc.wire...)
			got := &extprocv3.ProcessingRequest{ObservabilityMode: true} // untouched unless decoded
			if fast := decodeRequest(wire, got); fast != tc.fast {
				t.Fatalf("decodeRequest = %v; want %v", fast, tc.fast)
			}
			if tc.fast {
				if wantErr != nil {
					t.Fatalf("decoded what proto.Unmarshal refuses: %v", wantErr)
				}
				clear(wire) // nothing decoded may share the input
				if !proto.Equal(got, want) {
					t.Fatalf("decoded %v; proto.Unmarshal %v", got, want)
				}
				if hs := append(got.GetRequestHeaders().GetHeaders().GetHeaders(), got.GetResponseHeaders().GetHeaders().GetHeaders()...); len(hs) > 1 {
					before := string(hs[1].GetRawValue())
					hs[0].RawValue = append(hs[0].RawValue, "overflow"...)
					if string(hs[1].GetRawValue()) != before {
						t.Fatal("appending to a raw value wrote over the next one")
					}
				}
			} else if !proto.Equal(got, &extprocv3.ProcessingRequest{ObservabilityMode: true}) {
				t.Fatalf("decodeRequest refused, but changed the message: %v", got)
			}
			for _, split := range []int{0, 1, len(tc.wire) / 2} {
				data := mem.BufferSlice{mem.SliceBuffer(tc.wire)}
				if split > 0 && split < len(tc.wire) {
					data = mem.BufferSlice{mem.SliceBuffer(tc.wire[:split]), mem.SliceBuffer(tc.wire[split:])}
				}
				got := new(extprocv3.ProcessingRequest)
				err := codec.Unmarshal(data, got)
				if (err != nil) != (wantErr != nil) || err == nil && !proto.Equal(got, want) {
					t.Errorf("codec (split at %d) = %v, %v; proto.Unmarshal %v, %v", split, got, err, want, wantErr)
				}
			}
		})
	}
}

// TestDecodeRequestDepth: a metadata context nested as deep as protobuf
// allows inside a request is decoded, one level deeper it is refused, as
// proto.Unmarshal does with the whole request.
func TestDecodeRequestDepth(t *testing.T) {
	nested := func(n int) []byte { // metadata context → struct → value → struct ... n structs deep
		v := structpb.NewNullValue()
		for range n - 1 {
			v = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"a": v}})
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&extprocv3.ProcessingRequest{MetadataContext: &corev3.Metadata{
			FilterMetadata: map[string]*structpb.Struct{"ns": {Fields: map[string]*structpb.Value{"a": v}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ok := func(n int) bool { return proto.Unmarshal(nested(n), new(extprocv3.ProcessingRequest)) == nil }
	lo, hi := 1, 8192 // proto.Unmarshal takes lo levels, refuses hi
	if !ok(lo) || ok(hi) {
		t.Fatalf("proto.Unmarshal: %d levels %v, %d levels %v", lo, ok(lo), hi, ok(hi))
	}
	for hi-lo > 1 {
		if mid := (lo + hi) / 2; ok(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	for _, n := range []int{lo - 1, lo, hi, hi + 1} {
		if got, want := decodeRequest(nested(n), new(extprocv3.ProcessingRequest)), ok(n); got != want {
			t.Errorf("%d levels: decodeRequest %v, proto.Unmarshal %v", n, got, want)
		}
	}
}

// FuzzDecodeRequest: whatever decodeRequest decodes, proto.Unmarshal
// decodes to an equal message; whatever it refuses, it leaves untouched.
//
//	go test -run '^$' -fuzz FuzzDecodeRequest -fuzztime 1m ./extproc/
func FuzzDecodeRequest(f *testing.F) {
	for _, tc := range wireRequestCases(f) {
		f.Add(tc.wire)
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		got := &extprocv3.ProcessingRequest{ObservabilityMode: true}
		if !decodeRequest(wire, got) {
			if !proto.Equal(got, &extprocv3.ProcessingRequest{ObservabilityMode: true}) {
				t.Fatalf("decodeRequest refused %x, but changed the message: %v", wire, got)
			}
			return
		}
		want := new(extprocv3.ProcessingRequest)
		if err := proto.Unmarshal(wire, want); err != nil {
			t.Fatalf("decodeRequest decoded %x, which proto.Unmarshal refuses: %v", wire, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("%x: decoded %v; proto.Unmarshal %v", wire, got, want)
		}
	})
}
