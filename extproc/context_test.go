package extproc_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/extproc"
)

// TestContextLengthExceeded: a prompt whose estimate (4 bytes a token)
// is past twice its model's context cannot fit whatever the tokenizer:
// ILB answers 400 context_length_exceeded in OpenAI's shape, naming the
// prompt's field and the figures, records it and books no demand. A
// prompt nearer the limit goes to the engine, whose tokenizer decides.
func TestContextLengthExceeded(t *testing.T) {
	const context = 1000 // tokens: 2,000 estimated tokens is 8,000 bytes
	h := startWith(t, true, func(o *extproc.Options) {
		for i := range o.Config.Models {
			o.Config.Models[i].ContextTokens, o.Config.Models[i].MaxOutputTokens = context, 500
		}
	})
	text := func(n int) string { return strings.Repeat("a", n) }
	for _, tc := range []struct {
		name, path, body string
		refused          bool
		param            string
		tokens           int // the estimate: the prompt's JSON bytes / 4
	}{
		{"within the context", "/v1/chat/completions", `{"model":"qwen-7b","messages":[{"role":"user","content":"` + text(3000) + `"}]}`, false, "", 0},
		{"past the context, not twice: the engine's call", "/v1/chat/completions", `{"model":"qwen-7b","messages":[{"role":"user","content":"` + text(7000) + `"}]}`, false, "", 0},
		{"chat past twice the context", "/v1/chat/completions", `{"model":"qwen-7b","messages":[{"role":"user","content":"` + text(9000) + `"}]}`, true, "messages", (9000 + len(`[{"role":"user","content":""}]`)) / 4},
		{"completions past twice the context", "/v1/completions", `{"model":"qwen-7b","prompt":"` + text(9000) + `"}`, true, "prompt", 9002 / 4},
		{"embeddings past twice the context", "/v1/embeddings", `{"model":"qwen-7b","input":"` + text(9000) + `"}`, true, "input", 9002 / 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.meter.Flush(time.Unix(1700000000, 0))
			resps := h.run(t, "edge-us", reqHeaders(false, ":method", "POST", ":path", tc.path, "x-request-id", tc.name), reqBody(tc.body))
			last := resps[len(resps)-1]
			ir := last.GetImmediateResponse()
			if !tc.refused {
				if ir != nil || last.GetRequestBody().GetResponse().GetHeaderMutation() == nil {
					t.Fatalf("answer %v; want the request routed", last)
				}
				return
			}
			if ir == nil || ir.GetStatus().GetCode() != 400 {
				t.Fatalf("answer %v; want 400", last)
			}
			var e struct {
				Error struct {
					Type, Code, Message string
					Param               *string
				}
			}
			if err := json.Unmarshal(ir.GetBody(), &e); err != nil {
				t.Fatal(err)
			}
			if e.Error.Code != "context_length_exceeded" || e.Error.Type != "invalid_request_error" || e.Error.Param == nil || *e.Error.Param != tc.param ||
				!strings.Contains(e.Error.Message, "about "+strconv.Itoa(tc.tokens)+" tokens") || !strings.Contains(e.Error.Message, "1000 tokens") {
				t.Errorf("error %+v; want context_length_exceeded about %s with the prompt's %d and the context's 1000 tokens", e.Error, tc.param, tc.tokens)
			}
			if rec, ok := h.srv.Decisions().Get(tc.name); !ok || rec.Reason != "context_length_exceeded" || rec.Status != 400 || rec.Model != "qwen2.5-7b-instruct" {
				t.Errorf("record %+v (found %v); want reason context_length_exceeded, 400, the model", rec, ok)
			}
			if counts, _ := h.meter.Flush(time.Unix(1700000001, 0)); len(counts) != 0 {
				t.Errorf("demand booked: %v; want none", counts)
			}
		})
	}
}
