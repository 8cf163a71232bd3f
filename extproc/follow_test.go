package extproc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/metadata"

	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/internal/promtest"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/weights"
)

// sseEvents is n chat-completion chunks as vLLM streams them, one token
// each.
func sseEvents(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \\\"}\"}}]}\n\n", i)
	}
	return b.String()
}

// usageEvent is the last chunk of a stream with include_usage.
func usageEvent(prompt, completion int) string {
	return fmt.Sprintf("data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\ndata: [DONE]\n\n", prompt, completion, prompt+completion)
}

// TestDemandFollowsGeneration: past its provisional share, a request
// counts as demand what the engine generates for it — its prompt and the
// tokens streamed, or the engine's usage — never more than its estimate;
// a stream abandoned after its first event adds nothing past its
// provisional share.
func TestDemandFollowsGeneration(t *testing.T) {
	// Demo defaults: an ordinary llama request is 500 prompt + 250 output
	// × 4 = 1,500 units, the provisional share of any bigger one. The
	// request: 8 prompt tokens, max_tokens 4096: 8 + 4096 × 4.
	const (
		provisional = 1500
		estimate    = 8 + 4096*4
	)
	streamed := `{"model":"llama3-8b","stream":true,"max_tokens":4096,"messages":[{"role":"user","content":"hi"}]}`
	plain := `{"model":"llama3-8b","max_tokens":4096,"messages":[{"role":"user","content":"hi"}]}`
	sse := []string{header.ServedCluster, "us-east-vllm", "content-type", "text/event-stream"}
	js := []string{header.ServedCluster, "us-east-vllm", "content-type", "application/json"}
	// A JSON answer whose generated text imitates a usage object: only
	// the top-level one counts.
	fake := `{"id":"c1","choices":[{"message":{"role":"assistant","content":"\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":99999}"}}],` +
		`"usage":{"prompt_tokens":8,"completion_tokens":1000,"total_tokens":1008}}`
	tests := []struct {
		name    string
		body    string
		resp    []string // response headers after :status
		status  string
		chunks  []string // response body chunks; the last has end_of_stream when end
		end     bool
		follow  bool    // the response headers' answer asks for the body
		booked  float64 // demand in the end
		outcome string  // ilb_extproc_followed_responses_total outcome ("" none)
		from    string  // Generated.From
	}{
		{"abandoned after the first event", streamed, sse, "200", []string{sseEvents(1)}, false, true, provisional, "ended", "events"},
		{"abandoned before any event", streamed, sse, "200", nil, false, true, provisional, "ended", "events"},
		{"streamed to its end, one token per event", streamed, sse, "200", []string{sseEvents(300), sseEvents(300), "data: [DONE]\n\n"}, true, true, 8 + 600*4, "complete", "events"},
		{"streamed with usage", streamed, sse, "200", []string{sseEvents(10), usageEvent(8, 2000)}, true, true, 8 + 2000*4, "complete", "usage"},
		{"usage under the provisional share", streamed, sse, "200", []string{sseEvents(10), usageEvent(8, 20)}, true, true, provisional, "complete", "usage"},
		{"usage over the estimate is capped", streamed, sse, "200", []string{usageEvent(900000, 900000)}, true, true, estimate, "complete", "usage"},
		{"JSON body: only the top-level usage counts", plain, js, "200", []string{fake[:40], fake[40:]}, true, true, 8 + 1000*4, "complete", "usage"},
		{"engine refuses it", plain, js, "400", nil, false, false, provisional, "", ""},
		{"unreachable engine, Envoy's 503", streamed, nil, "503", nil, false, false, provisional, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, true)
			msgs := []*extprocv3.ProcessingRequest{post("/v1/chat/completions"), reqBody(tt.body), respHeaders(append([]string{":status", tt.status}, tt.resp...)...)}
			for i, c := range tt.chunks {
				msgs = append(msgs, respChunk(c, tt.end && i == len(tt.chunks)-1))
			}
			out := h.run(t, "edge-us", msgs...)
			if got := out[2].GetModeOverride().GetResponseBodyMode() == extprocfilterv3.ProcessingMode_STREAMED; got != tt.follow {
				t.Fatalf("response headers answer asks for the body: %v; want %v (%v)", got, tt.follow, out[2])
			}
			for i, a := range out[3:] {
				if a.GetResponseBody() == nil || a.GetResponseBody().GetResponse().GetBodyMutation() != nil {
					t.Errorf("chunk %d answered %v; want an unchanged body", i, a)
				}
			}
			waitStreamsClosed(t, h)
			counts, _ := h.meter.Flush(now)
			c := counts[demand.Key{Source: "edge-us", Model: "llama-3.1-8b-instruct", Priority: weights.Standard}]
			rec, _ := h.srv.Decisions().Get("req-1")
			if c.Requests != 1 || c.TokenCost != tt.booked || rec.DemandBooked != tt.booked {
				t.Errorf("demand %+v, record booked %v; want 1 request of %v", c, rec.DemandBooked, tt.booked)
			}
			if tt.outcome == "" {
				if rec.Generated != nil {
					t.Errorf("record generated %+v; want none", rec.Generated)
				}
				return
			}
			if rec.Generated == nil || rec.Generated.Outcome != tt.outcome || rec.Generated.From != tt.from {
				t.Errorf("record generated %+v; want outcome %s from %s", rec.Generated, tt.outcome, tt.from)
			}
			promtest.Check(t, h.reg, "ilb_extproc_followed_responses_total", map[string]string{"source": "edge-us", "outcome": tt.outcome}, 1)
			if tt.booked < estimate {
				promtest.Check(t, h.reg, "ilb_extproc_unserved_claim_token_cost_total", map[string]string{"source": "edge-us"}, estimate-tt.booked)
			}
			promtest.Check(t, h.reg, "ilb_extproc_followed_streams", nil, 0)
		})
	}
}

