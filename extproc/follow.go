package extproc

import (
	"strings"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"

	"github.com/ilbproject/ilb/decision"
)

// Following a response: demand that follows what the engines generate.
//
// A request counts as demand in two parts. At the decision, its
// provisional share: its estimate, but never more than a typical request
// of its stream (Server.provisional, demand.Limits). The rest of its claim — a large
// max_tokens, a long prompt — counts only as an engine serves it: when
// the engine accepted the request (2xx response headers with a body),
// ILB follows the response body as it streams back through Envoy (a
// mode_override to STREAMED on ILB's own listener; the body already
// flows through ILB in a full-duplex picker exchange), counting the
// documents an engine sends (one server-sent event per token) or the
// bytes of a JSON body, and reading the engine's usage object when it
// sends one (a request of a tenant with a token budget is followed to its
// end, whatever its estimate: the budget counts what the engine
// reported). What is booked is then
//
//	prompt × prompt cost + generated tokens × output cost,
//
// with the usage's counts when present, kept between the provisional
// share and the estimate. A stream the client abandons after its first
// event adds what the engine did for it — for a short prompt, nothing
// past its provisional share. A response is followed until its end, or
// until its whole estimate is booked (ILB then closes the stream and the
// rest of the body flows without it), by at most
// extproc.max_followed_streams streams at once: past that, a request
// keeps its provisional share only.

// following is the state of a followed response.
type following struct {
	scan docScanner
	sse  bool  // text/event-stream: one document per event, one token each
	body int64 // bytes seen
	// duplex: the body flows through ILB (full-duplex picker exchange),
	// which must echo it to its end.
	duplex bool
	// first: followed only to its first event (the first token), nothing
	// of its estimate left to book; firstSeen: that event came.
	first, firstSeen bool
}

// Outcomes of ilb_extproc_followed_responses_total.
const (
	followComplete   = "complete"    // the body's end came through ILB
	followConfirmed  = "confirmed"   // the whole estimate was generated: ILB stopped following
	followEnded      = "ended"       // the stream ended before the body's end: the client went away, or Envoy stopped
	followUnfollowed = "unfollowed"  // over extproc.max_followed_streams: provisional share only
	followFirst      = "first_event" // followed to its first event only (the first token): nothing left to book
)

// generated is the output tokens the response shows so far: the usage's
// completion tokens, else one per server-sent event, else a token per 4
// bytes of body.
func (f *following) generated() (tokens float64, from string) {
	switch {
	case f.scan.usage.ok:
		return float64(f.scan.usage.completion), "usage"
	case f.sse:
		return float64(f.scan.docs), "events"
	}
	return float64(f.body) / 4, "bytes"
}

// follow starts following x's response, whose headers said status code
// and content type, and returns the mode_override Envoy needs (nil: none,
// or not following). It runs on the response headers of a request ILB
// decided, whose rest of estimate (x.unconfirmed) is still unbooked.
func (s *Server) follow(x *exchange, code int, contentType string, endOfStream bool) *extprocfilterv3.ProcessingMode {
	switch {
	case x.rec == nil || x.done:
		return nil
	case x.unconfirmed <= 0 && x.budget == nil:
		if code >= 200 && code <= 299 && x.metered() {
			s.typical.Observe(x.key, x.cost) // booked whole at the decision
		}
		return s.followFirst(x, code, contentType, endOfStream)
	case code < 200 || code > 299 || endOfStream:
		// Refused upstream, or nothing generated: the provisional share
		// stays, the rest is never booked.
		x.unconfirmed = 0
		return nil
	}
	if int(s.followed.Add(1)) > s.opts.Config.ExtProc.FollowedStreamLimit() {
		s.followed.Add(-1)
		s.metrics.followed.WithLabelValues(x.source, followUnfollowed).Inc()
		s.metrics.unserved.WithLabelValues(x.source).Add(x.unconfirmed)
		x.unconfirmed, x.unfollowed = 0, true
		return nil
	}
	s.metrics.following.Inc()
	mt, _, _ := strings.Cut(contentType, ";")
	x.follow = &following{sse: strings.EqualFold(strings.TrimSpace(mt), "text/event-stream"), duplex: x.duplexResp}
	if x.duplexResp {
		return nil // the body comes anyway
	}
	return followMode
}

