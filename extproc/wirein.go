package extproc

import (
	"unicode/utf8"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Field numbers of the messages decodeRequest reads.
const (
	fieldReqRequestHeaders    = 2  // ProcessingRequest.request_headers
	fieldReqResponseHeaders   = 3  // ProcessingRequest.response_headers
	fieldReqRequestBody       = 4  // ProcessingRequest.request_body
	fieldReqResponseBody      = 5  // ProcessingRequest.response_body
	fieldReqMetadataContext   = 8  // ProcessingRequest.metadata_context
	fieldReqObservabilityMode = 10 // ProcessingRequest.observability_mode
	fieldReqProtocolConfig    = 11 // ProcessingRequest.protocol_config

	fieldHeadersMap         = 1 // HttpHeaders.headers
	fieldHeadersEndOfStream = 3 // HttpHeaders.end_of_stream
	fieldMapHeaders         = 1 // HeaderMap.headers
	fieldHeaderValue        = 2 // HeaderValue.value (fieldHeaderKey, fieldHeaderRawValue: wire.go)

	fieldBodyBody                  = 1 // HttpBody.body
	fieldBodyEndOfStream           = 2 // HttpBody.end_of_stream
	fieldBodyEndWithoutMessage     = 3 // HttpBody.end_of_stream_without_message
	fieldBodyGRPCMessageCompressed = 4 // HttpBody.grpc_message_compressed

	fieldConfigRequestBodyMode  = 1 // ProtocolConfiguration.request_body_mode
	fieldConfigResponseBodyMode = 2 // ProtocolConfiguration.response_body_mode
	fieldConfigSendBodyEarly    = 3 // ProtocolConfiguration.send_body_without_waiting_for_header_response
)

// decodeRequest decodes b into m exactly as proto.Unmarshal would (a
// message proto.Equal to its result), for the messages Envoy's ext_proc
// filter sends on the request path: request or response headers (a
// header map of keys, values and raw values, end of stream), a request
// or response body, the metadata context (decoded by proto.Unmarshal:
// empty but for the replica picked), the protocol configuration and the
// observability mode, each field once. It reports false, leaving m
// untouched, for anything else — another field (trailers, attributes,
// flow control, an unknown one), a field twice (protobuf would merge or
// replace), a wire type protobuf would keep as unknown, a string that is
// not UTF-8, malformed bytes — which the caller then gives to
// proto.Unmarshal. Protobuf's reflection-driven decoder allocated every
// header (its key and its value) on its own: a request's headers are
// four allocations here, whatever their number, and the decoded strings
// and byte slices share one buffer (the strings are never written; each
// byte slice is capped at its own length).
func decodeRequest(b []byte, m *extprocv3.ProcessingRequest) bool {
	var (
		seen    uint64
		request any // the oneof member's wrapper, nil none
		observe bool
		config  *extprocv3.ProtocolConfiguration
		meta    *corev3.Metadata
	)
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 || num >= 64 || seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		b = b[n:]
		if num == fieldReqObservabilityMode && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b, observe = b[n:], v != 0
			continue
		}
		if typ != protowire.BytesType {
			return false
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if num != fieldReqProtocolConfig && num != fieldReqMetadataContext && request != nil {
			return false // a second member of the oneof: protobuf replaces the first
		}
		ok := false
		switch num {
		case fieldReqRequestHeaders:
			h := new(requestHeadersMsg)
			h.oneof.RequestHeaders, request = &h.headers, &h.oneof
			ok = decodeHeaders(v, &h.headers, &h.hmap)
		case fieldReqResponseHeaders:
			h := new(responseHeadersMsg)
			h.oneof.ResponseHeaders, request = &h.headers, &h.oneof
			ok = decodeHeaders(v, &h.headers, &h.hmap)
		case fieldReqRequestBody:
			h := new(requestBodyMsg)
			h.oneof.RequestBody, request = &h.body, &h.oneof
			ok = decodeBody(v, &h.body)
		case fieldReqResponseBody:
			h := new(responseBodyMsg)
			h.oneof.ResponseBody, request = &h.body, &h.oneof
			ok = decodeBody(v, &h.body)
		case fieldReqProtocolConfig:
			config = new(extprocv3.ProtocolConfiguration)
			ok = decodeConfig(v, config)
		case fieldReqMetadataContext:
			meta, ok = decodeMetadata(v)
		}
		if !ok {
			return false
		}
	}
	m.Reset()
	m.ObservabilityMode, m.ProtocolConfig, m.MetadataContext = observe, config, meta
	switch r := request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		m.Request = r
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		m.Request = r
	case *extprocv3.ProcessingRequest_RequestBody:
		m.Request = r
	case *extprocv3.ProcessingRequest_ResponseBody:
		m.Request = r
	}
	return true
}

