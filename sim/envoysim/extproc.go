package envoysim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// direction is the traffic direction a message is about.
type direction int

const (
	dirRequest direction = iota
	dirResponse
)

// msgKind is the kind of a ProcessingRequest / ProcessingResponse.
type msgKind int

const (
	kindRequestHeaders msgKind = iota
	kindResponseHeaders
	kindRequestBody
	kindResponseBody
	kindTrailers
)

// extProcFilter is one ext_proc filter of one stream (ext_proc.cc Filter and
// its decoding/encoding ProcessorState).
type extProcFilter struct {
	cfg *extProcConfig
	s   *stream

	merged          bool
	mode            processingMode
	complete        bool // processing_complete_: nothing more is sent or applied
	st              *procStream
	sentFirst       bool // protocol_config goes on the first message only
	reqHeadersSent  bool // request headers are available to body responses
	respHeadersSent bool // response headers are available to body responses
	// answered: a response came on the stream (no retry after that);
	// lastHost is the host the last stream went to, avoid the hosts a
	// retry must not pick (grpc_service.retry_policy, previous_hosts).
	answered bool
	lastHost string
	avoid    func(addr string) bool
	// grpcInfo is the stream info of the filter's gRPC stream, which its
	// retries share (the override_host filter state of its picks).
	grpcInfo streamInfo
	// reqDuplex is the request direction of a full-duplex exchange whose
	// body is still being answered while the router runs; respHeaders
	// the response headers a full-duplex answer mutates.
	reqDuplex   *duplex
	respHeaders *headerMap
}

// merge applies the per-route configuration once, at the first call
// (Filter::mergePerRouteConfig): it asks for the route, which computes and
// caches it, merges the levels' ExtProcPerRoute and applies the result
// (extproc_route.go): disabled turns both header modes to SKIP and both
// body modes to NONE; overrides replace the mode, the gRPC service and
// the other overridden values for this stream.
func (f *extProcFilter) merge() {
	if f.merged {
		return
	}
	f.merged = true
	mode := f.cfg.mode
	if rt := f.s.route(); rt != nil {
		if pr := rt.perFilter(f.cfg.filterName); pr != nil {
			f.cfg, mode = pr.apply(f.cfg)
		}
	}
	f.mode = modeFromProto(mode)
}

// noResponseProcessing is EncodingProcessorState::noExternalProcess.
func (f *extProcFilter) noResponseProcessing() bool {
	return !f.mode.sendRespHeaders && f.mode.respBody == extprocfilterv3.ProcessingMode_NONE
}

// decode is the filter's decodeHeaders and decodeData: the request_headers
// message (unless SKIP), then with BUFFERED the whole body in one
// request_body message with end_of_stream. It returns a local reply to send,
// or nil to continue.
func (f *extProcFilter) decode(ctx context.Context) *localReply {
	f.merge()
	if f.mode.reqBody == fullDuplex {
		return f.decodeDuplex(ctx)
	}
	s := f.s
	// ProcessorState::shouldRemoveContentLength, evaluated when decodeHeaders returns.
	if !f.complete && f.mode.reqBody == extprocfilterv3.ProcessingMode_BUFFERED && !f.mode.sendReqHeaders {
		s.req.remove("content-length")
	}
	if !f.complete && f.mode.sendReqHeaders {
		if lr := f.processHeaders(ctx, dirRequest, s.req, !s.hasBody); lr != nil {
			return lr
		}
		// closeGrpcStreamIfLastRespReceived for request headers.
		if !f.complete && (!s.hasBody || f.mode.reqBody == extprocfilterv3.ProcessingMode_NONE) && f.noResponseProcessing() {
			f.closeGraceful()
		}
	}
	if !f.complete && f.mode.reqBody == extprocfilterv3.ProcessingMode_BUFFERED && s.hasBody {
		if lr := s.readRequestBody(); lr != nil {
			return lr
		}
		return f.processBody(ctx, dirRequest, s.req, &s.body)
	}
	return nil
}

// encode is the filter's encodeHeaders and encodeData for a response: the
// response_headers message (unless SKIP), then with BUFFERED the whole body.
// A returned local reply is sent directly, bypassing the filters.
func (f *extProcFilter) encode(ctx context.Context, h *headerMap, body *responseBody) *localReply {
	f.merge()
	if f.mode.respBody == fullDuplex {
		return f.encodeDuplex(ctx, h, body)
	}
	if rd := f.reqDuplex; rd != nil {
		if lr := rd.finish(ctx); lr != nil {
			return lr
		}
	}
	if !f.complete && !f.mode.sendRespHeaders && f.mode.respBody == streamed {
		h.remove("content-length") // shouldRemoveContentLength (extproc_streamed.go)
	}
	if !f.complete && f.mode.sendRespHeaders {
		if lr := f.processHeaders(ctx, dirResponse, h, !body.has); lr != nil {
			return lr
		}
		if !f.complete && (!body.has || f.mode.respBody == extprocfilterv3.ProcessingMode_NONE) {
			f.closeGraceful()
		}
	}
	if !f.complete && f.noResponseProcessing() {
		f.closeGraceful()
	}
	if !f.complete && f.mode.respBody == extprocfilterv3.ProcessingMode_BUFFERED && body.has {
		ok, err := body.bufferAll(f.s.lc.bufferLimit)
		if err != nil {
			return &localReply{abort: true}
		}
		if !ok {
			return &localReply{status: http.StatusInternalServerError, body: "Internal Server Error", details: "response_payload_too_large"}
		}
		return f.processBody(ctx, dirResponse, h, &body.buf)
	}
	if !f.complete && f.mode.respBody == streamed && body.has {
		f.streamResponse(body) // configured, or from the headers' mode_override
	}
	return nil
}

