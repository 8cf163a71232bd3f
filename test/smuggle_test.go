package test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/header"
)

// TestPathAndBodySmuggling: requests whose path or body an engine would
// read otherwise than ILB decides on (issue 24: a path the engine decodes
// to chat/completions while ILB took it for "other" and routed on a
// header naming another model; a body whose model or output bound depends
// on how duplicate or case-variant keys are read) are answered by ILB
// with a 400 naming the ambiguity, through the demo's Envoy, and reach no
// engine: 0 requests whose engine-visible model or max_tokens differs
// from ILB's decision.
func TestPathAndBodySmuggling(t *testing.T) {
	s := startStack(t, nil)
	url := envoyURL(t, s, "edge-us")
	const llama, qwen = "llama-3.1-8b-instruct", "qwen2.5-7b-instruct"
	body := `{"model":"` + llama + `","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	for _, c := range []struct {
		name, path, body, code string
	}{
		{"an escaped letter", "/v1/chat/completion%73", body, "ambiguous_path"},
		{"an escaped slash", "/v1/chat%2Fcompletions", body, "ambiguous_path"},
		{"a path parameter", "/v1/chat/completions;x", body, "ambiguous_path"},
		{"dot segments to an engine's metrics", "/v1/../metrics", "", "ambiguous_path"},
		{"escaped dot segments", "/v1/%2e%2e/metrics", "", "ambiguous_path"},
		{"half-escaped dot segments", "/v1/..%2fmetrics", "", "ambiguous_path"},
		{"a case-variant model key", "/v1/chat/completions", `{"model":"` + llama + `","MODEL":"` + qwen + `","messages":[{"role":"user","content":"hi"}]}`, "ambiguous_key"},
		{"a duplicate max_tokens", "/v1/chat/completions", `{"model":"` + llama + `","max_tokens":32768,"MAX_TOKENS":1,"messages":[{"role":"user","content":"hi"}]}`, "ambiguous_key"},
		{"max_tokens against max_completion_tokens", "/v1/chat/completions", `{"model":"` + llama + `","max_completion_tokens":0,"max_tokens":32768,"messages":[{"role":"user","content":"hi"}]}`, "ambiguous_key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			method := http.MethodPost
			if c.body == "" {
				method = http.MethodGet
			}
			resp, b := do(t, method, url+c.path, c.body, map[string]string{header.Model: qwen, "content-type": "application/json"})
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"code":"`+c.code+`"`) {
				t.Fatalf("%s %s: %d %s; want ILB's 400 %s", method, c.path, resp.StatusCode, b, c.code)
			}
			if by := servedBy(resp, b); by != "" {
				t.Errorf("an engine (%s) answered", by)
			}
		})
	}
}
