package extproc

import (
	"slices"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ilbproject/ilb/header"
)

// verdict is the memory of a routing decision's answer, in one
// allocation: the header mutation with the options it does not share
// (the draw, the override-host list) and their values, and the response
// that carries the mutation (the request headers' answer or the body's),
// plus the override-host list's dynamic metadata as wire bytes (a second
// allocation, of its exact size, when ILB picked a replica). A stream
// decides once, so one answer is built, sent and never changed after;
// it is never reused either (gRPC may read a message it was given after
// Send returns: a stats handler may, lazily). Built message by message,
// it was a dozen allocations.
type verdict struct {
	mut  extprocv3.HeaderMutation
	opts [2]corev3.HeaderValueOption
	vals [2]corev3.HeaderValue
	ptrs [4]*corev3.HeaderValueOption
	draw [20]byte // a uint64 in decimal

	resp      extprocv3.ProcessingResponse
	onHeaders extprocv3.ProcessingResponse_RequestHeaders
	onBody    extprocv3.ProcessingResponse_RequestBody
	headers   extprocv3.HeadersResponse
	body      extprocv3.BodyResponse
	common    extprocv3.CommonResponse

	// meta is the dynamic metadata of the override-host list (nil: ILB
	// picked no replica), endpoint the list itself, inside meta.
	meta, endpoint []byte
	// enc is resp with its wire bytes once encoded (wire.go).
	enc encoded
}

// setHosts makes hosts (at least one) the override-host list of the
// answer: the x-gateway-destination-endpoint header of the mutation
// (joined with ",") and, the same list, the envoy.lb dynamic metadata.
// Call it before mutation.
func (v *verdict) setHosts(hosts []string) {
	v.meta, v.endpoint = appendEndpointMetadata(nil, hosts)
}

// mutation is the header mutation of a decision: the model, the draw and
// the cluster, and the override-host list when setHosts gave one, values
// as raw_value. model and cluster are the cell's options, shared by every
// decision (never changed: protobuf may marshal one message on several
// goroutines at once).
func (v *verdict) mutation(model *corev3.HeaderValueOption, draw uint64, cluster *corev3.HeaderValueOption) *extprocv3.HeaderMutation {
	v.set(0, header.RouteDraw, strconv.AppendUint(v.draw[:0], draw, 10))
	v.ptrs = [4]*corev3.HeaderValueOption{model, &v.opts[0], cluster}
	n := 3
	if v.endpoint != nil {
		v.set(1, header.DestinationEndpoint, v.endpoint)
		v.ptrs[3], n = &v.opts[1], 4
	}
	v.mut = extprocv3.HeaderMutation{SetHeaders: v.ptrs[:n]}
	return &v.mut
}

// set makes option i set key to value.
func (v *verdict) set(i int, key string, value []byte) {
	v.vals[i] = corev3.HeaderValue{Key: key, RawValue: value}
	v.opts[i] = corev3.HeaderValueOption{Header: &v.vals[i], AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}

// headersResponse is headersResponse(mut, rematch) with the override-host
// metadata, in v's memory; without mut, the shared answer that changes
// nothing.
func (v *verdict) headersResponse(mut *extprocv3.HeaderMutation, rematch bool) *extprocv3.ProcessingResponse {
	if mut == nil {
		return continueHeaders
	}
	v.common = extprocv3.CommonResponse{HeaderMutation: mut, ClearRouteCache: rematch}
	v.headers = extprocv3.HeadersResponse{Response: &v.common}
	v.onHeaders = extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &v.headers}
	v.resp = extprocv3.ProcessingResponse{Response: &v.onHeaders}
	return v.withMetadata()
}

// bodyResponse is bodyResponse(mut, rematch) with the override-host
// metadata, in v's memory; without mut, the shared answer that changes
// nothing.
func (v *verdict) bodyResponse(mut *extprocv3.HeaderMutation, rematch bool) *extprocv3.ProcessingResponse {
	if mut == nil {
		return continueBody
	}
	v.common = extprocv3.CommonResponse{HeaderMutation: mut, ClearRouteCache: rematch}
	v.body = extprocv3.BodyResponse{Response: &v.common}
	v.onBody = extprocv3.ProcessingResponse_RequestBody{RequestBody: &v.body}
	v.resp = extprocv3.ProcessingResponse{Response: &v.onBody}
	return v.withMetadata()
}

