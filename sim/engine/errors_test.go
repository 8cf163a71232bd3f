package engine

import (
	"net/http"
	"strings"
	"testing"
)

type errorResp struct {
	Error *struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func TestErrors(t *testing.T) {
	base := startServer(t, testOptions(nil))
	const (
		chat  = "/v1/chat/completions"
		cmpl  = "/v1/completions"
		embed = "/v1/embeddings"
	)
	msg := func(content string) string {
		return `{"model":"sim-model","messages":[{"role":"user","content":` + content + `}]}`
	}
	tests := []struct {
		name, method, path, body string
		status                   int
		param                    string // "" means null
		code                     string
		msg                      []string // substrings of the message
	}{
		{"bad JSON", "POST", chat, `{"model":`, 400, "", codeInvalidJSON, []string{"invalid JSON"}},
		{"empty body", "POST", chat, ``, 400, "", codeInvalidJSON, []string{"empty"}},
		{"body not an object", "POST", chat, `[1,2]`, 400, "", codeInvalidJSON, []string{"JSON object", "array"}},
		{"trailing garbage", "POST", chat, msg(`"x"`) + `}`, 400, "", codeInvalidJSON, []string{"invalid JSON"}},
		{"missing model", "POST", chat, `{"messages":[{"role":"user","content":"x"}]}`, 400, "model", codeMissingField, []string{"model"}},
		{"model wrong type", "POST", chat, `{"model":5,"messages":[]}`, 400, "model", codeInvalidType, []string{"number 5", "string"}},
		{"missing messages", "POST", chat, `{"model":"sim-model"}`, 400, "messages", codeMissingField, []string{"messages"}},
		{"empty messages", "POST", chat, `{"model":"sim-model","messages":[]}`, 400, "messages", codeInvalidValue, []string{"at least one"}},
		{"message not an object", "POST", chat, `{"model":"sim-model","messages":["hi"]}`, 400, "messages[0]", codeInvalidType, []string{"object", "string"}},
		{"missing role", "POST", chat, `{"model":"sim-model","messages":[{"content":"x"}]}`, 400, "messages[0].role", codeMissingField, nil},
		{"bad role", "POST", chat, `{"model":"sim-model","messages":[{"role":"user","content":"x"},{"role":"robot","content":"x"}]}`, 400, "messages[1].role", codeInvalidValue, []string{`"robot"`}},
		{"content number", "POST", chat, msg(`42`), 400, "messages[0].content", codeInvalidType, []string{"number 42"}},
		{"content part not text", "POST", chat, msg(`[{"type":"image_url","image_url":{"url":"x"}}]`), 400, "messages[0].content[0].type", codeInvalidValue, []string{`"image_url"`}},
		{"content part without text", "POST", chat, msg(`[{"type":"text"}]`), 400, "messages[0].content[0].text", codeMissingField, nil},
		{"content part text wrong type", "POST", chat, msg(`[{"type":"text","text":1}]`), 400, "messages[0].content[0].text", codeInvalidType, []string{"number"}},
		{"max_tokens zero", "POST", chat, `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"max_tokens":0}`, 400, "max_tokens", codeInvalidValue, []string{"0", "1..4096"}},
		{"max_tokens too big", "POST", chat, `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"max_tokens":4097}`, 400, "max_tokens", codeInvalidValue, []string{"4097"}},
		{"max_tokens fractional", "POST", chat, `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"max_tokens":1.5}`, 400, "max_tokens", codeInvalidType, []string{"1.5", "integer"}},
		{"max_tokens string", "POST", chat, `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"max_tokens":"ten"}`, 400, "max_tokens", codeInvalidType, []string{"string"}},
		{"max_completion_tokens negative", "POST", chat, `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"max_completion_tokens":-1}`, 400, "max_completion_tokens", codeInvalidValue, []string{"-1"}},
		{"stream wrong type", "POST", chat, `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"stream":"yes"}`, 400, "stream", codeInvalidType, []string{"boolean", `"yes"`}},
		{"include_usage wrong type", "POST", chat, `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":1}}`, 400, "stream_options.include_usage", codeInvalidType, nil},
		{"stream_options without stream", "POST", chat, `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}`, 400, "stream_options", codeInvalidValue, []string{"stream"}},
		{"n of 2", "POST", chat, `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"n":2}`, 400, "n", codeInvalidValue, []string{"2"}},
		{"unknown model", "POST", chat, `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, 404, "model", codeModelNotFound, []string{"gpt-9"}},
		{"completion missing prompt", "POST", cmpl, `{"model":"sim-model"}`, 400, "prompt", codeMissingField, nil},
		{"completion prompt number", "POST", cmpl, `{"model":"sim-model","prompt":7}`, 400, "prompt", codeInvalidType, []string{"number"}},
		{"completion prompt empty array", "POST", cmpl, `{"model":"sim-model","prompt":[]}`, 400, "prompt", codeInvalidValue, []string{"0 elements"}},
		{"completion prompt token ids", "POST", cmpl, `{"model":"sim-model","prompt":["a",1]}`, 400, "prompt[1]", codeInvalidType, []string{"number"}},
		{"completion unknown model", "POST", cmpl, `{"model":"other","prompt":"x"}`, 404, "model", codeModelNotFound, []string{"other"}},
		{"embedding missing input", "POST", embed, `{"model":"sim-model"}`, 400, "input", codeMissingField, nil},
		{"embedding bad encoding", "POST", embed, `{"model":"sim-model","input":"x","encoding_format":"hex"}`, 400, "encoding_format", codeInvalidValue, []string{`"hex"`}},
		{"embedding unknown model", "POST", embed, `{"model":"other","input":"x"}`, 404, "model", codeModelNotFound, nil},
		{"GET chat", "GET", chat, ``, 405, "", codeMethodNotAllowed, []string{"GET", "POST"}},
		{"PUT completions", "PUT", cmpl, `{}`, 405, "", codeMethodNotAllowed, []string{"PUT"}},
		{"POST models", "POST", "/v1/models", `{}`, 405, "", codeMethodNotAllowed, []string{"POST", "GET"}},
		{"DELETE health", "DELETE", "/health", ``, 405, "", codeMethodNotAllowed, nil},
		{"unknown path", "GET", "/v1/nope", ``, 404, "", codeNotFound, []string{"/v1/nope"}},
		{"model card of a model not served", "GET", "/v1/models/gpt-9", ``, 404, "model", codeModelNotFound, []string{"gpt-9"}},
		{"body over 8 MiB", "POST", chat, `{"model":"` + strings.Repeat("m", maxBodyBytes) + `"}`, 413, "", codeTooLarge, []string{"8388608"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := call(t, tc.method, base+tc.path, tc.body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if got := resp.Header.Get(HeaderReplica); got != testReplica {
				t.Errorf("%s = %q", HeaderReplica, got)
			}
			var e errorResp
			mustUnmarshal(t, body, &e)
			if e.Error == nil {
				t.Fatalf("no error object: %s", body)
			}
			if e.Error.Type != "invalid_request_error" || e.Error.Code == nil || *e.Error.Code != tc.code {
				t.Errorf("type %q code %v, want invalid_request_error %q", e.Error.Type, e.Error.Code, tc.code)
			}
			gotParam := ""
			if e.Error.Param != nil {
				gotParam = *e.Error.Param
			}
			if gotParam != tc.param {
				t.Errorf("param %q, want %q (message %q)", gotParam, tc.param, e.Error.Message)
			}
			if tc.param != "" && !strings.Contains(e.Error.Message, tc.param) {
				t.Errorf("message %q does not name the field %q", e.Error.Message, tc.param)
			}
			for _, w := range tc.msg {
				if !strings.Contains(e.Error.Message, w) {
					t.Errorf("message %q does not contain %q", e.Error.Message, w)
				}
			}
			if tc.status == http.StatusMethodNotAllowed && resp.Header.Get("Allow") == "" {
				t.Error("405 without Allow header")
			}
		})
	}
}
