package extproc

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/internal/bound"
)

// onResponseHeaders takes the response headers: its record takes the
// status and the cluster and host that served it (or, when Envoy
// answered before ILB decided, the whole local reply), following its
// body when it reports usage or streams its first token; a debug request
// gets its decision header. The request no longer awaits its first token
// (answered) — unless its body is a followed event stream: vLLM and
// SGLang send a streaming response's headers as it starts, before the
// first token, which comes with the first event (firstEvent).
func (s *Server) onResponseHeaders(x *exchange, m *extprocv3.HttpHeaders, md *corev3.Metadata) *extprocv3.ProcessingResponse {
	defer func() {
		if x.follow == nil || !x.follow.sse {
			s.answered(x)
		}
	}()
	x.responded = true
	var hs [len(responseHeaders)]string
	pickHeaders(m.GetHeaders(), responseHeaders[:], hs[:])
	code, _ := strconv.Atoi(hs[0])
	var mode *extprocfilterv3.ProcessingMode
	if x.rec != nil && !x.done && x.rec.Chosen == "" && x.rec.Reason == "" {
		// Envoy answered before ILB decided (its response runs through
		// the filter chain): a body over its buffer limit, a timeout.
		// The client got that answer: record it so it can be explained.
		r := x.rec
		r.Reason, r.Status, r.Complete = reasonLocalReply, code, true
		r.TotalMillis = float64(s.opts.Now().Sub(r.Start).Microseconds()) / 1000
		s.log.Add(r)
		s.spanServed(x)
		return stripReport
	}
	if x.rec != nil && !x.done {
		mode = s.follow(x, code, hs[4], m.GetEndOfStream())
		x.rec = s.log.Update(x.rec, func(r *decision.Record) {
			if x.unfollowed {
				r.Generated = &decision.Generated{From: "none", Outcome: followUnfollowed}
			}
			r.Status = code
			r.ServedCluster = bound.String(hs[1], bound.Name)
			r.ServedVersion = bound.String(hs[2], bound.Name)
			r.UpstreamHost = bound.String(hs[3], bound.Name)
			if r.UpstreamHost == "" { // the override_host policy's selected_host_key, when forwarded
				r.UpstreamHost = bound.String(servedHost(md), bound.Name)
			}
			r.Mismatch = r.Chosen != "" && r.ServedCluster != r.Chosen
			if r.Replica != nil && r.Replica.Chosen != "" {
				r.Replica = x.pick.copyOf(r.Replica) // records are copied on write
				s.replicaServed(r)
			}
			r.TotalMillis = float64(s.opts.Now().Sub(r.Start).Microseconds()) / 1000
			r.Complete = true
		})
		if x.rec.Mismatch {
			s.mismatchCounter(x).Inc()
		}
		s.spanServed(x)
	}
	switch {
	case (!x.debug || x.rec == nil) && mode == nil:
		return stripReport
	case !x.debug || x.rec == nil:
		return stripReportFollow
	}
	mut := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setRaw(header.Decision, decisionHeader(x.rec))}}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: mut}},
	}, ModeOverride: mode}
}
