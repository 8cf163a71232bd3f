package envoysim

import (
	"slices"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// streamInfo is the part of Envoy's StreamInfo (source/common/stream_info/
// stream_info_impl.h) envoysim models for a request: its dynamic metadata
// and the override_host load balancer's filter state. It belongs to the
// request's goroutine, like the stream, except that a full-duplex ext_proc
// exchange still running while the router works (extproc_duplex.go) reads
// and writes the metadata too: mu guards metadata.
type streamInfo struct {
	mu       sync.Mutex
	metadata dynamicMetadata
	// overrideHosts is the filter state
	// "envoy.extensions.load_balancing_policies.override_host.filter_state"
	// (OverrideHostFilterState): nil until the first pick of a cluster
	// with the override_host policy.
	overrideHosts *overrideHostState
}

// dynamicMetadata is StreamInfo::dynamicMetadata().filter_metadata: a
// Struct per namespace. Typed metadata is not modelled: nothing envoysim
// models writes any.
type dynamicMetadata map[string]*structpb.Struct

// set is StreamInfoImpl::setDynamicMetadata: value is merged into the
// namespace (Struct::MergeFrom: each top-level key of value replaces the
// key of the same name, the others stay). proto.Merge has the same map
// semantics.
func (m *dynamicMetadata) set(namespace string, value *structpb.Struct) {
	if *m == nil {
		*m = dynamicMetadata{}
	}
	cur := (*m)[namespace]
	if cur == nil {
		cur = &structpb.Struct{}
		(*m)[namespace] = cur
	}
	proto.Merge(cur, value)
}

// metadataKey is an envoy.type.metadata.v3.MetadataKey: a namespace and a
// path of keys into its Struct.
type metadataKey struct {
	key  string
	path []string
}

// value is Config::Metadata::metadataValue (source/common/config/
// metadata.cc): the value at the key's path, descending through struct
// values only; nil when any step is missing or not a struct.
func (m dynamicMetadata) value(k metadataKey) *structpb.Value {
	s := m[k.key]
	if s == nil {
		return nil
	}
	var v *structpb.Value
	for _, p := range k.path {
		if s == nil {
			return nil
		}
		v = s.GetFields()[p]
		if v == nil {
			return nil
		}
		s = v.GetStructValue()
	}
	return v
}

// nestedString is the Struct addSelectedHostKey builds: path[0] holding
// path[1] holding ... the last key set to s.
func nestedString(path []string, s string) *structpb.Struct {
	root := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	cur := root
	for _, p := range path[:len(path)-1] {
		next := &structpb.Struct{Fields: map[string]*structpb.Value{}}
		cur.Fields[p] = structpb.NewStructValue(next)
		cur = next
	}
	cur.Fields[path[len(path)-1]] = structpb.NewStringValue(s)
	return root
}

// metadataOptions is a compiled ExternalProcessor.metadata_options.
// receiving_namespaces.typed is accepted and, as in Envoy, has no effect
// (only untyped namespaces are ever written from a response).
type metadataOptions struct {
	forwardUntyped []string // forwarding_namespaces.untyped
	forwardTyped   []string // forwarding_namespaces.typed: nothing typed exists, nothing is sent
	receiveUntyped []string // receiving_namespaces.untyped
}

func compileMetadataOptions(o *extprocfilterv3.MetadataOptions) metadataOptions {
	return metadataOptions{
		forwardUntyped: o.GetForwardingNamespaces().GetUntyped(),
		forwardTyped:   o.GetForwardingNamespaces().GetTyped(),
		receiveUntyped: o.GetReceivingNamespaces().GetUntyped(),
	}
}

// metadataContext is Filter::addDynamicMetadata (ext_proc.cc), run for
// every headers and body message: ProcessingRequest.metadata_context holds,
// for each untyped forwarding namespace present in the stream's dynamic
// metadata, a copy of it (the connection's dynamic metadata, which Envoy
// consults next, is always empty in envoysim: no listener or network
// filter writes any). Typed forwarding namespaces find nothing: nothing
// envoysim models writes typed metadata. With no forwarding namespace the
// context is an empty Metadata, as in Envoy.
func (f *extProcFilter) metadataContext() *corev3.Metadata {
	md := &corev3.Metadata{}
	f.s.info.mu.Lock()
	defer f.s.info.mu.Unlock()
	for _, ns := range f.cfg.meta.forwardUntyped {
		if s, ok := f.s.info.metadata[ns]; ok {
			if md.FilterMetadata == nil {
				md.FilterMetadata = map[string]*structpb.Struct{}
			}
			md.FilterMetadata[ns] = proto.Clone(s).(*structpb.Struct)
		}
	}
	return md
}

// receiveMetadata is Filter::setDynamicMetadata (ext_proc.cc): without
// receiving namespaces, or without dynamic_metadata in the response,
// nothing happens (the metadata is dropped); otherwise every top-level key
// of dynamic_metadata that is a receiving namespace has its struct value
// merged into that namespace of the stream's dynamic metadata (a value
// that is not a struct merges an empty one), and other keys are dropped.
// onReceiveMessage does this for a headers, body or trailers response
// before it checks the response is expected (a spurious response still
// writes its metadata) and for an immediate response unless
// disable_immediate_response. The router reads the stream's dynamic
// metadata when it picks the host, so metadata set on the request path
// reaches the load balancer.
func (f *extProcFilter) receiveMetadata(resp *extprocv3.ProcessingResponse) {
	recv := f.cfg.meta.receiveUntyped
	if len(recv) == 0 || resp.GetDynamicMetadata() == nil {
		if resp.GetDynamicMetadata() != nil {
			f.s.e.log.Debug("ext_proc response included dynamic metadata, but no receiving namespaces are configured")
		}
		return
	}
	for ns, v := range resp.GetDynamicMetadata().GetFields() {
		if !slices.Contains(recv, ns) {
			f.s.e.log.Debug("ext_proc response included dynamic metadata for a namespace not configured for receiving", "namespace", ns)
			continue
		}
		s := v.GetStructValue()
		if s == nil {
			s = &structpb.Struct{}
		}
		f.s.info.mu.Lock()
		f.s.info.metadata.set(ns, s)
		f.s.info.mu.Unlock()
	}
}

// trimASCIISpace is absl::StripAsciiWhitespace.
func trimASCIISpace(s string) string {
	return strings.Trim(s, " \t\n\v\f\r")
}
