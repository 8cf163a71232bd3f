package extproc_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/header"
)

// duplexMode marks the first message of a stream as Envoy does for the
// processing mode istiod gives an InferencePool's endpoint picker:
// request and response bodies FULL_DUPLEX_STREAMED (trailers SEND).
func duplexMode(m *extprocv3.ProcessingRequest) *extprocv3.ProcessingRequest {
	m.ProtocolConfig = &extprocv3.ProtocolConfiguration{
		RequestBodyMode:  extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		ResponseBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
	}
	return m
}

func respChunk(body string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: eos},
	}}
}

func reqTrailers() *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
		RequestTrailers: &extprocv3.HttpTrailers{Trailers: hmap("x-checksum", "1")},
	}}
}

// playDuplex sends msgs on one stream without waiting for answers, as
// Envoy does in full-duplex mode (every chunk as it arrives), then reads
// every answer until the server ends the stream. No source metadata is
// sent: istiod's ext_proc filter sends none.
func playDuplex(t *testing.T, h *harness, msgs ...*extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
	t.Helper()
	stream, err := h.client.Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := stream.Send(m); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err) // EOF: the server ended the stream (an ImmediateResponse)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var out []*extprocv3.ProcessingResponse
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp)
	}
}

// answerKind names an answer the way the tests list them: "headers",
// "body" (streamed request body), "trailers", "response-headers",
// "response-body" (streamed), "immediate", or what else it is.
func answerKind(t *testing.T, r *extprocv3.ProcessingResponse) string {
	t.Helper()
	switch {
	case r.GetRequestHeaders() != nil:
		return "headers"
	case r.GetRequestBody() != nil:
		if r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse() == nil {
			t.Error("a request body answer without a StreamedBodyResponse: Envoy fails full-duplex streams on it (500)")
		}
		return "body"
	case r.GetRequestTrailers() != nil:
		return "trailers"
	case r.GetResponseHeaders() != nil:
		return "response-headers"
	case r.GetResponseBody() != nil:
		if r.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse() == nil {
			t.Error("a response body answer without a StreamedBodyResponse")
		}
		return "response-body"
	case r.GetResponseTrailers() != nil:
		return "response-trailers"
	case r.GetImmediateResponse() != nil:
		return "immediate"
	}
	return "unknown"
}

// streamedBodies concatenates the streamed bodies of the answers of one
// kind and reports whether the last one ended the stream.
func streamedBodies(rs []*extprocv3.ProcessingResponse, response bool) (string, bool) {
	var b bytes.Buffer
	eos := false
	for _, r := range rs {
		br := r.GetRequestBody()
		if response {
			br = r.GetResponseBody()
		}
		if sr := br.GetResponse().GetBodyMutation().GetStreamedResponse(); sr != nil {
			b.Write(sr.GetBody())
			eos = sr.GetEndOfStream()
		}
	}
	return b.String(), eos
}