// followFirst follows x's response, nothing of whose estimate is left to
// book, to its first event: an event stream's first token, which its
// headers do not mark (onResponseHeaders). It ends the request's wait
// for its first token there (answered) and calibrates its cluster's
// predictions (firstEvent); it counts against
// extproc.max_followed_streams, and past that the wait ends at the
// headers. nil when not following.
func (s *Server) followFirst(x *exchange, code int, contentType string, endOfStream bool) *extprocfilterv3.ProcessingMode {
	mt, _, _ := strings.Cut(contentType, ";")
	if code < 200 || code > 299 || endOfStream || x.awaitingOn == nil || !strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
		return nil
	}
	if int(s.followed.Add(1)) > s.opts.Config.ExtProc.FollowedStreamLimit() {
		s.followed.Add(-1)
		return nil
	}
	s.metrics.following.Inc()
	x.follow = &following{sse: true, duplex: x.duplexResp, first: true}
	if x.duplexResp {
		return nil // the body comes anyway
	}
	return followMode
}

// followMode is the processing mode of a followed response on ILB's own
// listener: the configured one (envoy.ExtProc) with the response body
// STREAMED to ILB.
var followMode = &extprocfilterv3.ProcessingMode{
	RequestHeaderMode:   extprocfilterv3.ProcessingMode_SEND,
	ResponseHeaderMode:  extprocfilterv3.ProcessingMode_SEND,
	RequestBodyMode:     extprocfilterv3.ProcessingMode_BUFFERED,
	ResponseBodyMode:    extprocfilterv3.ProcessingMode_STREAMED,
	RequestTrailerMode:  extprocfilterv3.ProcessingMode_SKIP,
	ResponseTrailerMode: extprocfilterv3.ProcessingMode_SKIP,
}

// onFollowedBody reads a chunk of a followed response and books what it
// shows. It returns true when ILB has booked the whole estimate and may
// stop following (never in a full-duplex exchange, which echoes the body).
func (s *Server) onFollowedBody(x *exchange, body []byte, end bool) (stop bool) {
	f := x.follow
	if f == nil {
		return false
	}
	f.body += int64(len(body))
	f.scan.feed(body)
	if f.sse && !f.firstSeen && (f.scan.docs > 0 || end) {
		f.firstSeen = true
		s.firstEvent(x)
		s.answered(x)
	}
	if f.first {
		if f.firstSeen {
			s.endFollow(x, followFirst)
			return !f.duplex
		}
		return false
	}
	if end {
		s.settle(x, followComplete)
		return false
	}
	s.book(x, false)
	if x.unconfirmed <= 0 && !f.duplex && x.budget == nil {
		// A budgeted request is followed to its end: its tenant's
		// budget counts what the engine reports.
		s.settle(x, followConfirmed)
		return true
	}
	return false
}

// book adds to the demand what x's response shows past what is booked:
// in steps of at least a sixteenth of the claim (a short critical
// section per step, not per token), all of it when final. Booking never
// goes back (a report interval already sent cannot be taken back): a
// step booked on the events with ILB's prompt estimate stays when the
// engine's usage later counts the prompt lower.
func (s *Server) book(x *exchange, final bool) {
	f, lim := x.follow, x.st.limits[x.key.Model]
	prompt := x.prompt
	tokens, _ := f.generated()
	if f.scan.usage.ok {
		prompt = float64(f.scan.usage.prompt)
	}
	if tokens <= 0 && f.body == 0 {
		return // the engine sent nothing yet
	}
	booked := x.cost - x.unconfirmed
	target := lim.Served(x.cost, booked, prompt, tokens)
	extra := target - booked
	if extra <= 0 || !final && extra < x.claim/16 && target < x.cost {
		return
	}
	x.unconfirmed -= extra
	if s.opts.Meter != nil {
		s.opts.Meter.AddCost(x.key, extra)
	}
}

// endFollow stops following x's response (outcome: why).
func (s *Server) endFollow(x *exchange, outcome string) {
	x.follow = nil
	s.followed.Add(-1)
	s.metrics.following.Dec()
	s.metrics.followed.WithLabelValues(x.source, outcome).Inc()
}

// settle books what x's followed response showed, records it and stops
// following. It runs once: at the body's end, when the whole estimate is
// booked, or as the stream ends (outcome followEnded). A response
// followed only to its first event books and records nothing.
func (s *Server) settle(x *exchange, outcome string) {
	f := x.follow
	if f == nil {
		x.unconfirmed = 0
		return
	}
	if f.first {
		s.endFollow(x, outcome)
		return
	}
	s.book(x, true)
	s.endFollow(x, outcome)
	if x.unconfirmed > 0 {
		s.metrics.unserved.WithLabelValues(x.source).Add(x.unconfirmed)
	}
	tokens, from := f.generated()
	booked := x.cost - x.unconfirmed
	x.unconfirmed = 0
	s.typical.Observe(x.key, booked)
	x.rec = s.log.Update(x.rec, func(r *decision.Record) {
		r.DemandBooked = booked
		r.Generated = &decision.Generated{Tokens: int64(tokens), From: from, Outcome: outcome}
		if f.scan.usage.ok {
			r.Generated.PromptTokens = f.scan.usage.prompt
		}
	})
}
