package envoysim

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// failureBound bounds every wait of these tests: it only turns a hang
// into a failure.
const failureBound = time.Minute

// ilbMode is the processing mode ILB configures: headers SEND, trailers
// SKIP, bodies NONE (the response body is turned to STREAMED by a
// mode_override in the answer to the response headers).
func ilbMode() *extprocfilterv3.ProcessingMode {
	return &extprocfilterv3.ProcessingMode{
		RequestHeaderMode: extprocfilterv3.ProcessingMode_SEND, ResponseHeaderMode: extprocfilterv3.ProcessingMode_SEND,
		RequestTrailerMode: extprocfilterv3.ProcessingMode_SKIP, ResponseTrailerMode: extprocfilterv3.ProcessingMode_SKIP,
	}
}

// ilbOverride is ILB's mode_override: the response body STREAMED, the rest as configured.
func ilbOverride() *extprocfilterv3.ProcessingMode {
	m := ilbMode()
	m.ResponseBodyMode = extprocfilterv3.ProcessingMode_STREAMED
	return m
}

// chunkProc is an ext_proc server for one request: it answers the
// response headers (with ILB's mode_override when override), closes
// arrived[k] when the k-th response body message arrives, answers it with
// answer (nil: an empty CONTINUE), and closes ended once the stream is over.
type chunkProc struct {
	override bool
	answer   func(k int, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error)
	arrived  []chan struct{}
	ended    chan struct{}

	mu    sync.Mutex
	n     int
	watch sync.Once
}

func newChunkProc(override bool, parts int) *chunkProc {
	c := &chunkProc{override: override, ended: make(chan struct{})}
	for range parts + 1 {
		c.arrived = append(c.arrived, make(chan struct{}))
	}
	return c
}

func (c *chunkProc) handle(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	c.watch.Do(func() {
		go func() { // ends with the stream (the server's Stop at the latest)
			<-ctx.Done()
			close(c.ended)
		}()
	})
	switch {
	case req.GetResponseHeaders() != nil && c.override:
		r := respond(req, &extprocv3.CommonResponse{})
		r.ModeOverride = ilbOverride()
		return []*extprocv3.ProcessingResponse{r}, nil
	case req.GetResponseBody() != nil:
		c.mu.Lock()
		k := c.n
		c.n++
		c.mu.Unlock()
		if k < len(c.arrived) {
			close(c.arrived[k])
		}
		if c.answer != nil {
			return c.answer(k, req)
		}
	}
	return continueAll(ctx, req)
}

// pacedUpstream writes parts, flushing each, and waits before writing
// part i+1 until the processor got body message i (for i < wait), so that
// each part is one read of envoysim's.
func pacedUpstream(parts []string, arrived []chan struct{}, wait int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i, p := range parts {
			_, _ = io.WriteString(w, p)
			w.(http.Flusher).Flush()
			if i >= wait {
				continue
			}
			select {
			case <-arrived[i]:
			case <-r.Context().Done():
				return
			case <-time.After(failureBound):
				return
			}
		}
	}
}

// streamedHarness serves listener "main" with one ext_proc filter cfg
// (on the "ext-proc" cluster) routing everything to an upstream "a" served
// by upstream.
func streamedHarness(t *testing.T, proc procHandler, cfg *extprocfilterv3.ExternalProcessor, upstream http.HandlerFunc) *harness {
	t.Helper()
	h := newHarness(t, proc)
	h.upstream("a", upstream)
	h.push(append(h.clusters(),
		httpListener("main", "routes", extProc("ilb", cfg)),
		routeConfig("routes", vhost("all", []string{"*"}, routeTo("a"))))...)
	h.start(nil)
	return h
}

// frame is a response_body message as the processor got it.
type frame struct {
	body string
	eos  bool
}

func responseFrames(p *fakeProcessor) []frame {
	var out []frame
	for _, r := range p.requests() {
		if b := r.GetResponseBody(); b != nil {
			out = append(out, frame{string(b.GetBody()), b.GetEndOfStream()})
		}
	}
	return out
}

// fetched is what the client got: err is the body's read error (a cut stream).
type fetched struct {
	status int
	header http.Header
	body   string
	err    error
}

// fetch GETs url and reads the body to its end or failure.
func fetch(t *testing.T, url string) fetched {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: failureBound}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return fetched{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
}

