package envoysim

import (
	"errors"
	"fmt"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
)

// extProcPerRoute is a compiled ExtProcPerRoute (ext_proc.cc
// FilterConfigPerRoute): disabled, or overrides of the filter's
// processing mode, gRPC service, initial metadata, metadata namespaces
// and failure mode. A nil field is "not set": the less specific level, or
// the filter's own configuration, applies.
type extProcPerRoute struct {
	disabled bool
	// mode is overrides.processing_mode, dropped when disabled
	// (initProcessingMode).
	mode *extprocfilterv3.ProcessingMode
	// grpc is overrides.grpc_service: its cluster, initial metadata and
	// retry policy replace the filter's.
	grpc *grpcTarget
	// initialMetadata is overrides.grpc_initial_metadata, merged key by
	// key into the service's initial metadata.
	initialMetadata []headerValue
	forwardUntyped  *[]string
	receiveUntyped  *[]string
	failOpen        *bool
}

// grpcTarget is a compiled envoy_grpc GrpcService.
type grpcTarget struct {
	clusterName     string
	initialMetadata []headerValue
	retry           *grpcRetry
}

func compileExtProcPerRoute(pr *extprocfilterv3.ExtProcPerRoute) (*extProcPerRoute, error) {
	out := &extProcPerRoute{disabled: pr.GetDisabled()}
	o := pr.GetOverrides()
	if o == nil {
		return out, nil
	}
	var errs []error
	if m := o.GetProcessingMode(); m != nil && !out.disabled {
		if err := checkModelledMode(m); err != nil {
			errs = append(errs, fmt.Errorf("overrides.processing_mode: %w", err))
		}
		out.mode = m
	}
	if g := o.GetGrpcService(); g != nil {
		t := &grpcTarget{clusterName: g.GetEnvoyGrpc().GetClusterName()}
		if t.clusterName == "" {
			errs = append(errs, errors.New("overrides.grpc_service.envoy_grpc.cluster_name is required (only envoy_grpc is supported)"))
		}
		for _, hv := range g.GetInitialMetadata() {
			t.initialMetadata = append(t.initialMetadata, headerValue{key: hv.GetKey(), value: hv.GetValue()})
		}
		retry, err := compileGRPCRetry(g.GetRetryPolicy())
		if err != nil {
			errs = append(errs, fmt.Errorf("overrides.grpc_service: %w", err))
		}
		t.retry = retry
		out.grpc = t
	}
	for _, hv := range o.GetGrpcInitialMetadata() {
		out.initialMetadata = append(out.initialMetadata, headerValue{key: hv.GetKey(), value: hv.GetValue()})
	}
	if md := o.GetMetadataOptions(); md != nil {
		if f := md.GetForwardingNamespaces(); f != nil {
			ns := f.GetUntyped()
			out.forwardUntyped = &ns
		}
		if r := md.GetReceivingNamespaces(); r != nil {
			ns := r.GetUntyped()
			out.receiveUntyped = &ns
		}
	}
	if fm := o.GetFailureModeAllow(); fm != nil {
		v := fm.GetValue()
		out.failOpen = &v
	}
	return out, errors.Join(errs...)
}

// mergeExtProcPerRoute is FilterConfigPerRoute's merging constructor: the
// more specific level's disabled; its processing mode unless disabled
// (then none), else the less specific one's; the more specific gRPC
// service, namespaces and failure mode when set; initial metadata merged
// key by key (mergeGrpcInitialMetadata).
func mergeExtProcPerRoute(less, more *extProcPerRoute) *extProcPerRoute {
	out := &extProcPerRoute{disabled: more.disabled}
	if !more.disabled {
		out.mode = more.mode
		if out.mode == nil {
			out.mode = less.mode
		}
	}
	out.grpc = firstSet(more.grpc, less.grpc)
	out.initialMetadata = mergeHeaderValues(less.initialMetadata, more.initialMetadata)
	out.forwardUntyped = firstSet(more.forwardUntyped, less.forwardUntyped)
	out.receiveUntyped = firstSet(more.receiveUntyped, less.receiveUntyped)
	out.failOpen = firstSet(more.failOpen, less.failOpen)
	return out
}

func firstSet[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

// mergeHeaderValues is mergeHeaderValues/mergeHeaderValuesField
// (ext_proc.cc): each header of add replaces every entry of the same key
// in base, or is appended.
func mergeHeaderValues(base, add []headerValue) []headerValue {
	out := append([]headerValue(nil), base...)
	for _, h := range add {
		found := false
		for i := range out {
			if out[i].key == h.key {
				out[i] = h
				found = true
			}
		}
		if !found {
			out = append(out, h)
		}
	}
	return out
}

// apply is Filter::mergePerRouteConfig once the levels are merged:
// disabled turns every mode off (allDisabledMode: headers SKIP, bodies
// NONE, trailers not sent); otherwise each override that is set replaces
// the filter's value for this stream. It returns the stream's
// configuration (cfg itself when nothing changes) and its mode.
func (pr *extProcPerRoute) apply(cfg *extProcConfig) (*extProcConfig, *extprocfilterv3.ProcessingMode) {
	if pr.disabled {
		return cfg, &extprocfilterv3.ProcessingMode{
			RequestHeaderMode: extprocfilterv3.ProcessingMode_SKIP, ResponseHeaderMode: extprocfilterv3.ProcessingMode_SKIP,
		}
	}
	c := *cfg
	if pr.mode != nil {
		c.mode = pr.mode
	}
	if pr.grpc != nil {
		c.clusterName, c.initialMetadata, c.retry = pr.grpc.clusterName, pr.grpc.initialMetadata, pr.grpc.retry
	}
	if len(pr.initialMetadata) > 0 {
		c.initialMetadata = mergeHeaderValues(c.initialMetadata, pr.initialMetadata)
	}
	if pr.forwardUntyped != nil {
		c.meta.forwardUntyped = *pr.forwardUntyped
	}
	if pr.receiveUntyped != nil {
		c.meta.receiveUntyped = *pr.receiveUntyped
	}
	if pr.failOpen != nil {
		c.failOpen = *pr.failOpen
	}
	return &c, c.mode
}
