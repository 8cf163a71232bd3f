package engine

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
)

type chunkResp struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta *struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

// openStream posts body and returns a reader of the 200 event stream.
func openStream(t *testing.T, url, body string) *bufio.Reader {
	t.Helper()
	resp := send(t.Context(), t, http.MethodPost, url, body)
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q, want text/event-stream", ct)
	}
	return bufio.NewReader(resp.Body)
}

// nextChunk reads one event and decodes it as a chunk.
func nextChunk(t *testing.T, r *bufio.Reader) chunkResp {
	t.Helper()
	data, err := readEvent(r)
	if err != nil {
		t.Fatalf("read event: %v", err)
	}
	var c chunkResp
	mustUnmarshal(t, []byte(data), &c)
	return c
}

// TestStreamIsIncremental gates the backend token by token: each chunk must
// be readable before the next token is even produced, so every event was
// flushed on its own.
func TestStreamIsIncremental(t *testing.T) {
	g := newGate()
	base := startServer(t, testOptions(NewFixedBackend(FixedTiming{Sleep: g.sleep})))
	r := openStream(t, base+"/v1/chat/completions",
		`{"model":"sim-model","messages":[{"role":"user","content":"hi there"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`)
	var id string
	for i := range 3 {
		g.step(t) // the prefill, then each inter-token wait
		c := nextChunk(t, r)
		if c.Object != "chat.completion.chunk" || c.Model != testModel || len(c.Choices) != 1 || c.Choices[0].Delta == nil {
			t.Fatalf("chunk %d: %+v", i, c)
		}
		if i == 0 {
			id = c.ID
		} else if c.ID != id {
			t.Errorf("chunk %d id %q, want %q", i, c.ID, id)
		}
		d := c.Choices[0].Delta
		wantRole := map[bool]string{true: "assistant", false: ""}[i == 0]
		if d.Role != wantRole || d.Content == nil || *d.Content != TokenText(i) || c.Choices[0].FinishReason != nil {
			t.Errorf("chunk %d: role %q content %v finish %v, want role %q content %q", i, d.Role, d.Content, c.Choices[0].FinishReason, wantRole, TokenText(i))
		}
	}
	// No more gate steps: the rest needs no further tokens.
	fin := nextChunk(t, r)
	if len(fin.Choices) != 1 || fin.Choices[0].FinishReason == nil || *fin.Choices[0].FinishReason != "length" || fin.Choices[0].Delta.Content != nil {
		t.Errorf("final chunk %+v, want empty delta and finish_reason length", fin)
	}
	u := nextChunk(t, r)
	if len(u.Choices) != 0 || u.Usage == nil || *u.Usage != (usage{2, 3, 5}) {
		t.Errorf("usage chunk %+v, want no choices and usage {2 3 5}", u)
	}
	if data, err := readEvent(r); err != nil || data != "[DONE]" {
		t.Errorf("terminator %q, %v; want [DONE]", data, err)
	}
	if _, err := readEvent(r); !errors.Is(err, io.EOF) {
		t.Errorf("after [DONE]: %v, want EOF", err)
	}
}

func TestStreamShapes(t *testing.T) {
	base := startServer(t, testOptions(nil))
	tests := []struct {
		name, path, body string
		chat             bool
		choices, tokens  int
		wantUsage        *usage
	}{
		{"chat without usage", "/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"max_tokens":4,"stream":true}`, true, 1, 4, nil},
		{"chat include_usage false", "/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"max_tokens":2,"stream":true,"stream_options":{"include_usage":false}}`, true, 1, 2, nil},
		{"completion with usage", "/v1/completions", `{"model":"sim-model","prompt":"abcdefgh","max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`, false, 1, 3, &usage{2, 3, 5}},
		{"completion two prompts", "/v1/completions", `{"model":"sim-model-b","prompt":["a","b"],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`, false, 2, 5, &usage{2, 10, 12}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := openStream(t, base+tc.path, tc.body)
			texts := make([]string, tc.choices)
			finished := make([]bool, tc.choices)
			events := 0
			for {
				data, err := readEvent(r)
				if err != nil {
					t.Fatalf("after %d events: %v (no [DONE])", events, err)
				}
				events++
				if data == "[DONE]" {
					break
				}
				var c chunkResp
				mustUnmarshal(t, []byte(data), &c)
				wantObject := map[bool]string{true: "chat.completion.chunk", false: "text_completion"}[tc.chat]
				if c.Object != wantObject {
					t.Fatalf("object %q, want %q", c.Object, wantObject)
				}
				if len(c.Choices) == 0 {
					if c.Usage == nil || tc.wantUsage == nil || *c.Usage != *tc.wantUsage {
						t.Errorf("usage chunk %+v, want usage %+v", c.Usage, tc.wantUsage)
					}
					continue
				}
				ch := c.Choices[0]
				if ch.FinishReason != nil {
					finished[ch.Index] = true
					continue
				}
				if finished[ch.Index] {
					t.Errorf("token after finish for choice %d", ch.Index)
				}
				if tc.chat {
					texts[ch.Index] += *ch.Delta.Content
				} else {
					texts[ch.Index] += *ch.Text
				}
			}
			// tokens + one finish chunk per choice, usage chunk, [DONE].
			wantEvents := tc.choices*(tc.tokens+1) + 1
			if tc.wantUsage != nil {
				wantEvents++
			}
			if events != wantEvents {
				t.Errorf("%d events, want %d", events, wantEvents)
			}
			for i := range texts {
				if texts[i] != wantText(tc.tokens) || !finished[i] {
					t.Errorf("choice %d: text %q finished %v, want %q", i, texts[i], finished[i], wantText(tc.tokens))
				}
			}
			if _, err := readEvent(r); !errors.Is(err, io.EOF) {
				t.Errorf("after [DONE]: %v, want EOF", err)
			}
		})
	}
}

// TestStreamChunkJSON pins the wire form of the first chat chunk.
func TestStreamChunkJSON(t *testing.T) {
	text := "Hi"
	b, err := json.Marshal(chunk(completionObject{ID: "chatcmpl-1", Object: "chat.completion.chunk", Created: 7, Model: "m", SystemFingerprint: "r"}, true, 0, true, &text, nil))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":"r",` +
		`"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"logprobs":null,"finish_reason":null}]}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}
