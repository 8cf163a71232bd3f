package envoy

import (
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/common/v3"
	leastrequestv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	overridehostv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/override_host/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ilbproject/ilb/header"
)

// Load-balancing policy extension names.
const (
	OverrideHostPolicyName = "envoy.load_balancing_policies.override_host"
	LeastRequestPolicyName = "envoy.load_balancing_policies.least_request"
)

// OverrideHostPolicy is the load-balancing policy of an engine cluster
// whose replica ILB picks (Envoy 1.35+): the host list comes from the
// x-gateway-destination-endpoint request header ext_proc sets, else from
// the same list in dynamic metadata envoy.lb/x-gateway-destination-endpoint
// (the Gateway API Inference Extension's endpoint-picker protocol). Envoy
// sends to the first listed host that is in the cluster — without a
// health check: ILB lists only replicas its signals see serving — and a
// retry takes the next; with no list, or none of it in the cluster, the
// fallback is least request with two choices and slow start, as for the
// clusters ILB does not pick replicas in.
func OverrideHostPolicy(slowStart time.Duration) *clusterv3.LoadBalancingPolicy {
	lr := &leastrequestv3.LeastRequest{ChoiceCount: wrapperspb.UInt32(2)}
	if slowStart > 0 {
		lr.SlowStartConfig = &commonv3.SlowStartConfig{SlowStartWindow: durationpb.New(slowStart)}
	}
	oh := &overridehostv3.OverrideHost{
		OverrideHostSources: []*overridehostv3.OverrideHost_OverrideHostSource{
			{Header: header.DestinationEndpoint},
			{Metadata: &metadatav3.MetadataKey{Key: header.LBNamespace, Path: []*metadatav3.MetadataKey_PathSegment{
				{Segment: &metadatav3.MetadataKey_PathSegment_Key{Key: header.DestinationEndpoint}},
			}}},
		},
		// The host chosen, override or fallback, goes to the request's
		// dynamic metadata, which the ext_proc filter forwards to ILB
		// with the response headers: GIE's "served" key.
		SelectedHostKey: &metadatav3.MetadataKey{Key: header.LBNamespace, Path: []*metadatav3.MetadataKey_PathSegment{
			{Segment: &metadatav3.MetadataKey_PathSegment_Key{Key: header.DestinationEndpointServed}},
		}},
		FallbackPolicy: &clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{{
			TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: LeastRequestPolicyName, TypedConfig: MustAny(lr)},
		}}},
	}
	return &clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{{
		TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: OverrideHostPolicyName, TypedConfig: MustAny(oh)},
	}}}
}