// TestFollowingStopsOnceConfirmed: once a response has generated its
// whole estimate, ILB ends the stream (OK), so Envoy sends the rest of
// the body straight to the client.
func TestFollowingStopsOnceConfirmed(t *testing.T) {
	h := start(t, true)
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), header.Source, "edge-us"), time.Minute)
	defer cancel()
	stream, err := h.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 8 prompt + 1000 output × 4 = 4,008: booked in full by event 1000.
	body := `{"model":"llama3-8b","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`
	for _, m := range []*extprocv3.ProcessingRequest{post("/v1/chat/completions"), reqBody(body), respHeaders(":status", "200", "content-type", "text/event-stream")} {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	answered := 0
	for range 20 {
		// Once ILB ended the stream, a Send may still succeed (buffered)
		// or say io.EOF; the Recv says io.EOF.
		if err := stream.Send(respChunk(sseEvents(100), false)); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("after %d events: %v; want the stream ended with OK", answered*100, err)
			}
			break
		}
		answered++
	}
	if answered*100 != 1000 {
		t.Errorf("ILB answered %d events before ending the stream; want 1000 (the whole estimate)", answered*100)
	}
	waitStreamsClosed(t, h)
	rec, _ := h.srv.Decisions().Get("req-1")
	if rec.DemandBooked != 4008 || rec.Generated == nil || rec.Generated.Outcome != "confirmed" {
		t.Errorf("booked %v, generated %+v; want 4008, confirmed", rec.DemandBooked, rec.Generated)
	}
}

