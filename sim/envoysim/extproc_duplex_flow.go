package envoysim

import (
	"bytes"
	"context"
	"io"
)

// decodeDuplex is decodeHeaders and decodeData with a FULL_DUPLEX_STREAMED
// request body (see extproc_duplex.go). It returns a local reply, or nil
// to go on: with the request body buffered (s.body) when the headers
// waited for the body's answers, or streamed through s.duplexBody.
func (f *extProcFilter) decodeDuplex(ctx context.Context) *localReply {
	s := f.s
	d := &duplex{f: f, dir: dirRequest, main: true}
	if s.hasBody {
		d.pieces = readPieces(s.requestBodySource(), func() bool { return hasTrailers(s.r.Trailer) }, ctx.Done())
	}
	if f.mode.sendReqHeaders {
		if lr := d.sendHeaders(ctx, s.req, !s.hasBody); lr != nil {
			return lr
		}
	}
	if !f.complete {
		s.req.remove("content-length") // shouldRemoveContentLength
	}
	if lr := d.await(ctx, func() bool { return !d.awaitHead }); lr != nil {
		return lr
	}
	if !s.hasBody {
		if !f.complete && f.noResponseProcessing() {
			f.closeGraceful()
		}
		return nil
	}
	if d.sentEOS && !f.complete {
		// The whole body came before the headers' answer: the headers
		// wait for the body's answers (StreamedBodyCallback).
		if lr := d.await(ctx, func() bool { return d.recvEOS }); lr != nil {
			return lr
		}
		// What was answered (all of it, unless processing ended early).
		s.body, s.buffered, s.duplexBody = d.pending, true, nil
		d.pending = nil
		return nil
	}
	// The headers go on now; the body follows as it is answered, read by
	// the router's body pump (or the next filter).
	d.main = false
	s.duplexBody = d
	f.reqDuplex = d
	return nil
}

// encodeDuplex is encodeHeaders and encodeData with a FULL_DUPLEX_STREAMED
// response body: body.r becomes what the processor sends back, streamed
// downstream as its answers come (or buffered when the whole body came
// before the headers' answer).
func (f *extProcFilter) encodeDuplex(ctx context.Context, h *headerMap, body *responseBody) *localReply {
	if rd := f.reqDuplex; rd != nil {
		// The response started before the request body was answered
		// to its end: finish that exchange first.
		if lr := rd.finish(ctx); lr != nil {
			return lr
		}
	}
	if f.complete {
		return nil
	}
	d := &duplex{f: f, dir: dirResponse, main: true}
	f.respHeaders = h
	if body.has {
		src := body.r
		if body.buffered {
			src = bytes.NewReader(body.buf)
		}
		trailers := body.trailers
		if trailers == nil {
			trailers = func() bool { return false }
		}
		d.pieces = readPieces(src, trailers, ctx.Done())
	}
	if f.mode.sendRespHeaders {
		if lr := d.sendHeaders(ctx, h, !body.has); lr != nil {
			return lr
		}
	}
	if !f.complete {
		h.remove("content-length")
	}
	if lr := d.await(ctx, func() bool { return !d.awaitHead }); lr != nil {
		return lr
	}
	if !body.has {
		if !f.complete {
			f.closeGraceful()
		}
		return nil
	}
	if d.sentEOS && !f.complete {
		if lr := d.await(ctx, func() bool { return d.recvEOS }); lr != nil {
			return lr
		}
		if d.recvEOS {
			body.buf, body.buffered, body.r = d.pending, true, nil
			return nil
		}
	}
	body.buffered, body.buf, body.r = false, nil, d
	return nil
}

// requestBodySource is the request body as the filters so far left it:
// buffered, streamed from a full-duplex exchange, or the downstream's.
func (s *stream) requestBodySource() io.Reader {
	switch {
	case s.buffered:
		return bytes.NewReader(s.body)
	case s.duplexBody != nil:
		return s.duplexBody
	}
	return s.r.Body
}
