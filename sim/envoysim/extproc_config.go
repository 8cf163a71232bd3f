package envoysim

import (
	"errors"
	"fmt"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
)

// defaultMessageTimeout is ExternalProcessor.message_timeout when unset.
const defaultMessageTimeout = 200 * time.Millisecond

// processingMode is the effective ProcessingMode of one direction pair, as
// ProcessorState keeps it (processor_state.cc setProcessingModeInternal):
// headers are sent unless SKIP, trailers only when SEND (refused by
// envoysim), bodies per their BodySendMode.
type processingMode struct {
	sendReqHeaders  bool
	sendRespHeaders bool
	reqBody         extprocfilterv3.ProcessingMode_BodySendMode
	respBody        extprocfilterv3.ProcessingMode_BodySendMode
}

func modeFromProto(m *extprocfilterv3.ProcessingMode) processingMode {
	return processingMode{
		sendReqHeaders:  m.GetRequestHeaderMode() != extprocfilterv3.ProcessingMode_SKIP,
		sendRespHeaders: m.GetResponseHeaderMode() != extprocfilterv3.ProcessingMode_SKIP,
		reqBody:         m.GetRequestBodyMode(),
		respBody:        m.GetResponseBodyMode(),
	}
}

// checkModelledMode reports the parts of m envoysim does not model: body
// modes other than NONE and BUFFERED, trailer modes SEND.
func checkModelledMode(m *extprocfilterv3.ProcessingMode) error {
	var errs []error
	for _, b := range []struct {
		name string
		mode extprocfilterv3.ProcessingMode_BodySendMode
	}{{"request_body_mode", m.GetRequestBodyMode()}, {"response_body_mode", m.GetResponseBodyMode()}} {
		if b.mode != extprocfilterv3.ProcessingMode_NONE && b.mode != extprocfilterv3.ProcessingMode_BUFFERED {
			errs = append(errs, fmt.Errorf("%s %s is not supported by envoysim (NONE, BUFFERED)", b.name, b.mode))
		}
	}
	for _, t := range []struct {
		name string
		mode extprocfilterv3.ProcessingMode_HeaderSendMode
	}{{"request_trailer_mode", m.GetRequestTrailerMode()}, {"response_trailer_mode", m.GetResponseTrailerMode()}} {
		if t.mode == extprocfilterv3.ProcessingMode_SEND {
			errs = append(errs, fmt.Errorf("%s SEND is not supported by envoysim", t.name))
		}
	}
	return errors.Join(errs...)
}

// headerValue is a key and value of grpc_service.initial_metadata.
type headerValue struct {
	key, value string
}

// extProcConfig is a compiled ExternalProcessor filter.
type extProcConfig struct {
	filterName               string
	clusterName              string
	initialMetadata          []headerValue
	failOpen                 bool
	mode                     *extprocfilterv3.ProcessingMode
	messageTimeout           time.Duration
	maxMessageTimeout        time.Duration
	checker                  *mutationChecker
	allowModeOverride        bool
	allowedOverrideModes     []*extprocfilterv3.ProcessingMode
	disableImmediateResponse bool
	routeCacheAction         extprocfilterv3.ExternalProcessor_RouteCacheAction
	statusOnError            int
	retry                    *grpcRetry // grpc_service.retry_policy; nil: none
	meta                     metadataOptions
}

func compileExtProc(name string, c *extprocfilterv3.ExternalProcessor) (*extProcConfig, error) {
	cfg := &extProcConfig{
		filterName:               name,
		clusterName:              c.GetGrpcService().GetEnvoyGrpc().GetClusterName(),
		failOpen:                 c.GetFailureModeAllow(),
		mode:                     c.GetProcessingMode(),
		messageTimeout:           defaultMessageTimeout,
		allowModeOverride:        c.GetAllowModeOverride(),
		allowedOverrideModes:     c.GetAllowedOverrideModes(),
		disableImmediateResponse: c.GetDisableImmediateResponse(),
		routeCacheAction:         c.GetRouteCacheAction(),
		statusOnError:            statusOnError(int(c.GetStatusOnError().GetCode())),
		meta:                     compileMetadataOptions(c.GetMetadataOptions()),
	}
	var errs []error
	if cfg.clusterName == "" {
		errs = append(errs, errors.New("grpc_service.envoy_grpc.cluster_name is required (only envoy_grpc is supported)"))
	}
	if cfg.mode == nil {
		cfg.mode = &extprocfilterv3.ProcessingMode{}
	}
	if err := checkModelledMode(cfg.mode); err != nil {
		errs = append(errs, fmt.Errorf("processing_mode: %w", err))
	}
	for _, hv := range c.GetGrpcService().GetInitialMetadata() {
		cfg.initialMetadata = append(cfg.initialMetadata, headerValue{key: hv.GetKey(), value: hv.GetValue()})
	}
	if c.GetMessageTimeout() != nil {
		cfg.messageTimeout = c.GetMessageTimeout().AsDuration()
	}
	if c.GetMaxMessageTimeout() != nil {
		cfg.maxMessageTimeout = c.GetMaxMessageTimeout().AsDuration()
	}
	// FilterConfig: disable_clear_route_cache is the same as route_cache_action RETAIN.
	if c.GetDisableClearRouteCache() {
		cfg.routeCacheAction = extprocfilterv3.ExternalProcessor_RETAIN
	}
	retry, err := compileGRPCRetry(c.GetGrpcService().GetRetryPolicy())
	if err != nil {
		errs = append(errs, err)
	}
	cfg.retry = retry
	checker, err := compileMutationChecker(c.GetMutationRules())
	if err != nil {
		errs = append(errs, err)
	}
	cfg.checker = checker
	return cfg, errors.Join(errs...)
}

// statusOnError is FilterConfig's toErrorCode: a valid HTTP status, else 500
// (also when unset).
func statusOnError(code int) int {
	if code >= 200 && code <= 599 {
		return code
	}
	return 500
}
