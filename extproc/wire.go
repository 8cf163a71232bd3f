package extproc

import (
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// encoded is an answer with its wire bytes, exactly what proto.Marshal
// writes for it, encoded by ILB: the shared answers once, a decision's
// as it is sent (verdict.encoded). On a server built with GRPCOptions,
// wireCodec sends the bytes as they are; any other codec marshals the
// embedded message (encoded is a proto.Message through it), to the same
// bytes. Generic marshalling sized and wrote a decision's answer message
// by message (two passes over a dozen messages, through protobuf's
// reflection-driven coders), and the shared answers every time they were
// sent.
type encoded struct {
	*extprocv3.ProcessingResponse
	wire []byte
}

// wireCodec is gRPC's proto codec, except for encoded answers, whose
// bytes it sends without marshalling them again.
type wireCodec struct{ proto encoding.CodecV2 }

var _ encoding.CodecV2 = wireCodec{}

// newWireCodec wraps gRPC's registered proto codec; nil when there is
// none (then the server keeps its default).
func newWireCodec() encoding.CodecV2 {
	c := encoding.GetCodecV2(grpcproto.Name)
	if c == nil {
		return nil
	}
	return wireCodec{proto: c}
}

func (c wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(*encoded); ok && e.wire != nil {
		return mem.BufferSlice{mem.SliceBuffer(e.wire)}, nil
	}
	out, err := c.proto.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("extproc: %w", err)
	}
	return out, nil
}

// Unmarshal decodes an ext_proc request with decodeRequest where it can
// (the messages Envoy sends on the request path), else, and any other
// message, as gRPC's proto codec does; the message is the same.
func (c wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(*extprocv3.ProcessingRequest); ok {
		var done bool
		if len(data) == 1 { // one buffer: read in place (decodeRequest copies what it keeps)
			done = decodeRequest(data[0].ReadOnlyData(), m)
		} else {
			buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
			done = decodeRequest(buf.ReadOnlyData(), m)
			buf.Free()
		}
		if done {
			return nil
		}
	}
	if err := c.proto.Unmarshal(data, v); err != nil {
		return fmt.Errorf("extproc: %w", err)
	}
	return nil
}

func (wireCodec) Name() string { return grpcproto.Name }

// sharedWire are the shared answers, encoded once (an answer whose
// encoding failed is left out: it is marshalled as it is sent).
var sharedWire = preEncode(continueHeaders, continueBody, continueResponseBody, continueRequestTrailers,
	continueResponseTrailers, stripReport, stripReportFollow)

// preEncode encodes each of msgs.
func preEncode(msgs ...*extprocv3.ProcessingResponse) []encoded {
	out := make([]encoded, 0, len(msgs))
	for _, m := range msgs {
		if b, err := proto.Marshal(m); err == nil {
			out = append(out, encoded{ProcessingResponse: m, wire: b})
		}
	}
	return out
}

// wired is r with its wire bytes when ILB has them — a shared answer, or
// x's decision answer — else nil.
func wired(x *exchange, r *extprocv3.ProcessingResponse) *encoded {
	if v := x.answer; v != nil && r == &v.resp {
		return v.encoded()
	}
	for i := range sharedWire {
		if sharedWire[i].ProcessingResponse == r {
			return &sharedWire[i]
		}
	}
	return nil
}

// Field numbers of a decision's answer (verdict.encoded).
const (
	fieldRequestHeaders  = 1 // ProcessingResponse.request_headers
	fieldRequestBody     = 3 // ProcessingResponse.request_body
	fieldCommonResponse  = 1 // HeadersResponse.response, BodyResponse.response
	fieldHeaderMutation  = 2 // CommonResponse.header_mutation
	fieldClearRouteCache = 5 // CommonResponse.clear_route_cache
	fieldSetHeaders      = 1 // HeaderMutation.set_headers
	fieldHeader          = 1 // HeaderValueOption.header
	fieldAppendAction    = 3 // HeaderValueOption.append_action
	fieldHeaderKey       = 1 // HeaderValue.key
	fieldHeaderRawValue  = 3 // HeaderValue.raw_value
)

