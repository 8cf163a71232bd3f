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
// headers are sent unless SKIP, trailers only when SEND, bodies per their
// BodySendMode.
type processingMode struct {
	sendReqHeaders   bool
	sendRespHeaders  bool
	sendReqTrailers  bool
	sendRespTrailers bool
	reqBody          extprocfilterv3.ProcessingMode_BodySendMode
	respBody         extprocfilterv3.ProcessingMode_BodySendMode
}

func modeFromProto(m *extprocfilterv3.ProcessingMode) processingMode {
	return processingMode{
		sendReqHeaders:   m.GetRequestHeaderMode() != extprocfilterv3.ProcessingMode_SKIP,
		sendRespHeaders:  m.GetResponseHeaderMode() != extprocfilterv3.ProcessingMode_SKIP,
		sendReqTrailers:  m.GetRequestTrailerMode() == extprocfilterv3.ProcessingMode_SEND,
		sendRespTrailers: m.GetResponseTrailerMode() == extprocfilterv3.ProcessingMode_SEND,
		reqBody:          m.GetRequestBodyMode(),
		respBody:         m.GetResponseBodyMode(),
	}
}

const fullDuplex = extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED

// checkModelledMode reports the parts of m envoysim does not model: body
// mode BUFFERED_PARTIAL, STREAMED request bodies (STREAMED response bodies
// are modelled, see extproc_streamed.go), and trailer mode SEND in a
// direction whose body mode is not FULL_DUPLEX_STREAMED (trailers are
// modelled with full-duplex bodies only, see extproc_duplex.go).
func checkModelledMode(m *extprocfilterv3.ProcessingMode) error {
	var errs []error
	for _, d := range []struct {
		body, trailer string
		mode          extprocfilterv3.ProcessingMode_BodySendMode
		trailers      extprocfilterv3.ProcessingMode_HeaderSendMode
	}{
		{"request_body_mode", "request_trailer_mode", m.GetRequestBodyMode(), m.GetRequestTrailerMode()},
		{"response_body_mode", "response_trailer_mode", m.GetResponseBodyMode(), m.GetResponseTrailerMode()},
	} {
		switch {
		case d.mode == extprocfilterv3.ProcessingMode_NONE, d.mode == extprocfilterv3.ProcessingMode_BUFFERED, d.mode == fullDuplex:
		case d.mode == streamed && d.body == "response_body_mode":
		default:
			errs = append(errs, fmt.Errorf("%s %s is not supported by envoysim (NONE, BUFFERED, FULL_DUPLEX_STREAMED; STREAMED for response bodies only)", d.body, d.mode))
		}
		if d.trailers == extprocfilterv3.ProcessingMode_SEND && d.mode != fullDuplex {
			errs = append(errs, fmt.Errorf("%s SEND is supported by envoysim with %s FULL_DUPLEX_STREAMED only", d.trailer, d.body))
		}
	}
	return errors.Join(errs...)
}

// verifyProcessingMode is config.cc verifyProcessingModeConfig, which
// Envoy applies to the filter's own configuration (not to per-route
// overrides): a FULL_DUPLEX_STREAMED body needs its direction's trailer
// mode SEND, and fail-open is refused with either body in that mode.
func verifyProcessingMode(m *extprocfilterv3.ProcessingMode, failOpen bool) error {
	var errs []error
	if m.GetRequestBodyMode() == fullDuplex && m.GetRequestTrailerMode() != extprocfilterv3.ProcessingMode_SEND {
		errs = append(errs, errors.New("request_body_mode FULL_DUPLEX_STREAMED needs request_trailer_mode SEND (Envoy refuses it)"))
	}
	if m.GetResponseBodyMode() == fullDuplex && m.GetResponseTrailerMode() != extprocfilterv3.ProcessingMode_SEND {
		errs = append(errs, errors.New("response_body_mode FULL_DUPLEX_STREAMED needs response_trailer_mode SEND (Envoy refuses it)"))
	}
	if (m.GetRequestBodyMode() == fullDuplex || m.GetResponseBodyMode() == fullDuplex) && failOpen {
		errs = append(errs, errors.New("failure_mode_allow must be false with a FULL_DUPLEX_STREAMED body (Envoy refuses it)"))
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
	if err := errors.Join(checkModelledMode(cfg.mode), verifyProcessingMode(cfg.mode, cfg.failOpen)); err != nil {
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
