package engine

import (
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"
)

// Request limits.
const (
	defaultMaxTokens = 16      // max_tokens when the request has none
	maxMaxTokens     = 4096    // largest accepted max_tokens
	maxBatch         = 2048    // most prompts or embedding inputs in one request
	maxBodyBytes     = 8 << 20 // largest accepted request body
)

// genJob is a validated chat or completions request.
type genJob struct {
	chat         bool
	model        string
	prompts      []int // estimated prompt tokens, one per choice; len >= 1
	maxTokens    int   // 1..maxMaxTokens
	stream       bool
	includeUsage bool
}

// embedJob is a validated embeddings request.
type embedJob struct {
	model  string
	inputs []string // len 1..maxBatch
	base64 bool
}

// chatRoles are the accepted message roles.
func chatRoles() []string {
	return []string{"system", "developer", "user", "assistant", "tool", "function"}
}

// decodeChat decodes and validates a /v1/chat/completions body.
func decodeChat(body []byte) (genJob, *apiError) {
	var req chatRequest
	if e := unmarshalObject(body, &req, ""); e != nil {
		return genJob{}, e
	}
	if req.Model == "" {
		return genJob{}, badRequest(codeMissingField, "model", "model: required, must be a non-empty string")
	}
	if len(req.Messages) == 0 {
		if req.Messages == nil {
			return genJob{}, badRequest(codeMissingField, "messages", "messages: required")
		}
		return genJob{}, badRequest(codeInvalidValue, "messages", "messages: must contain at least one message, got []")
	}
	chars := 0
	for i, raw := range req.Messages {
		path := fmt.Sprintf("messages[%d]", i)
		var m chatMessage
		if e := unmarshalObject(raw, &m, path); e != nil {
			return genJob{}, e
		}
		if m.Role == "" {
			return genJob{}, badRequest(codeMissingField, path+".role", "%s.role: required", path)
		}
		if !slices.Contains(chatRoles(), m.Role) {
			return genJob{}, badRequest(codeInvalidValue, path+".role",
				"%s.role: unsupported role %q, want one of %q", path, m.Role, chatRoles())
		}
		n, e := contentChars(m.Content, path+".content")
		if e != nil {
			return genJob{}, e
		}
		chars += n
	}
	job := genJob{chat: true, model: req.Model, prompts: []int{estimateTokens(chars)}, stream: req.Stream}
	var e *apiError
	if job.maxTokens, e = maxTokens(req.MaxTokens, req.MaxCompletionTokens); e != nil {
		return genJob{}, e
	}
	if job.includeUsage, e = commonOptions(req.N, req.Stream, req.StreamOptions); e != nil {
		return genJob{}, e
	}
	return job, nil
}

// decodeCompletion decodes and validates a /v1/completions body.
func decodeCompletion(body []byte) (genJob, *apiError) {
	var req completionRequest
	if e := unmarshalObject(body, &req, ""); e != nil {
		return genJob{}, e
	}
	if req.Model == "" {
		return genJob{}, badRequest(codeMissingField, "model", "model: required, must be a non-empty string")
	}
	prompts, e := stringOrStrings(req.Prompt, "prompt")
	if e != nil {
		return genJob{}, e
	}
	job := genJob{model: req.Model, stream: req.Stream}
	for _, p := range prompts {
		job.prompts = append(job.prompts, estimateTokens(utf8.RuneCountInString(p)))
	}
	if job.maxTokens, e = maxTokens(req.MaxTokens, nil); e != nil {
		return genJob{}, e
	}
	if job.includeUsage, e = commonOptions(req.N, req.Stream, req.StreamOptions); e != nil {
		return genJob{}, e
	}
	return job, nil
}

// decodeEmbedding decodes and validates a /v1/embeddings body.
func decodeEmbedding(body []byte) (embedJob, *apiError) {
	var req embeddingRequest
	if e := unmarshalObject(body, &req, ""); e != nil {
		return embedJob{}, e
	}
	if req.Model == "" {
		return embedJob{}, badRequest(codeMissingField, "model", "model: required, must be a non-empty string")
	}
	inputs, e := stringOrStrings(req.Input, "input")
	if e != nil {
		return embedJob{}, e
	}
	job := embedJob{model: req.Model, inputs: inputs}
	if f := req.EncodingFormat; f != nil {
		switch *f {
		case "float":
		case "base64":
			job.base64 = true
		default:
			return embedJob{}, badRequest(codeInvalidValue, "encoding_format",
				`encoding_format: unsupported value %q, want "float" or "base64"`, *f)
		}
	}
	return job, nil
}

