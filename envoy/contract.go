package envoy

import (
	"fmt"
	"time"

	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	earlyheadermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/openai"
)

// The wire contract between Envoy and ILB's ext_proc, written once: ILB's
// own listener (package xds) and the Istio EnvoyFilter (package istio)
// build these same pieces, so the two modes cannot drift apart.

// ExtProc is the ext_proc filter: request headers and the buffered request
// body (the OpenAI JSON) go to ILB, response headers too (to read back the
// served cluster); response bodies stream through untouched.
// allow_mode_override lets ILB skip the body when the client names the
// model in x-ilb-model. failure_mode_allow lets the route table decide
// when ext_proc cannot (unreachable, error, message timeout): the fallback
// route serves a fail-open source by its default weights and answers a
// fail-closed one 503 with a JSON body that says why. cluster is the Envoy
// cluster of ILB's gRPC service; source goes in the stream's initial
// metadata.
func ExtProc(cluster, source string, messageTimeout time.Duration) *extprocfilterv3.ExternalProcessor {
	return &extprocfilterv3.ExternalProcessor{
		GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{
				ClusterName: cluster,
			}},
			InitialMetadata: []*corev3.HeaderValue{{Key: header.Source, Value: source}},
			RetryPolicy:     ExtProcRetry(),
		},
		FailureModeAllow: true,
		ProcessingMode: &extprocfilterv3.ProcessingMode{
			RequestHeaderMode:   extprocfilterv3.ProcessingMode_SEND,
			ResponseHeaderMode:  extprocfilterv3.ProcessingMode_SEND,
			RequestBodyMode:     extprocfilterv3.ProcessingMode_BUFFERED,
			ResponseBodyMode:    extprocfilterv3.ProcessingMode_NONE,
			RequestTrailerMode:  extprocfilterv3.ProcessingMode_SKIP,
			ResponseTrailerMode: extprocfilterv3.ProcessingMode_SKIP,
		},
		MessageTimeout:    durationpb.New(messageTimeout),
		AllowModeOverride: true,
		// Replica picking (GIE's endpoint-picker protocol): Envoy takes
		// the envoy.lb namespace of the dynamic metadata ILB returns
		// (the override-host list; without receiving_namespaces Envoy
		// drops it), and sends that namespace back with each message, so
		// the response headers carry the host the override_host policy
		// selected (x-gateway-destination-endpoint-served).
		MetadataOptions: &extprocfilterv3.MetadataOptions{
			ReceivingNamespaces:  &extprocfilterv3.MetadataOptions_MetadataNamespaces{Untyped: []string{header.LBNamespace}},
			ForwardingNamespaces: &extprocfilterv3.MetadataOptions_MetadataNamespaces{Untyped: []string{header.LBNamespace}},
		},
	}
}

// ExtProcRetry is the retry policy of the ext_proc filter's gRPC streams
// (grpc_service.retry_policy: the default policy of an envoy_grpc
// client's streams, and the ext_proc client buffers what it sent for
// retry): a stream that fails before ILB answered (the replica refused or
// reset the connection, or said UNAVAILABLE) is opened again, twice at
// most, on another ILB replica (previous_hosts), after 25 to 250 ms. Once
// ILB has answered, a failure is final and the source's fail mode
// applies. With one ILB, the retries go to it again.
func ExtProcRetry() *corev3.RetryPolicy {
	return &corev3.RetryPolicy{
		RetryOn:    "connect-failure,refused-stream,reset,unavailable",
		NumRetries: wrapperspb.UInt32(2),
		RetryBackOff: &corev3.BackoffStrategy{
			BaseInterval: durationpb.New(25 * time.Millisecond), MaxInterval: durationpb.New(250 * time.Millisecond),
		},
		RetryHostPredicate: []*corev3.RetryPolicy_RetryHostPredicate{{
			Name:       "envoy.retry_host_predicates.previous_hosts",
			ConfigType: &corev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: MustAny(&previoushostsv3.PreviousHostsPredicate{})},
		}},
		HostSelectionRetryMaxAttempts: 3,
	}
}

// StripRouteHeaders is the early header mutation that removes every
// request header with the x-ilb-route- prefix, and
// x-gateway-destination-endpoint, before any filter runs, so no client
// can pick a destination cluster or replica: only ext_proc sets them.
func StripRouteHeaders() *corev3.TypedExtensionConfig {
	return &corev3.TypedExtensionConfig{
		Name: EarlyHeaderMutation,
		TypedConfig: MustAny(&earlyheadermutationv3.HeaderMutation{
			Mutations: []*mutationrulesv3.HeaderMutation{
				removePrefix(header.RoutePrefix),
				{Action: &mutationrulesv3.HeaderMutation_Remove{Remove: header.DestinationEndpoint}},
			},
		}),
	}
}

// StripInternal is the header mutation filter of a source without debug,
// first in the chain so last on the response: after ext_proc has read
// them, the report headers (header.Report) and the engines' own
// x-ilb-engine-* headers go, even when ext_proc is down.
func StripInternal() *headermutationv3.HeaderMutation {
	var muts []*mutationrulesv3.HeaderMutation
	for _, h := range header.Report() {
		muts = append(muts, &mutationrulesv3.HeaderMutation{Action: &mutationrulesv3.HeaderMutation_Remove{Remove: h}})
	}
	muts = append(muts, removePrefix(header.EnginePrefix))
	return &headermutationv3.HeaderMutation{Mutations: &headermutationv3.Mutations{ResponseMutations: muts}}
}

func removePrefix(prefix string) *mutationrulesv3.HeaderMutation {
	return &mutationrulesv3.HeaderMutation{Action: &mutationrulesv3.HeaderMutation_RemoveOnMatch_{RemoveOnMatch: &mutationrulesv3.HeaderMutation_RemoveOnMatch{
		KeyMatcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: prefix}},
	}}}
}

// LocalReplies maps Envoy's own 413 — a body past the listener's buffer
// limit, which Envoy answers before ext_proc sees the body — to the same
// OpenAI-style JSON error ILB gives past its own limit (code
// request_too_large in the body and in x-ilb-reason), so a client gets one
// answer whichever limit it hit. limit is the smaller of the two, in
// bytes. The mapper matches every local reply with status 413, ILB's
// included (the same text).
func LocalReplies(limit int) *hcmv3.LocalReplyConfig {
	body := openai.ErrorBody("invalid_request_error", "request_too_large", fmt.Sprintf("the request body is over %d bytes", limit), "")
	return &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{{
		Filter: &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_StatusCodeFilter{StatusCodeFilter: &accesslogv3.StatusCodeFilter{
			Comparison: &accesslogv3.ComparisonFilter{Op: accesslogv3.ComparisonFilter_EQ, Value: &corev3.RuntimeUInt32{DefaultValue: 413, RuntimeKey: "ilb.local_reply.request_too_large"}},
		}}},
		Body: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: string(body)}},
		BodyFormatOverride: &corev3.SubstitutionFormatString{
			Format:      &corev3.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "%LOCAL_REPLY_BODY%"}}},
			ContentType: "application/json",
		},
		HeadersToAdd: []*corev3.HeaderValueOption{{
			Header:       &corev3.HeaderValue{Key: header.Reason, Value: "request_too_large"},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		}},
	}}}
}
