package openai

import (
	"encoding/json"
	"strconv"
	"testing"
)

// engineView is how a Python engine's server (vLLM, SGLang: json.loads
// into a dict, then pydantic) reads the fields ILB decides on: keys
// matched exactly, the last of duplicates kept, and vLLM's output bound
// max_completion_tokens or max_tokens (a 0 falls through to max_tokens).
// Go's map decoding keeps the last duplicate and matches keys exactly.
func engineView(data []byte) (model string, maxTokens int, ok bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return "", 0, false
	}
	if json.Unmarshal(m["model"], &model) != nil {
		return "", 0, false
	}
	for _, k := range []string{"max_completion_tokens", "max_tokens"} {
		if n, err := strconv.Atoi(string(m[k])); err == nil && n != 0 {
			return model, n, true
		}
	}
	return model, 0, true
}

// smuggling are bodies an engine and a lenient router read differently
// (issue 24: "JSON read differently than the engine reads it").
var smuggling = []string{
	`{"model":"llama","MODEL":"qwen","messages":[1]}`,
	`{"MODEL":"qwen","model":"llama","messages":[1]}`,
	`{"model":"llama","model":"qwen","messages":[1]}`,
	`{"Model":"qwen","messages":[1]}`,
	"{\"model\":\"llama\",\"mod\u212ael\":\"qwen\",\"messages\":[1]}",
	`{"mod\u0065l":"llama","messages":[1]}`,
	`{"model":"llama","max_tokens":32768,"MAX_TOKENS":1,"messages":[1]}`,
	`{"model":"llama","max_completion_tokens":0,"max_tokens":32768,"messages":[1]}`,
	`{"model":"llama","max_tokens":32768,"max_completion_tokens":7,"messages":[1]}`,
	`{"model":"llama","max_tokens":7,"max_tokens":32768,"messages":[1]}`,
	`{"model":"llama","max_tokens":5,"max_completion_tokens":5,"messages":[1]}`,
	`{"model":"llama","messages":[1],"Messages":[2]}`,
}

// TestBodiesReadAsEnginesRead: over the smuggling corpus, every body ILB
// accepts names, for the engine, the model ILB routes on and the output
// bound ILB books (what the engine generates at most); the others are
// refused. 0 differences (issue 24, done-when 2–3).
func TestBodiesReadAsEnginesRead(t *testing.T) {
	for _, body := range smuggling {
		checkEngineView(t, []byte(body))
	}
}

// FuzzBodyReadAsEnginesRead is the same check on any body.
func FuzzBodyReadAsEnginesRead(f *testing.F) {
	for _, s := range smuggling {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkEngineView(t, data) })
}

func checkEngineView(t *testing.T, data []byte) {
	t.Helper()
	b, err := ParseBody(EndpointChat, data)
	if err != nil {
		return // refused: the engine never sees it
	}
	model, maxTokens, ok := engineView(data)
	if !ok || model != b.Model || maxTokens != b.MaxTokens {
		t.Errorf("%q: ILB routes %q booking max %d; the engine reads %q max %d (ok %v)", data, b.Model, b.MaxTokens, model, maxTokens, ok)
	}
}