// maxTokens checks max_tokens and max_completion_tokens; the latter wins
// when both are set, as in vLLM.
func maxTokens(mt, mct *int) (int, *apiError) {
	n := defaultMaxTokens
	for _, f := range []struct {
		name string
		v    *int
	}{{"max_tokens", mt}, {"max_completion_tokens", mct}} {
		if f.v == nil {
			continue
		}
		if *f.v < 1 || *f.v > maxMaxTokens {
			return 0, badRequest(codeInvalidValue, f.name, "%s: %d out of range, want 1..%d", f.name, *f.v, maxMaxTokens)
		}
		n = *f.v
	}
	return n, nil
}

// commonOptions checks n and stream_options and reports include_usage.
func commonOptions(n *int, stream bool, so *streamOptions) (bool, *apiError) {
	if n != nil && *n != 1 {
		return false, badRequest(codeInvalidValue, "n", "n: %d unsupported, this engine returns exactly 1 choice per prompt", *n)
	}
	if so == nil {
		return false, nil
	}
	if !stream {
		return false, badRequest(codeInvalidValue, "stream_options", "stream_options: only allowed when stream is true")
	}
	return so.IncludeUsage, nil
}

// contentChars validates a message content (string, array of text parts or
// null) at path and returns its length in characters.
func contentChars(raw json.RawMessage, path string) (int, *apiError) {
	switch jsonKind(raw) {
	case "null":
		return 0, nil
	case "string":
		var s string
		if e := unmarshalValue(raw, &s, path); e != nil {
			return 0, e
		}
		return utf8.RuneCountInString(s), nil
	case "array":
		var parts []json.RawMessage
		if e := unmarshalValue(raw, &parts, path); e != nil {
			return 0, e
		}
		n := 0
		for j, rawPart := range parts {
			pp := fmt.Sprintf("%s[%d]", path, j)
			var p contentPart
			if e := unmarshalObject(rawPart, &p, pp); e != nil {
				return 0, e
			}
			switch {
			case p.Type == "":
				return 0, badRequest(codeMissingField, pp+".type", "%s.type: required", pp)
			case p.Type != "text":
				return 0, badRequest(codeInvalidValue, pp+".type",
					`%s.type: unsupported content part type %q, this engine serves text only ("text")`, pp, p.Type)
			case p.Text == nil:
				return 0, badRequest(codeMissingField, pp+".text", "%s.text: required for a text part", pp)
			}
			n += utf8.RuneCountInString(*p.Text)
		}
		return n, nil
	}
	return 0, badRequest(codeInvalidType, path,
		"%s: must be a string or an array of content parts, got JSON %s", path, describe(raw))
}

// stringOrStrings validates a field (param) that is a string or a non-empty
// array of at most maxBatch strings.
func stringOrStrings(raw json.RawMessage, param string) ([]string, *apiError) {
	switch jsonKind(raw) {
	case "null":
		return nil, badRequest(codeMissingField, param, "%s: required, a string or an array of strings", param)
	case "string":
		var s string
		if e := unmarshalValue(raw, &s, param); e != nil {
			return nil, e
		}
		return []string{s}, nil
	case "array":
		var elems []json.RawMessage
		if e := unmarshalValue(raw, &elems, param); e != nil {
			return nil, e
		}
		if len(elems) == 0 || len(elems) > maxBatch {
			return nil, badRequest(codeInvalidValue, param, "%s: array of %d elements, want 1..%d", param, len(elems), maxBatch)
		}
		out := make([]string, len(elems))
		for i, el := range elems {
			p := fmt.Sprintf("%s[%d]", param, i)
			if jsonKind(el) != "string" {
				return nil, badRequest(codeInvalidType, p, "%s: must be a string, got JSON %s", p, describe(el))
			}
			if e := unmarshalValue(el, &out[i], p); e != nil {
				return nil, e
			}
		}
		return out, nil
	}
	return nil, badRequest(codeInvalidType, param, "%s: must be a string or an array of strings, got JSON %s", param, describe(raw))
}

// estimateTokens is the prompt token estimate for chars characters.
func estimateTokens(chars int) int { return max(1, (chars+3)/4) }