// TestFollowedToTheFirstEvent: a streaming response whose request was
// booked whole at the decision is followed to its first event only (the
// first token, which its headers do not mark): its headers' answer asks
// for the body, ILB answers the first event and ends the stream, and
// books and records nothing more; a JSON response of the same request is
// not followed.
func TestFollowedToTheFirstEvent(t *testing.T) {
	// 8 prompt + 10 output × 4 = 48, under the provisional share.
	body := `{"model":"llama3-8b","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name    string
		ctype   string
		follow  bool
		outcome string // ilb_extproc_followed_responses_total ("" none)
	}{
		{"an event stream: to its first event", "text/event-stream", true, "first_event"},
		{"an event stream, parameters in its type: to its first event", "Text/Event-Stream; charset=utf-8", true, "first_event"},
		{"a JSON body: not followed", "application/json", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, true)
			st, cancel := openStream(t, h, "edge-us")
			defer cancel()
			exchange(t, st, post("/v1/chat/completions"))
			exchange(t, st, reqBody(body))
			a := exchange(t, st, respHeaders(":status", "200", header.ServedCluster, "us-east-vllm", "content-type", tt.ctype))
			if got := a.GetModeOverride().GetResponseBodyMode() == extprocfilterv3.ProcessingMode_STREAMED; got != tt.follow {
				t.Fatalf("response headers answer asks for the body: %v; want %v (%v)", got, tt.follow, a)
			}
			if !tt.follow {
				closeStream(t, st)
				waitStreamsClosed(t, h)
				if n := countMetric(t, h, "ilb_extproc_followed_responses_total", map[string]string{"source": "edge-us", "outcome": "first_event"}); n != 0 {
					t.Errorf("followed to the first event: %v; want 0", n)
				}
				return
			}
			if a := exchange(t, st, respChunk(sseEvents(1), false)); a.GetResponseBody() == nil {
				t.Fatalf("first event answered %v; want the body unchanged", a)
			}
			// ILB ended the stream: the rest of the body flows without it.
			if _, err := st.Recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("after the first event: %v; want the stream ended with OK", err)
			}
			waitStreamsClosed(t, h)
			promtest.Check(t, h.reg, "ilb_extproc_followed_responses_total", map[string]string{"source": "edge-us", "outcome": tt.outcome}, 1)
			promtest.Check(t, h.reg, "ilb_extproc_followed_streams", nil, 0)
			rec, _ := h.srv.Decisions().Get("req-1")
			if rec.DemandBooked != 48 || rec.Generated != nil {
				t.Errorf("booked %v, generated %+v; want 48 at the decision, nothing generated recorded", rec.DemandBooked, rec.Generated)
			}
		})
	}
}

// TestFollowedStreamsAreBounded: past extproc.max_followed_streams, a
// response is not followed and its request keeps its provisional share.
func TestFollowedStreamsAreBounded(t *testing.T) {
	h := startWith(t, true, func(o *extproc.Options) { o.Config.ExtProc.MaxFollowedStreams = 1 })
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), header.Source, "edge-us"), time.Minute)
	defer cancel()
	held, err := h.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"llama3-8b","stream":true,"max_tokens":4096,"messages":[{"role":"user","content":"hi"}]}`
	var last *extprocv3.ProcessingResponse
	for _, m := range []*extprocv3.ProcessingRequest{post("/v1/chat/completions", "x-request-id", "held"), reqBody(body), respHeaders(":status", "200", "content-type", "text/event-stream")} {
		if err := held.Send(m); err != nil {
			t.Fatal(err)
		}
		if last, err = held.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if last.GetModeOverride() == nil {
		t.Fatal("the first response is not followed")
	}
	out := h.run(t, "edge-us", post("/v1/chat/completions"), reqBody(body), respHeaders(":status", "200", "content-type", "text/event-stream"))
	if out[2].GetModeOverride() != nil {
		t.Errorf("the second response is followed past extproc.max_followed_streams 1: %v", out[2])
	}
	promtest.Check(t, h.reg, "ilb_extproc_followed_responses_total", map[string]string{"source": "edge-us", "outcome": "unfollowed"}, 1)
	promtest.Check(t, h.reg, "ilb_extproc_followed_streams", nil, 1)
	if err := held.CloseSend(); err != nil {
		t.Fatal(err)
	}
	waitStreamsClosed(t, h)
	promtest.Check(t, h.reg, "ilb_extproc_followed_streams", nil, 0)
	rec, _ := h.srv.Decisions().Get("req-1")
	if rec.DemandBooked != 1500 || rec.Generated == nil || rec.Generated.Outcome != "unfollowed" {
		t.Errorf("booked %v, generated %+v; want 1500, unfollowed", rec.DemandBooked, rec.Generated)
	}
}

// TestDuplexResponsesAreFollowed: in a full-duplex exchange (an
// InferencePool's picker) the response body already flows through ILB,
// which reads it as it echoes it: no mode_override, every chunk echoed
// to the end, the demand booked from the usage.
func TestDuplexResponsesAreFollowed(t *testing.T) {
	h := startWith(t, true, func(o *extproc.Options) { o.DefaultSource = "edge-us" })
	chat := `{"model":"llama3-8b","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":4096}`
	events := []string{sseEvents(400), usageEvent(8, 2000)}
	got := playDuplex(t, h, duplexMode(post("/v1/chat/completions")), reqChunk(chat, true),
		respHeaders(":status", "200", "content-type", "text/event-stream"), respChunk(events[0], false), respChunk(events[1], false), respTrailersMsg())
	var kinds []string
	for _, r := range got {
		kinds = append(kinds, answerKind(t, r))
	}
	if want := "headers,body,response-headers,response-body,response-body,response-trailers"; strings.Join(kinds, ",") != want {
		t.Fatalf("answers %v; want %s", kinds, want)
	}
	if got[2].GetModeOverride() != nil {
		t.Errorf("mode_override in a full-duplex exchange: %v (Envoy does not support it there)", got[2].GetModeOverride())
	}
	if body, _ := streamedBodies(got, true); body != strings.Join(events, "") {
		t.Errorf("the response body went back changed (%d bytes of %d)", len(body), len(strings.Join(events, "")))
	}
	waitStreamsClosed(t, h)
	rec, _ := h.srv.Decisions().Get("req-1")
	if rec.DemandBooked != 8+2000*4 || rec.Generated == nil || rec.Generated.From != "usage" || rec.Generated.Outcome != "complete" {
		t.Errorf("booked %v, generated %+v; want %d from usage, complete", rec.DemandBooked, rec.Generated, 8+2000*4)
	}
}

func respTrailersMsg() *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
		ResponseTrailers: &extprocv3.HttpTrailers{Trailers: hmap("grpc-status", "0")},
	}}
}

