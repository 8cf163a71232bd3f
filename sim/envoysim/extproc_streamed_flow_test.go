package envoysim

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestStreamedSSE: server-sent events under ILB's override reach the
// client one by one as the upstream produces them: the upstream writes
// event i+1 only once the client has read event i. The processor gets
// each event as a frame of its own, then the empty end frame.
func TestStreamedSSE(t *testing.T) {
	const events = 4
	read := make([]chan struct{}, events)
	for i := range read {
		read[i] = make(chan struct{})
	}
	event := func(i int) string { return fmt.Sprintf("data: {\"token\":%d}\n\n", i) }
	proc := newChunkProc(true, events)
	h := streamedHarness(t, proc.handle, &extprocfilterv3.ExternalProcessor{ProcessingMode: ilbMode(), AllowModeOverride: true}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/event-stream")
		for i := range events {
			_, _ = io.WriteString(w, event(i))
			w.(http.Flusher).Flush()
			select {
			case <-read[i]:
			case <-r.Context().Done():
				return
			case <-time.After(failureBound):
				return
			}
		}
	})
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: failureBound}
	resp, err := client.Get(h.url("main", "/v1/chat/completions"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	var want []frame
	for i := range events {
		line, err := rd.ReadString('\n')
		blank, err2 := rd.ReadString('\n')
		if err != nil || err2 != nil || line+blank != event(i) {
			t.Fatalf("event %d: %q %q (%v, %v)", i, line, blank, err, err2)
		}
		close(read[i])
		want = append(want, frame{event(i), false})
	}
	if rest, err := io.ReadAll(rd); err != nil || len(rest) != 0 {
		t.Fatalf("after the events: %q, %v", rest, err)
	}
	if frames := responseFrames(h.proc); !equalFrames(frames, append(want, frame{"", true})) {
		t.Errorf("processor got frames %+v", frames)
	}
}

// TestStreamedContentLength: shouldRemoveContentLength is evaluated when
// encodeHeaders returns. A configured STREAMED body removes the upstream's
// content-length (after the headers message, which still shows it); a
// mode_override to STREAMED in the headers' answer comes too late and it
// stays, while a content-length the answer sets is skipped. Whatever the
// reads, the frames add up to the body, only the last (empty, after an
// HTTP/1 upstream) ending it.
func TestStreamedContentLength(t *testing.T) {
	const body = "a complete answer of a known length"
	cl := strconv.Itoa(len(body))
	for _, c := range []struct {
		name     string
		mode     *extprocfilterv3.ProcessingMode
		override bool
		clientCL string // the client's content-length
		procCL   bool   // the response headers message has content-length
	}{
		{name: "override at response headers keeps it", mode: ilbMode(), override: true, clientCL: cl, procCL: true},
		{name: "configured STREAMED removes it", mode: &extprocfilterv3.ProcessingMode{ResponseBodyMode: streamed}, procCL: true},
		{name: "configured STREAMED with headers skipped removes it", mode: &extprocfilterv3.ProcessingMode{
			ResponseHeaderMode: extprocfilterv3.ProcessingMode_SKIP, ResponseBodyMode: streamed,
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// With a content-length the client may have the whole body
			// before the end frame went: wait for it.
			ended := make(chan struct{})
			proc := func(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
				if req.GetResponseBody().GetEndOfStream() {
					close(ended)
				}
				if req.GetResponseHeaders() == nil {
					return continueAll(ctx, req)
				}
				r := respond(req, &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
					setHeader("content-length", "999"), setHeader("x-seen", "yes"),
				}}})
				if c.override {
					r.ModeOverride = ilbOverride()
				}
				return []*extprocv3.ProcessingResponse{r}, nil
			}
			h := streamedHarness(t, proc, &extprocfilterv3.ExternalProcessor{ProcessingMode: c.mode, AllowModeOverride: c.override}, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("content-length", cl)
				_, _ = io.WriteString(w, body)
			})
			got := fetch(t, h.url("main", "/"))
			if got.status != 200 || got.body != body || got.err != nil || got.header.Get("content-length") != c.clientCL {
				t.Fatalf("client got %d %q (%v) content-length %q, want %q", got.status, got.body, got.err, got.header.Get("content-length"), c.clientCL)
			}
			if got.header.Get("x-seen") != "yes" && c.mode.GetResponseHeaderMode() != extprocfilterv3.ProcessingMode_SKIP {
				t.Error("the headers' answer was not applied")
			}
			sawCL := false
			for _, r := range h.proc.requests() {
				if rh := r.GetResponseHeaders(); rh != nil {
					_, sawCL = protoHeader(rh.GetHeaders(), "content-length")
				}
			}
			if sawCL != c.procCL {
				t.Errorf("response headers message had content-length: %v, want %v", sawCL, c.procCL)
			}
			waitClosed(t, "the end_of_stream frame", ended)
			frames := responseFrames(h.proc)
			var joined strings.Builder
			for i, f := range frames {
				joined.WriteString(f.body)
				if f.eos != (i == len(frames)-1) {
					t.Errorf("frame %d of %d has end_of_stream %v", i, len(frames), f.eos)
				}
			}
			if len(frames) < 2 || frames[len(frames)-1].body != "" || joined.String() != body {
				t.Errorf("frames %+v, want the body then an empty end frame", frames)
			}
		})
	}
}