// processHeaders sends a headers message and applies the response:
// mode_override first (when allowed), then the header mutation under the
// mutation rules, then, on the request path, clear_route_cache.
func (f *extProcFilter) processHeaders(ctx context.Context, dir direction, h *headerMap, endOfStream bool) *localReply {
	msg := &extprocv3.HttpHeaders{Headers: h.toProto(), EndOfStream: endOfStream}
	req := &extprocv3.ProcessingRequest{}
	want := kindRequestHeaders
	if dir == dirRequest {
		req.Request = &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: msg}
		f.reqHeadersSent = true
	} else {
		req.Request = &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: msg}
		f.respHeadersSent = true
		want = kindResponseHeaders
	}
	removeCL := f.streamedAtHeaders(dir)
	res := f.exchange(ctx, req)
	if removeCL && f.st != nil {
		h.remove("content-length") // when encodeHeaders returns, before the answer
	}
	if res.kind == resResponse {
		if err := f.modeOverride(res.resp); err != nil {
			return f.onError(err.Error())
		}
	}
	lr, common, done := f.dispatch(res, want)
	if done {
		return lr
	}
	if common.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE {
		return f.onError("envoysim: CONTINUE_AND_REPLACE is not modelled")
	}
	if hm := common.GetHeaderMutation(); hm != nil {
		if err := f.applyMutation(h, f.streamedMutation(dir, hm)); err != nil {
			return f.onError(err.Error())
		}
	}
	if dir == dirRequest {
		f.clearRouteCache(common)
	}
	return nil
}

// processBody sends a buffered body with end_of_stream and applies the
// response (ProcessorState::handleBodyResponse, BufferedBodyCallback): the
// header mutation when the headers were sent, then the body mutation, which
// must match a content-length header when there is one; then, on the request
// path, clear_route_cache.
func (f *extProcFilter) processBody(ctx context.Context, dir direction, h *headerMap, body *[]byte) *localReply {
	msg := &extprocv3.HttpBody{Body: *body, EndOfStream: true}
	req := &extprocv3.ProcessingRequest{}
	want := kindRequestBody
	headersAvailable := f.reqHeadersSent
	if dir == dirRequest {
		req.Request = &extprocv3.ProcessingRequest_RequestBody{RequestBody: msg}
	} else {
		req.Request = &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: msg}
		want, headersAvailable = kindResponseBody, f.respHeadersSent
	}
	lr, common, done := f.dispatch(f.exchange(ctx, req), want)
	if done {
		return lr
	}
	if hm := common.GetHeaderMutation(); hm != nil && headersAvailable {
		if err := f.applyMutation(h, hm); err != nil {
			return f.onError(err.Error())
		}
	}
	if bm := common.GetBodyMutation(); bm != nil {
		if cl := contentLength(h); headersAvailable && cl >= 0 && cl != int64(len(bm.GetBody())) {
			return f.onError("mismatch between content length and the length of the mutated body")
		}
		switch m := bm.GetMutation().(type) {
		case *extprocv3.BodyMutation_Body:
			*body = m.Body
		case *extprocv3.BodyMutation_ClearBody:
			if m.ClearBody {
				*body = nil
			}
		}
	}
	if dir == dirRequest {
		f.clearRouteCache(common)
	}
	return nil
}

func (f *extProcFilter) applyMutation(h *headerMap, hm *extprocv3.HeaderMutation) error {
	out, err := f.cfg.checker.applyHeaderMutation(h, hm)
	if out.rejected > 0 {
		f.s.e.stats.extProc(func(s *ExtProcStats) { s.RejectedHeaderMutations += uint64(out.rejected) })
	}
	return err
}