// metadataOptions decode a request's metadata context as proto.Unmarshal
// does inside the request: one level of nesting down.
var metadataOptions = proto.UnmarshalOptions{RecursionLimit: protowire.DefaultRecursionLimit - 1}

// decodeMetadata decodes a request's metadata context: Envoy sends one
// with every message (empty unless a forwarding namespace is in the
// stream's dynamic metadata: the replica picked, on the response
// headers), which protobuf decodes, maps of structs and all.
func decodeMetadata(b []byte) (*corev3.Metadata, bool) {
	md := new(corev3.Metadata)
	if len(b) == 0 {
		return md, true
	}
	return md, metadataOptions.Unmarshal(b, md) == nil
}

// The oneof wrapper of a decoded request and the messages under it, in
// one allocation.
type (
	requestHeadersMsg struct {
		oneof   extprocv3.ProcessingRequest_RequestHeaders
		headers extprocv3.HttpHeaders
		hmap    corev3.HeaderMap
	}
	responseHeadersMsg struct {
		oneof   extprocv3.ProcessingRequest_ResponseHeaders
		headers extprocv3.HttpHeaders
		hmap    corev3.HeaderMap
	}
	requestBodyMsg struct {
		oneof extprocv3.ProcessingRequest_RequestBody
		body  extprocv3.HttpBody
	}
	responseBodyMsg struct {
		oneof extprocv3.ProcessingRequest_ResponseBody
		body  extprocv3.HttpBody
	}
)

// decodeHeaders decodes b into h (hm: the header map's memory), as
// decodeRequest says.
func decodeHeaders(b []byte, h *extprocv3.HttpHeaders, hm *corev3.HeaderMap) bool {
	var seen uint8
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == fieldHeadersMap && typ == protowire.BytesType && seen&1 == 0:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !decodeHeaderMap(v, hm) {
				return false
			}
			b, seen, h.Headers = b[n:], seen|1, hm
		case num == fieldHeadersEndOfStream && typ == protowire.VarintType && seen&2 == 0:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b, seen, h.EndOfStream = b[n:], seen|2, v != 0
		default:
			return false
		}
	}
	return true
}

// decodeHeaderMap decodes b into hm in one pass: the headers' fields are
// noted (on the stack for up to maxNotedHeaders), then one array of
// headers, one of pointers to them and one buffer for their strings and
// bytes are filled.
func decodeHeaderMap(b []byte, hm *corev3.HeaderMap) bool {
	var noted [maxNotedHeaders]headerFields
	hs := noted[:0]
	strs, raws := 0, 0
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 || num != fieldMapHeaders || typ != protowire.BytesType {
			return false
		}
		v, k := consumeBytes(b[n:])
		if k < 0 {
			return false
		}
		b = b[n+k:]
		var h headerFields
		if !h.read(v) {
			return false
		}
		hs = append(hs, h)
		strs, raws = strs+len(h.key)+len(h.value), raws+len(h.raw)
	}
	if len(hs) == 0 {
		return true
	}
	vals := make([]corev3.HeaderValue, len(hs))
	ptrs := make([]*corev3.HeaderValue, len(hs))
	buf := make([]byte, strs+raws)
	text, bytes := buf[:strs:strs], buf[strs:]
	// The strings' memory: text is never written after this loop, nor
	// handed out as bytes.
	str := unsafe.String(unsafe.SliceData(buf), strs)
	at := 0
	for i, f := range hs {
		h := &vals[i]
		if len(f.key) > 0 {
			copy(text[at:], f.key)
			h.Key, at = str[at:at+len(f.key)], at+len(f.key)
		}
		if len(f.value) > 0 {
			copy(text[at:], f.value)
			h.Value, at = str[at:at+len(f.value)], at+len(f.value)
		}
		if len(f.raw) > 0 {
			copy(bytes, f.raw)
			h.RawValue, bytes = bytes[:len(f.raw):len(f.raw)], bytes[len(f.raw):]
		}
		ptrs[i] = h
	}
	hm.Headers = ptrs
	return true
}