// TestTypicalShare: once a stream's served requests are known to cost
// more than an ordinary request, a request refused for want of capacity
// counts as one of them (refusals pick requests whatever their size), a
// new large claim's provisional share is a typical request, and a
// request abandoned before any engine answered keeps that share.
func TestTypicalShare(t *testing.T) {
	// Served: 8 prompt tokens, 2,000 generated (usage): 8,008 units each.
	const served = 8 + 2000*4
	body := `{"model":"llama3-8b","stream":true,"max_tokens":4096,"messages":[{"role":"user","content":"hi"}]}`
	small := `{"model":"llama3-8b","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	sse := []string{":status", "200", header.ServedCluster, "us-east-vllm", "content-type", "text/event-stream"}
	key := demand.Key{Source: "edge-us", Model: "llama-3.1-8b-instruct", Priority: weights.Standard}
	tests := []struct {
		name   string
		served int // requests served before, at 8,008 units each
		body   string
		shed   bool    // the plan sheds every standard request and the live state confirms it
		booked float64 // the request's demand once its stream ended
	}{
		{"refused, nothing learned: an ordinary share", 0, body, true, 1500},
		{"refused after long requests: a typical one", 3, body, true, served},
		{"small request refused: a typical one", 3, small, true, served},
		{"abandoned after long requests: a typical share", 3, body, false, served},
		{"small request served: its own estimate", 3, small, false, 8 + 10*4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, true)
			for i := range tt.served {
				id := fmt.Sprintf("served-%d", i)
				h.run(t, "edge-us", reqHeaders(false, ":method", "POST", ":path", "/v1/chat/completions", header.RequestID, id), reqBody(body),
					respHeaders(sse...), respChunk(sseEvents(3)+usageEvent(8, 2000), true))
			}
			waitStreamsClosed(t, h)
			h.meter.Flush(now)
			if tt.shed {
				publishShed(t, h, "edge-us", weights.ShedFractions{weights.Sheddable: 1, weights.Standard: 1})
				h.srv.SetLive(allClusters(h.cfg, live.Cluster{Saturated: true, PressureKnown: true, Pressure: 5}))
			}
			out := h.run(t, "edge-us", reqHeaders(false, ":method", "POST", ":path", "/v1/chat/completions", header.RequestID, "last"), reqBody(tt.body))
			waitStreamsClosed(t, h)
			rec, _ := h.srv.Decisions().Get("last")
			if shed := rec.Status == 429; shed != tt.shed {
				t.Fatalf("status %d (%s); want shed %v (answers %v)", rec.Status, rec.Reason, tt.shed, out)
			}
			counts, _ := h.meter.Flush(now)
			c := counts[key]
			if c.Requests != 1 || c.TokenCost != tt.booked || rec.DemandBooked != tt.booked {
				t.Errorf("demand %+v, record booked %v; want 1 request of %v", c, rec.DemandBooked, tt.booked)
			}
		})
	}
}
