package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ilbproject/ilb/internal/bound"
)

// This file keeps the encoding/json implementation ParseBody replaced
// (parseBodyStd), with the ambiguity rules added since computed its own
// way (ambiguousStd: encoding/json's tokens, strings.EqualFold): the
// oracle of the differential fuzz test (FuzzBodyMatchesEncodingJSON).

// openAIBody is the subset of the request JSON ILB decodes. Prompt parts
// stay raw: ILB only needs their size.
type openAIBody struct {
	Model               json.RawMessage `json:"model"`
	Stream              *bool           `json:"stream"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	User                *string         `json:"user"`
	PromptCacheKey      *string         `json:"prompt_cache_key"`
	Messages            json.RawMessage `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	Input               json.RawMessage `json:"input"`
}

// parseBodyStd decodes and checks the JSON body of an OpenAI request. Every
// error is a *RequestError naming the field.
func parseBodyStd(ep Endpoint, data []byte) (Body, error) {
	var raw openAIBody
	if len(bytes.TrimSpace(data)) == 0 {
		return Body{}, badRequest("", "invalid_json", "the request body is empty: want a JSON object")
	}
	err := json.Unmarshal(data, &raw)
	var se *json.SyntaxError
	if err == nil || !errors.As(err, &se) {
		// Valid JSON: keys an engine could read otherwise come first.
		if name, key := ambiguousStd(data); name != "" {
			return Body{}, ambiguousKey(name, key)
		}
	}
	if err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te):
			if te.Field == "" {
				return Body{}, badRequest("", "invalid_json", fmt.Sprintf("the request body is a JSON %s: want a JSON object", bound.String(te.Value, bound.Excerpt)))
			}
			return Body{}, badRequest(bound.String(te.Field, bound.Excerpt), "invalid_type", fmt.Sprintf("field %s is a JSON %s: want %s",
				bound.Quote(te.Field, bound.Excerpt), bound.String(te.Value, bound.Excerpt), jsonKind(te.Type.String())))
		case errors.As(err, &se):
			return Body{}, badRequest("", "invalid_json", fmt.Sprintf("the request body is not valid JSON: %v (at byte %d)", se, se.Offset))
		default:
			return Body{}, badRequest("", "invalid_json", "the request body is not valid JSON: "+bound.String(err.Error(), bound.Excerpt))
		}
	}
	var b Body
	switch m := bytes.TrimSpace(raw.Model); {
	case len(m) == 0 || string(m) == "null":
		return Body{}, badRequest("model", "missing_required_parameter", "the request names no model: set the \"model\" field")
	default:
		if err := json.Unmarshal(m, &b.Model); err != nil {
			return Body{}, badRequest("model", "invalid_type", fmt.Sprintf("field \"model\" is %s: want a string", bound.String(string(m), bound.Excerpt)))
		}
		if b.Model == "" {
			return Body{}, badRequest("model", "missing_required_parameter", "field \"model\" is empty: name a model")
		}
	}
	if raw.MaxTokens != nil && raw.MaxCompletionTokens != nil && *raw.MaxTokens != *raw.MaxCompletionTokens {
		return Body{}, conflictingMax(fmt.Sprint(*raw.MaxTokens), fmt.Sprint(*raw.MaxCompletionTokens))
	}
	if raw.Stream != nil {
		b.Stream = *raw.Stream
	}
	switch {
	case raw.MaxCompletionTokens != nil:
		b.MaxTokens = *raw.MaxCompletionTokens
	case raw.MaxTokens != nil:
		b.MaxTokens = *raw.MaxTokens
	}
	if b.MaxTokens < 0 {
		return Body{}, badRequest("max_tokens", "invalid_value", fmt.Sprintf("max_tokens is %d: want a positive number", b.MaxTokens))
	}
	if raw.User != nil {
		b.User = *raw.User
	}
	if raw.PromptCacheKey != nil {
		b.PromptCacheKey = *raw.PromptCacheKey
	}
	field, prompt := promptOf(ep, raw)
	if field != "" && isAbsent(prompt) {
		return Body{}, badRequest(field, "missing_required_parameter", fmt.Sprintf("the request has no %q: %s needs it", field, ep))
	}
	b.PromptTokens = max(1, len(prompt)/4)
	b.PromptField = field
	if len(prompt) > 0 {
		b.Prompt = prompt // the raw JSON encoding/json kept: what the replica picker hashes
	}
	return b, nil
}

// promptOf returns the field that holds the prompt of an endpoint and its
// raw JSON.
func promptOf(ep Endpoint, raw openAIBody) (string, json.RawMessage) {
	switch ep {
	case EndpointChat:
		return "messages", raw.Messages
	case EndpointCompletions:
		return "prompt", raw.Prompt
	case EndpointEmbeddings:
		return "input", raw.Input
	}
	for _, p := range []json.RawMessage{raw.Messages, raw.Prompt, raw.Input} {
		if !isAbsent(p) {
			return "", p
		}
	}
	return "", nil
}

func isAbsent(r json.RawMessage) bool {
	t := string(bytes.TrimSpace(r))
	return t == "" || t == "null" || t == "[]" || t == `""`
}

// jsonKind names a Go type as the JSON a client should send.
func jsonKind(goType string) string {
	switch {
	case goType == "bool" || goType == "*bool":
		return "a boolean"
	case strings.Contains(goType, "int"):
		return "an integer"
	case strings.Contains(goType, "string"):
		return "a string"
	}
	return "another type"
}

// ambiguousStd walks the top-level object of valid JSON data with
// encoding/json's tokenizer and returns the first key, in order, that
// matches a field ILB reads (case-insensitively, as encoding/json
// matches) but is a repeat or not spelled exactly: the field's name and
// the key. "" when there is none (or data is not an object).
func ambiguousStd(data []byte) (name, key string) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", ""
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", ""
		}
		k, _ := t.(string)
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", ""
		}
		for _, n := range fieldNames[1:] {
			if !strings.EqualFold(k, n) {
				continue
			}
			if seen[n] || k != n {
				return n, k
			}
			seen[n] = true
		}
	}
	return "", ""
}