// waitClosed waits for ch, failing after failureBound.
func waitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(failureBound):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func bodyAnswer(req *extprocv3.ProcessingRequest, bm *extprocv3.BodyMutation) []*extprocv3.ProcessingResponse {
	return []*extprocv3.ProcessingResponse{respond(req, &extprocv3.CommonResponse{BodyMutation: bm})}
}

func replaceBody(b string) *extprocv3.BodyMutation {
	return &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte(b)}}
}

// upper answers every chunk with its upper-case text.
func upper(_ int, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	return bodyAnswer(req, replaceBody(strings.ToUpper(string(req.GetResponseBody().GetBody())))), nil
}

// TestStreamedResponseBody: a STREAMED response body, from a mode_override
// at the response headers (as ILB does) or configured, goes to the
// processor frame by frame (an HTTP/1 upstream's end as an empty
// end_of_stream frame) and reaches the client as answered; a failure
// mid-body lets the rest flow (failing open, the server closing the
// stream) or cuts the client's stream (failing closed: the headers are gone).
func TestStreamedResponseBody(t *testing.T) {
	parts := []string{"alpha ", "beta ", "gamma"}
	all := []frame{{"alpha ", false}, {"beta ", false}, {"gamma", false}, {"", true}}
	at := func(n int, fn func(req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error)) func(int, *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		return func(k int, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
			if k == n {
				return fn(req)
			}
			return upper(k, req)
		}
	}
	atSecond := func(fn func(req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error)) func(int, *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		return at(1, fn)
	}
	stuck := func(*extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		// The timer restarts at 1 ms and nothing more comes: the message times out.
		return []*extprocv3.ProcessingResponse{{OverrideMessageTimeout: durationpb.New(time.Millisecond)}}, nil
	}
	streamedResp := func(req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		return bodyAnswer(req, &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: []byte("x")},
		}}), nil
	}
	grpcErr := func(*extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		return nil, status.Error(codes.Internal, "processor failed")
	}
	closes := func(*extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) { return nil, errEndStream }
	for _, c := range []struct {
		name     string
		mode     *extprocfilterv3.ProcessingMode
		override bool
		failOpen bool
		answer   func(int, *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error)
		wait     int // body messages the processor gets
		body     string
		cut      bool
		frames   []frame
		check    func(t *testing.T, st ExtProcStats)
	}{
		{
			name: "override at response headers, CONTINUE answers", mode: ilbMode(), override: true, wait: 3,
			body: "alpha beta gamma", frames: all, check: func(t *testing.T, st ExtProcStats) {
				if st.MessagesSent != 6 || st.MessagesReceived != 6 || st.StreamsStarted != 1 || st.StreamsClosed != 1 {
					t.Errorf("stats %+v, want 6 sent and received (2 headers, 4 bodies), 1 stream started and closed", st)
				}
			},
		},
		{
			name: "configured STREAMED", mode: &extprocfilterv3.ProcessingMode{ResponseBodyMode: streamed}, wait: 3,
			body: "alpha beta gamma", frames: all,
		},
		{
			name: "configured STREAMED, headers skipped", wait: 3, body: "alpha beta gamma", frames: all,
			mode: &extprocfilterv3.ProcessingMode{
				RequestHeaderMode: extprocfilterv3.ProcessingMode_SKIP, ResponseHeaderMode: extprocfilterv3.ProcessingMode_SKIP, ResponseBodyMode: streamed,
			},
			check: func(t *testing.T, st ExtProcStats) {
				if st.MessagesSent != 4 || st.MessagesReceived != 4 {
					t.Errorf("stats %+v, want the 4 body messages only", st)
				}
			},
		},
		{
			name: "body mutations replace and clear frames", mode: ilbMode(), override: true, wait: 3, body: "ALPHA GAMMA", frames: all,
			answer: func(k int, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
				switch k {
				case 1:
					return bodyAnswer(req, &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}), nil
				case 2: // CONTINUE_AND_REPLACE is a plain answer; the header mutation is ignored
					return []*extprocv3.ProcessingResponse{respond(req, &extprocv3.CommonResponse{
						Status:         extprocv3.CommonResponse_CONTINUE_AND_REPLACE,
						HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("x-late", "1")}},
						BodyMutation:   replaceBody("GAMMA"),
					})}, nil
				}
				return upper(k, req)
			},
		},
		{
			name: "server closes the stream mid-body: the rest flows", mode: ilbMode(), override: true, answer: atSecond(closes), wait: 2,
			body: "ALPHA beta gamma", frames: all[:2],
		},
		{
			name: "gRPC error failing open: the rest flows", mode: ilbMode(), override: true, failOpen: true, answer: atSecond(grpcErr), wait: 2,
			body: "ALPHA beta gamma", frames: all[:2], check: func(t *testing.T, st ExtProcStats) {
				if st.StreamsFailed != 1 || st.FailureModeAllowed != 1 {
					t.Errorf("stats %+v", st)
				}
			},
		},
		{
			name: "gRPC error failing closed cuts the stream", mode: ilbMode(), override: true, answer: atSecond(grpcErr), wait: 2,
			body: "ALPHA ", cut: true, frames: all[:2], check: func(t *testing.T, st ExtProcStats) {
				if st.StreamsFailed != 1 || st.FailureModeAllowed != 0 {
					t.Errorf("stats %+v", st)
				}
			},
		},
		{
			name: "message timeout failing open: the rest flows", mode: ilbMode(), override: true, failOpen: true, answer: atSecond(stuck), wait: 2,
			body: "ALPHA beta gamma", frames: all[:2], check: func(t *testing.T, st ExtProcStats) {
				if st.MessageTimeouts != 1 || st.FailureModeAllowed != 1 || st.OverrideTimeoutReceived != 1 {
					t.Errorf("stats %+v", st)
				}
			},
		},
		{
			name: "message timeout failing closed cuts the stream", mode: ilbMode(), override: true, answer: atSecond(stuck), wait: 2,
			body: "ALPHA ", cut: true, frames: all[:2], check: func(t *testing.T, st ExtProcStats) {
				if st.MessageTimeouts != 1 || st.FailureModeAllowed != 0 {
					t.Errorf("stats %+v", st)
				}
			},
		},
		{
			name: "message timeout at the first frame failing closed: the headers came, then the cut", mode: ilbMode(), override: true, answer: at(0, stuck), wait: 1,
			body: "", cut: true, frames: all[:1], check: func(t *testing.T, st ExtProcStats) {
				if st.MessageTimeouts != 1 {
					t.Errorf("stats %+v", st)
				}
			},
		},
		{
			name: "streamed_response is spurious, failing open", mode: ilbMode(), override: true, failOpen: true, answer: atSecond(streamedResp), wait: 2,
			body: "ALPHA beta gamma", frames: all[:2], check: func(t *testing.T, st ExtProcStats) {
				if st.SpuriousMessages != 1 || st.MessagesReceived != 3 {
					t.Errorf("stats %+v, want 1 spurious and 3 received (2 headers, 1 body)", st)
				}
			},
		},
		{
			name: "streamed_response is spurious, failing closed", mode: ilbMode(), override: true, answer: atSecond(streamedResp), wait: 2,
			body: "ALPHA ", cut: true, frames: all[:2], check: func(t *testing.T, st ExtProcStats) {
				if st.SpuriousMessages != 1 {
					t.Errorf("stats %+v", st)
				}
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			proc := newChunkProc(c.override, len(parts))
			proc.answer = c.answer
			h := streamedHarness(t, proc.handle, &extprocfilterv3.ExternalProcessor{
				ProcessingMode: c.mode, AllowModeOverride: c.override, FailureModeAllow: c.failOpen,
				MessageTimeout: durationpb.New(failureBound), MaxMessageTimeout: durationpb.New(failureBound),
			}, pacedUpstream(parts, proc.arrived, c.wait))
			got := fetch(t, h.url("main", "/v1/completions"))
			if got.status != 200 || got.body != c.body || (got.err != nil) != c.cut {
				t.Fatalf("client got %d %q (read error %v), want 200 %q cut=%v", got.status, got.body, got.err, c.body, c.cut)
			}
			if got.header.Get("x-late") != "" {
				t.Error("a header mutation in a body answer reached the client")
			}
			if frames := responseFrames(h.proc); !equalFrames(frames, c.frames) {
				t.Errorf("processor got frames %+v, want %+v", frames, c.frames)
			}
			waitClosed(t, "the ext_proc stream to end", proc.ended)
			if c.check != nil {
				c.check(t, h.env.Stats().ExtProc)
			}
		})
	}
}

func equalFrames(a, b []frame) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