// withMetadata is v's response with the override-host list as dynamic
// metadata, envoy.lb / x-gateway-destination-endpoint (the
// header carries the same list): Envoy's override_host policy reads
// either. The metadata is written as its wire bytes among the response's
// unknown fields, which protobuf sends as they are: on the wire it is
// the response's dynamic_metadata field, what any reader decodes; in
// this process resp.DynamicMetadata stays nil. Built as a
// structpb.Struct, its two maps cost about 4 % of ext_proc's CPU per
// request (protobuf sizes and encodes maps entry by entry, through
// reflection).
func (v *verdict) withMetadata() *extprocv3.ProcessingResponse {
	if v.meta != nil {
		v.resp.ProtoReflect().SetUnknown(v.meta)
	}
	return &v.resp
}

// Field numbers of what appendEndpointMetadata writes.
const (
	fieldDynamicMetadata = 8 // envoy.service.ext_proc.v3.ProcessingResponse.dynamic_metadata
	fieldStructFields    = 1 // google.protobuf.Struct.fields (map<string, Value>)
	fieldMapKey          = 1 // a map entry's key
	fieldMapValue        = 2 // a map entry's value
	fieldStringValue     = 3 // google.protobuf.Value.string_value
	fieldStructValue     = 5 // google.protobuf.Value.struct_value
)

// appendEndpointMetadata appends to b the wire encoding of
// ProcessingResponse's dynamic_metadata {envoy.lb:
// {x-gateway-destination-endpoint: hosts joined with ","}}, as
// proto.Marshal writes it (TestEndpointMetadataWire), and returns it and
// the joined list inside it. Sizes are computed inner to outer, then
// written outer to inner: one pass, b grown once.
func appendEndpointMetadata(b []byte, hosts []string) (wire, endpoint []byte) {
	n := max(len(hosts)-1, 0) // the commas
	for _, h := range hosts {
		n += len(h)
	}
	value := protowire.SizeTag(fieldStringValue) + protowire.SizeBytes(n) // Value{string_value}
	inner := structSize(header.DestinationEndpoint, value)                // Struct{endpoint: value}
	structValue := protowire.SizeTag(fieldStructValue) + protowire.SizeBytes(inner)
	outer := structSize(header.LBNamespace, structValue) // Struct{envoy.lb: Value{struct_value}}
	start := len(b)
	b = slices.Grow(b, protowire.SizeTag(fieldDynamicMetadata)+protowire.SizeBytes(outer))
	b = appendLen(b, fieldDynamicMetadata, outer)
	b = appendEntryHead(b, header.LBNamespace, structValue)
	b = appendLen(b, fieldStructValue, inner)
	b = appendEntryHead(b, header.DestinationEndpoint, value)
	b = appendLen(b, fieldStringValue, n)
	at := len(b)
	for i, h := range hosts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, h...)
	}
	return b[start:], b[at:]
}

// structSize is the encoded size of a Struct holding the one field key
// whose encoded Value takes value bytes.
func structSize(key string, value int) int {
	return protowire.SizeTag(fieldStructFields) + protowire.SizeBytes(entrySize(key, value))
}

// entrySize is the encoded size of a map entry of key and a value of
// value bytes.
func entrySize(key string, value int) int {
	return protowire.SizeTag(fieldMapKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(fieldMapValue) + protowire.SizeBytes(value)
}

// appendEntryHead appends a Struct's one field up to its value's bytes:
// the fields tag and length, the entry's key, the value's tag and length.
func appendEntryHead(b []byte, key string, value int) []byte {
	b = appendLen(b, fieldStructFields, entrySize(key, value))
	b = protowire.AppendString(protowire.AppendTag(b, fieldMapKey, protowire.BytesType), key)
	return appendLen(b, fieldMapValue, value)
}

// appendLen appends the tag of length-delimited field num and length n.
func appendLen(b []byte, num protowire.Number, n int) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.BytesType), uint64(n))
}