// dispatch sorts a result out: an error, a timeout or a closed stream is
// handled; an immediate_response becomes a local reply; a response of
// another kind than want is spurious. done reports that the caller must
// return lr (nil: continue without applying anything).
func (f *extProcFilter) dispatch(res exchangeResult, want msgKind) (lr *localReply, common *extprocv3.CommonResponse, done bool) {
	switch res.kind {
	case resAborted:
		return &localReply{abort: true}, nil, true
	case resTimeout:
		return f.onTimeout(), nil, true
	case resGRPCError:
		return f.onGRPCError(res.code, res.msg), nil, true
	case resClosed:
		f.onClosed()
		return nil, nil, true
	}
	var got msgKind
	switch r := res.resp.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		if !f.cfg.disableImmediateResponse {
			f.receiveMetadata(res.resp)
		}
		return f.onImmediate(r.ImmediateResponse), nil, true
	case *extprocv3.ProcessingResponse_RequestHeaders:
		got, common = kindRequestHeaders, r.RequestHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		got, common = kindResponseHeaders, r.ResponseHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_RequestBody:
		got, common = kindRequestBody, r.RequestBody.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseBody:
		got, common = kindResponseBody, r.ResponseBody.GetResponse()
	case *extprocv3.ProcessingResponse_RequestTrailers, *extprocv3.ProcessingResponse_ResponseTrailers:
		got = kindTrailers
	default:
		return f.onSpurious("unhandled message"), nil, true
	}
	f.receiveMetadata(res.resp) // before the state check, as onReceiveMessage does
	if got != want {
		return f.onSpurious("spurious message"), nil, true
	}
	f.s.e.stats.extProc(func(s *ExtProcStats) { s.MessagesReceived++ })
	return nil, common, false
}

// modeOverride applies a response's mode_override when allow_mode_override
// is set; it is only called for responses to a headers message, the only
// state in which Envoy honours it (onReceiveMessage, inHeaderProcessState):
// header and trailer modes DEFAULT keep the configured ones, body modes are
// taken as they are (effectiveModeOverride); allowed_override_modes, when
// set, must list the result. An override to a mode envoysim does not model
// (checkModelledMode: STREAMED is modelled for response bodies only, see
// extproc_streamed.go) is an error.
func (f *extProcFilter) modeOverride(resp *extprocv3.ProcessingResponse) error {
	o := resp.GetModeOverride()
	if !f.cfg.allowModeOverride || o == nil {
		return nil
	}
	base := f.cfg.mode
	eff := &extprocfilterv3.ProcessingMode{
		RequestHeaderMode:   pickHeaderMode(o.GetRequestHeaderMode(), base.GetRequestHeaderMode()),
		ResponseHeaderMode:  pickHeaderMode(o.GetResponseHeaderMode(), base.GetResponseHeaderMode()),
		RequestTrailerMode:  pickHeaderMode(o.GetRequestTrailerMode(), base.GetRequestTrailerMode()),
		ResponseTrailerMode: pickHeaderMode(o.GetResponseTrailerMode(), base.GetResponseTrailerMode()),
		RequestBodyMode:     o.GetRequestBodyMode(),
		ResponseBodyMode:    o.GetResponseBodyMode(),
	}
	if allowed := f.cfg.allowedOverrideModes; len(allowed) > 0 && !slices.ContainsFunc(allowed, func(a *extprocfilterv3.ProcessingMode) bool {
		return a.GetRequestBodyMode() == eff.GetRequestBodyMode() && a.GetRequestTrailerMode() == eff.GetRequestTrailerMode() &&
			a.GetResponseHeaderMode() == eff.GetResponseHeaderMode() && a.GetResponseBodyMode() == eff.GetResponseBodyMode() &&
			a.GetResponseTrailerMode() == eff.GetResponseTrailerMode()
	}) {
		f.s.e.log.Debug("ext_proc mode_override not in allowed_override_modes; ignored")
		return nil
	}
	err := checkModelledMode(eff)
	if eff.GetRequestBodyMode() == fullDuplex || eff.GetResponseBodyMode() == fullDuplex {
		err = errors.Join(err, errors.New("a mode_override to FULL_DUPLEX_STREAMED is not modelled"))
	}
	if err != nil {
		f.s.e.stats.extProc(func(s *ExtProcStats) { s.UnsupportedModeOverride++ })
		f.s.e.log.Error("ext_proc mode_override requests a mode envoysim does not model", "error", err)
		return fmt.Errorf("envoysim: mode_override not modelled: %w", err)
	}
	f.mode = modeFromProto(eff)
	return nil
}

func pickHeaderMode(override, base extprocfilterv3.ProcessingMode_HeaderSendMode) extprocfilterv3.ProcessingMode_HeaderSendMode {
	if override == extprocfilterv3.ProcessingMode_DEFAULT {
		return base
	}
	return override
}

// clearRouteCache is DecodingProcessorState::clearRouteCache: without a
// header_mutation (presence, even empty) nothing happens; DEFAULT clears when
// the response asks, CLEAR always, RETAIN never.
func (f *extProcFilter) clearRouteCache(common *extprocv3.CommonResponse) {
	asked := common.GetClearRouteCache()
	stats := f.s.e.stats
	if common.GetHeaderMutation() == nil {
		if asked {
			stats.extProc(func(s *ExtProcStats) { s.ClearRouteCacheIgnored++ })
		}
		return
	}
	switch f.cfg.routeCacheAction {
	case extprocfilterv3.ExternalProcessor_CLEAR:
		f.s.clearRouteCache()
		stats.extProc(func(s *ExtProcStats) { s.ClearRouteCache++ })
	case extprocfilterv3.ExternalProcessor_RETAIN:
		if asked {
			stats.extProc(func(s *ExtProcStats) { s.ClearRouteCacheDisabled++ })
		}
	default:
		if asked {
			f.s.clearRouteCache()
			stats.extProc(func(s *ExtProcStats) { s.ClearRouteCache++ })
		}
	}
}