// maxNotedHeaders is how many headers decodeHeaderMap notes on the
// stack (more go to the heap): a request's are a dozen or two.
const maxNotedHeaders = 32

// headerFields are a HeaderValue's key, value and raw value, as bytes of
// the message.
type headerFields struct{ key, value, raw []byte }

// read reads a HeaderValue; false when it holds another field, one
// twice, or a string that is not UTF-8.
func (h *headerFields) read(b []byte) bool {
	var seen uint8
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 || typ != protowire.BytesType || num < fieldHeaderKey || num > fieldHeaderRawValue || seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		v, k := consumeBytes(b[n:])
		if k < 0 {
			return false
		}
		b = b[n+k:]
		switch num {
		case fieldHeaderKey:
			h.key = v
		case fieldHeaderValue:
			h.value = v
		default:
			h.raw = v
		}
	}
	return utf8.Valid(h.key) && utf8.Valid(h.value)
}

// consumeTag is protowire.ConsumeTag, a one-byte tag read inline.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	if len(b) > 0 && b[0] < 0x80 && b[0] >= 1<<3 {
		return protowire.Number(b[0] >> 3), protowire.Type(b[0] & 7), 1
	}
	return protowire.ConsumeTag(b)
}

// consumeBytes is protowire.ConsumeBytes, a one-byte length read inline.
func consumeBytes(b []byte) ([]byte, int) {
	if len(b) > 0 && b[0] < 0x80 {
		if n := 1 + int(b[0]); n <= len(b) {
			return b[1:n], n
		}
		return nil, -1
	}
	return protowire.ConsumeBytes(b)
}

// decodeBody decodes b into body, as decodeRequest says.
func decodeBody(b []byte, body *extprocv3.HttpBody) bool {
	var seen uint8
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 || num < fieldBodyBody || num > fieldBodyGRPCMessageCompressed || seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		b = b[n:]
		if num == fieldBodyBody {
			if typ != protowire.BytesType {
				return false
			}
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b, body.Body = b[n:], append([]byte(nil), v...) // nil when empty, as protobuf
			continue
		}
		if typ != protowire.VarintType {
			return false
		}
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case fieldBodyEndOfStream:
			body.EndOfStream = v != 0
		case fieldBodyEndWithoutMessage:
			body.EndOfStreamWithoutMessage = v != 0
		default:
			body.GrpcMessageCompressed = v != 0
		}
	}
	return true
}

// decodeConfig decodes b into c, as decodeRequest says.
func decodeConfig(b []byte, c *extprocv3.ProtocolConfiguration) bool {
	var seen uint8
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 || typ != protowire.VarintType || num < fieldConfigRequestBodyMode || num > fieldConfigSendBodyEarly || seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		v, k := protowire.ConsumeVarint(b[n:])
		if k < 0 {
			return false
		}
		b = b[n+k:]
		switch num {
		case fieldConfigRequestBodyMode:
			c.RequestBodyMode = extprocfilterv3.ProcessingMode_BodySendMode(int32(v))
		case fieldConfigResponseBodyMode:
			c.ResponseBodyMode = extprocfilterv3.ProcessingMode_BodySendMode(int32(v))
		default:
			c.SendBodyWithoutWaitingForHeaderResponse = v != 0
		}
	}
	return true
}