// TestStreamedTrailers: when trailers follow the body, no frame ends the
// stream and (trailer mode SKIP) no trailers message goes; with no last
// answer the ext_proc stream stays open until the filter is destroyed.
func TestStreamedTrailers(t *testing.T) {
	parts := []string{"alpha ", "beta ", "gamma"}
	proc := newChunkProc(true, len(parts))
	paced := pacedUpstream(parts, proc.arrived, len(parts))
	h := streamedHarness(t, proc.handle, &extprocfilterv3.ExternalProcessor{ProcessingMode: ilbMode(), AllowModeOverride: true}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("trailer", "x-checksum")
		paced(w, r)
		w.Header().Set("x-checksum", "abc")
	})
	got := fetch(t, h.url("main", "/"))
	if got.status != 200 || got.body != "alpha beta gamma" || got.err != nil {
		t.Fatalf("client got %d %q (%v)", got.status, got.body, got.err)
	}
	want := []frame{{"alpha ", false}, {"beta ", false}, {"gamma", false}}
	if frames := responseFrames(h.proc); !equalFrames(frames, want) {
		t.Errorf("processor got frames %+v, want %+v", frames, want)
	}
	for _, r := range h.proc.requests() {
		if r.GetResponseTrailers() != nil {
			t.Error("a trailers message was sent under trailer mode SKIP")
		}
	}
	waitClosed(t, "the ext_proc stream to end", proc.ended)
	if st := h.env.Stats().ExtProc; st.StreamsClosed != 0 || st.MessagesSent != 5 {
		t.Errorf("stats %+v, want 5 messages and no close after a last answer", st)
	}
}

// TestStreamedClientGone: a client that goes away mid-body destroys the
// filter, which resets its ext_proc stream: the processor sees its stream
// end and gets no more frames.
func TestStreamedClientGone(t *testing.T) {
	proc := newChunkProc(true, 1)
	upstreamDone := make(chan struct{})
	h := streamedHarness(t, proc.handle, &extprocfilterv3.ExternalProcessor{ProcessingMode: ilbMode(), AllowModeOverride: true}, func(w http.ResponseWriter, r *http.Request) {
		defer close(upstreamDone)
		_, _ = io.WriteString(w, "first token ")
		w.(http.Flusher).Flush()
		select { // more tokens would follow; envoysim cancels this request
		case <-r.Context().Done():
		case <-time.After(failureBound):
		}
	})
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: failureBound}
	resp, err := client.Get(h.url("main", "/v1/completions"))
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, len("first token "))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first token " {
		t.Fatalf("first frame %q, %v", first, err)
	}
	resp.Body.Close() // the client goes away
	waitClosed(t, "the ext_proc stream to end", proc.ended)
	waitClosed(t, "the upstream request to end", upstreamDone)
	if frames := responseFrames(h.proc); !equalFrames(frames, []frame{{"first token ", false}}) {
		t.Errorf("processor got frames %+v", frames)
	}
}

// TestStreamedLocalReply: a local reply's body goes through a STREAMED
// filter as one frame with end_of_stream (the filter manager encodes it in
// one piece), its content-length removed; failing closed on that frame
// cuts the reply after its headers.
func TestStreamedLocalReply(t *testing.T) {
	for _, c := range []struct {
		name    string
		handler procHandler
		body    string
		cut     bool
	}{
		{name: "CONTINUE", body: bodyNoHealthyUpstream},
		{name: "gRPC error failing closed", cut: true, handler: func(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
			if req.GetResponseBody() != nil {
				return nil, status.Error(codes.Internal, "processor failed")
			}
			return continueAll(ctx, req)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.handler)
			h.push(staticCluster("empty", false),
				httpListener("main", "routes", extProc("ilb", &extprocfilterv3.ExternalProcessor{ProcessingMode: &extprocfilterv3.ProcessingMode{ResponseBodyMode: streamed}})),
				routeConfig("routes", vhost("all", []string{"*"}, routeTo("empty"))))
			h.start(nil)
			got := fetch(t, h.url("main", "/"))
			if got.status != 503 || got.body != c.body || (got.err != nil) != c.cut || got.header.Get("content-length") != "" {
				t.Fatalf("client got %d %q (%v) content-length %q", got.status, got.body, got.err, got.header.Get("content-length"))
			}
			if frames := responseFrames(h.proc); !equalFrames(frames, []frame{{bodyNoHealthyUpstream, true}}) {
				t.Errorf("processor got frames %+v", frames)
			}
		})
	}
}

// TestStreamedRequestBodyRefused: STREAMED request bodies are not modelled:
// a mode_override asking for one is an error (status_on_error), counted.
func TestStreamedRequestBodyRefused(t *testing.T) {
	proc := func(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		r := respond(req, &extprocv3.CommonResponse{})
		if req.GetRequestHeaders() != nil {
			r.ModeOverride = &extprocfilterv3.ProcessingMode{RequestBodyMode: streamed}
		}
		return []*extprocv3.ProcessingResponse{r}, nil
	}
	h := streamedHarness(t, proc, &extprocfilterv3.ExternalProcessor{ProcessingMode: ilbMode(), AllowModeOverride: true}, nil)
	if resp := do(t, "POST", h.url("main", "/"), nil, "prompt"); resp.status != 500 {
		t.Errorf("status %d, want status_on_error 500", resp.status)
	}
	if st := h.env.Stats().ExtProc; st.UnsupportedModeOverride != 1 {
		t.Errorf("stats %+v", st)
	}
}