// TestFullDuplex plays the message sequences of Envoy's
// FULL_DUPLEX_STREAMED mode, as istiod configures an InferencePool's
// picker (no source metadata: the server's default source), and checks
// the answers' kinds and order (the request headers' answer waits for
// the body and carries the decision; every chunk goes back unchanged in
// StreamedBodyResponses, the last ending the stream), the bodies, and the
// decision.
func TestFullDuplex(t *testing.T) {
	h := startWith(t, true, func(o *extproc.Options) { o.DefaultSource = "edge-us" })
	chat := `{"model":"qwen-7b","messages":[{"role":"user","content":"hello there"}],"stream":true}`
	big := `{"model":"qwen-7b","messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 15000) + `"}]}`
	sse := []string{"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n", "data: {\"choices\":[{\"delta\":{\"content\":\"!\"}}]}\n\n", "data: [DONE]\n\n"}
	tests := []struct {
		name     string
		msgs     []*extprocv3.ProcessingRequest
		want     []string // answer kinds, in order
		body     string   // the request body sent back ("": none)
		bodyEOS  bool
		response string // the response body sent back
		model    string // the decision's model ("": none)
		status   int    // an ImmediateResponse's status
	}{
		{
			"chat in three chunks, tokens streamed back",
			[]*extprocv3.ProcessingRequest{
				duplexMode(post("/v1/chat/completions")), reqChunk(chat[:10], false), reqChunk(chat[10:40], false), reqChunk(chat[40:], true),
				respHeaders(":status", "200", "content-type", "text/event-stream"), respChunk(sse[0], false), respChunk(sse[1], false), respChunk(sse[2], true),
			},
			[]string{"headers", "body", "response-headers", "response-body", "response-body", "response-body"},
			chat, true, strings.Join(sse, ""), "qwen2.5-7b-instruct", 0,
		},
		{
			"a body over 32 KiB goes back in chunks under grpc-go's 32 KiB buffer class",
			[]*extprocv3.ProcessingRequest{duplexMode(post("/v1/chat/completions")), reqChunk(big[:100000], false), reqChunk(big[100000:], true)},
			append([]string{"headers"}, slices.Repeat([]string{"body"}, (len(big)+extproc.DuplexChunk-1)/extproc.DuplexChunk)...),
			big, true, "", "qwen2.5-7b-instruct", 0,
		},
		{
			"trailers end the body: decision, body, trailers' answer",
			[]*extprocv3.ProcessingRequest{duplexMode(post("/v1/chat/completions")), reqChunk(chat, false), reqTrailers()},
			[]string{"headers", "body", "trailers"},
			chat, false, "", "qwen2.5-7b-instruct", 0,
		},
		{
			"no body: answered at once",
			[]*extprocv3.ProcessingRequest{duplexMode(reqHeaders(true, ":method", "GET", ":path", "/v1/files/file-abc", "x-request-id", "req-1"))},
			[]string{"headers"},
			"", false, "", "llama-3.1-8b-instruct", 0,
		},
		{
			"decided on the headers: chunks echoed as they come",
			[]*extprocv3.ProcessingRequest{duplexMode(post("/v1/audio/transcriptions", header.Model, "qwen-7b")), reqChunk("RIFF....", false), reqChunk("WAVE", true)},
			[]string{"headers", "body", "body"},
			"RIFF....WAVE", true, "", "qwen2.5-7b-instruct", 0,
		},
		{
			"a body over max_body_bytes is refused, nothing else answered",
			[]*extprocv3.ProcessingRequest{duplexMode(post("/v1/chat/completions")), reqChunk(strings.Repeat("x", 5<<20), false), reqChunk(strings.Repeat("x", 5<<20), true)},
			[]string{"immediate"},
			"", false, "", "", 413,
		},
		{
			"a body that is not JSON is refused",
			[]*extprocv3.ProcessingRequest{duplexMode(post("/v1/chat/completions")), reqChunk("{not json", true)},
			[]string{"immediate"},
			"", false, "", "", 400,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := playDuplex(t, h, tt.msgs...)
			var kinds []string
			for _, r := range got {
				kinds = append(kinds, answerKind(t, r))
			}
			if strings.Join(kinds, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("answers %v, want %v", kinds, tt.want)
			}
			if tt.status != 0 {
				if s := int(got[0].GetImmediateResponse().GetStatus().GetCode()); s != tt.status {
					t.Errorf("status %d, want %d", s, tt.status)
				}
				return
			}
			if body, eos := streamedBodies(got, false); body != tt.body || eos != tt.bodyEOS {
				t.Errorf("request body sent back: %d bytes (end_of_stream %v), want %d bytes (%v)", len(body), eos, len(tt.body), tt.bodyEOS)
			}
			if body, _ := streamedBodies(got, true); body != tt.response {
				t.Errorf("response body sent back %q, want %q", body, tt.response)
			}
			if m := mutation(t, got[0].GetRequestHeaders().GetResponse()); m[header.RouteModel] != tt.model {
				t.Errorf("the headers' answer routes model %q, want %q (mutation %v)", m[header.RouteModel], tt.model, m)
			}
		})
	}
}