// encoded is v's response with its wire bytes, encoded once, as
// proto.Marshal would write it (TestVerdictWire); nil when the response
// holds what this encoding does not write (a mode override, an option
// with more than a key, a raw value and an append action): then it is
// marshalled as it is sent. Call it once the response is complete.
func (v *verdict) encoded() *encoded {
	if v.enc.ProcessingResponse == &v.resp {
		return &v.enc
	}
	field, inner := protowire.Number(fieldRequestBody), v.body.Response
	switch {
	case v.resp.Response == &v.onHeaders:
		field, inner = fieldRequestHeaders, v.headers.Response
	case v.resp.Response != &v.onBody:
		return nil
	}
	if inner != &v.common || v.resp.ModeOverride != nil || v.common.HeaderMutation != &v.mut || len(v.mut.RemoveHeaders) > 0 ||
		v.common.Status != 0 || v.common.BodyMutation != nil || v.common.Trailers != nil {
		return nil
	}
	for _, o := range v.mut.SetHeaders {
		if !plainOption(o) {
			return nil
		}
	}
	mutation := 0
	for _, o := range v.mut.SetHeaders {
		mutation += protowire.SizeTag(fieldSetHeaders) + protowire.SizeBytes(optionSize(o))
	}
	common := protowire.SizeTag(fieldHeaderMutation) + protowire.SizeBytes(mutation)
	if v.common.ClearRouteCache {
		common += protowire.SizeTag(fieldClearRouteCache) + protowire.SizeVarint(1)
	}
	answer := protowire.SizeTag(fieldCommonResponse) + protowire.SizeBytes(common)
	b := make([]byte, 0, protowire.SizeTag(field)+protowire.SizeBytes(answer)+len(v.meta))
	b = appendLen(b, field, answer)
	b = appendLen(b, fieldCommonResponse, common)
	b = appendLen(b, fieldHeaderMutation, mutation)
	for _, o := range v.mut.SetHeaders {
		b = appendOption(b, o)
	}
	if v.common.ClearRouteCache {
		b = protowire.AppendVarint(protowire.AppendTag(b, fieldClearRouteCache, protowire.VarintType), 1)
	}
	b = append(b, v.meta...) // the unknown fields: the endpoint metadata
	v.enc = encoded{ProcessingResponse: &v.resp, wire: b}
	return &v.enc
}

// plainOption reports whether o sets a header by key and raw value
// only, with an append action: what a decision sets, and all that
// appendOption writes.
func plainOption(o *corev3.HeaderValueOption) bool {
	h := o.GetHeader()
	return h != nil && h.GetValue() == "" && o.GetAppend() == nil && //nolint:staticcheck // deprecated, but it must be absent: appendOption does not write it
		!o.GetKeepEmptyValue() && len(o.ProtoReflect().GetUnknown()) == 0 && len(h.ProtoReflect().GetUnknown()) == 0
}

// headerSize is the encoded size of o's header.
func headerSize(h *corev3.HeaderValue) int {
	n := 0
	if k := h.GetKey(); k != "" {
		n += protowire.SizeTag(fieldHeaderKey) + protowire.SizeBytes(len(k))
	}
	if raw := h.GetRawValue(); len(raw) > 0 {
		n += protowire.SizeTag(fieldHeaderRawValue) + protowire.SizeBytes(len(raw))
	}
	return n
}

// optionSize is the encoded size of a plain option.
func optionSize(o *corev3.HeaderValueOption) int {
	n := protowire.SizeTag(fieldHeader) + protowire.SizeBytes(headerSize(o.GetHeader()))
	if a := o.GetAppendAction(); a != 0 {
		n += protowire.SizeTag(fieldAppendAction) + protowire.SizeVarint(uint64(a))
	}
	return n
}

// appendOption appends a plain option as an element of set_headers.
func appendOption(b []byte, o *corev3.HeaderValueOption) []byte {
	h := o.GetHeader()
	b = appendLen(b, fieldSetHeaders, optionSize(o))
	b = appendLen(b, fieldHeader, headerSize(h))
	if k := h.GetKey(); k != "" {
		b = protowire.AppendString(protowire.AppendTag(b, fieldHeaderKey, protowire.BytesType), k)
	}
	if raw := h.GetRawValue(); len(raw) > 0 {
		b = protowire.AppendBytes(protowire.AppendTag(b, fieldHeaderRawValue, protowire.BytesType), raw)
	}
	if a := o.GetAppendAction(); a != 0 {
		b = protowire.AppendVarint(protowire.AppendTag(b, fieldAppendAction, protowire.VarintType), uint64(a))
	}
	return b
}
