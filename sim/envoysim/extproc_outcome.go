package envoysim

import (
	"fmt"
	"net/http"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
)

// onError is Filter::handleErrorResponse: processing ends, the stream is
// reset and a local reply with status_on_error and an empty body is sent,
// whatever failure_mode_allow says.
func (f *extProcFilter) onError(msg string) *localReply {
	f.closeStream()
	return &localReply{status: f.cfg.statusOnError, details: replaceSpaces(msg)}
}

// onSpurious handles a message of an unexpected kind: ignored with the rest
// of the stream when failure_mode_allow, else an error response.
func (f *extProcFilter) onSpurious(msg string) *localReply {
	stats := f.s.e.stats
	stats.extProc(func(s *ExtProcStats) { s.SpuriousMessages++ })
	if f.cfg.failOpen {
		stats.extProc(func(s *ExtProcStats) { s.FailureModeAllowed++ })
		f.closeStream()
		return nil
	}
	return f.onError(msg)
}

// onTimeout is Filter::onMessageTimeout: continue unmodified when
// failure_mode_allow, else a 504 (not status_on_error) with an empty body.
func (f *extProcFilter) onTimeout() *localReply {
	stats := f.s.e.stats
	stats.extProc(func(s *ExtProcStats) { s.MessageTimeouts++ })
	f.closeStream()
	if f.cfg.failOpen {
		stats.extProc(func(s *ExtProcStats) { s.FailureModeAllowed++ })
		return nil
	}
	return &localReply{status: http.StatusGatewayTimeout, details: "ext_proc_error_per-message_timeout_exceeded"}
}

// onGRPCError is Filter::onGrpcError: continue unmodified when
// failure_mode_allow, else status_on_error with an empty body.
func (f *extProcFilter) onGRPCError(code codes.Code, msg string) *localReply {
	stats := f.s.e.stats
	stats.extProc(func(s *ExtProcStats) { s.StreamsFailed++ })
	f.closeStream()
	if f.cfg.failOpen {
		stats.extProc(func(s *ExtProcStats) { s.FailureModeAllowed++ })
		return nil
	}
	return &localReply{status: f.cfg.statusOnError, details: fmt.Sprintf("ext_proc_error_gRPC_error_%d{%s}", int(code), replaceSpaces(msg))}
}

// onClosed is Filter::onGrpcClose: the server ended the stream with OK;
// processing is complete and the request continues.
func (f *extProcFilter) onClosed() {
	f.closeStream()
}

// onImmediate turns an ImmediateResponse into a local reply
// (Filter::sendImmediateResponse): status 200 when unset or below 200, the
// header mutation applied under the mutation rules with failures only
// logged, the body, the details.
func (f *extProcFilter) onImmediate(ir *extprocv3.ImmediateResponse) *localReply {
	if f.cfg.disableImmediateResponse {
		return f.onSpurious("unhandled immediate response due to config disabled it")
	}
	stats := f.s.e.stats
	stats.extProc(func(s *ExtProcStats) { s.ImmediateResponses++; s.MessagesReceived++ })
	f.closeGraceful()
	status := http.StatusOK
	if ir.GetStatus() != nil {
		status = int(ir.GetStatus().GetCode())
	}
	if status < 200 || status > 999 {
		status = http.StatusOK
	}
	lr := &localReply{status: status, body: string(ir.GetBody()), details: replaceSpaces(ir.GetDetails())}
	if hm := ir.GetHeaders(); hm != nil {
		lr.modify = func(h *headerMap) {
			if err := f.applyMutation(h, hm); err != nil {
				f.s.e.log.Error("immediate response mutations failed", "error", err)
			}
		}
	}
	return lr
}

// replaceSpaces is StringUtil::replaceAllEmptySpace.
func replaceSpaces(s string) string {
	return strings.Map(func(r rune) rune {
		if strings.ContainsRune(" \t\f\v\n\r", r) {
			return '_'
		}
		return r
	}, s)
}
