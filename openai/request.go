package openai

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/ilbproject/ilb/internal/bound"
)

// Endpoint is the OpenAI API a request calls.
type Endpoint string

// Endpoints ILB parses. Other paths are routed by the source's default
// model (or x-ilb-model) without reading the body.
const (
	EndpointChat        Endpoint = "chat/completions"
	EndpointCompletions Endpoint = "completions"
	EndpointEmbeddings  Endpoint = "embeddings"
	EndpointOther       Endpoint = "other"
)

// EndpointOf maps a request path (query string ignored) to its endpoint by
// suffix, so /v1/chat/completions and /openai/v1/chat/completions match.
func EndpointOf(path string) Endpoint {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	path = strings.TrimSuffix(path, "/")
	for _, e := range []Endpoint{EndpointChat, EndpointCompletions, EndpointEmbeddings} {
		if strings.HasSuffix(path, "/"+string(e)) {
			return e
		}
	}
	return EndpointOther
}

// Body is what ILB reads of an OpenAI request body.
type Body struct {
	Model          string
	Stream         bool
	MaxTokens      int // 0 when absent
	User           string
	PromptCacheKey string
	// PromptTokens estimates the prompt length: bytes of the prompt's JSON
	// (messages, prompt or input) divided by 4, at least 1.
	PromptTokens int
	// Prompt is the prompt's raw JSON (it shares the body's memory): the
	// replica picker hashes its leading blocks.
	Prompt []byte
	// PromptField names the field the prompt is in (messages, prompt,
	// input); "" for an endpoint ILB does not parse.
	PromptField string
}

// ParseBody reads and checks the JSON body of an OpenAI request with
// encoding/json's rules and errors — the same syntax errors at the same
// offsets, the first wrongly typed field in document order, the last of
// duplicate keys, keys matched case-insensitively, strings decoded as
// Unmarshal decodes them — in one pass that decodes only the fields ILB
// reads: the prompt is measured, never decoded or copied. Every error is
// a *RequestError naming the field.
func ParseBody(ep Endpoint, data []byte) (Body, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return Body{}, badRequest("", "invalid_json", "the request body is empty: want a JSON object")
	}
	sc, serr := scanBody(data)
	if serr != nil {
		return Body{}, badRequest("", "invalid_json", fmt.Sprintf("the request body is not valid JSON: %s (at byte %d)", serr.msg, serr.offset))
	}
	if f := sc.ambiguous; f != fieldNone {
		return Body{}, ambiguousKey(fieldNames[f], sc.ambiguousKey)
	}
	if te := sc.typeErr; te != nil {
		if te.field == fieldNone {
			return Body{}, badRequest("", "invalid_json", fmt.Sprintf("the request body is a JSON %s: want a JSON object", bound.String(te.value, bound.Excerpt)))
		}
		name := fieldNames[te.field]
		return Body{}, badRequest(name, "invalid_type", fmt.Sprintf("field %s is a JSON %s: want %s",
			bound.Quote(name, bound.Excerpt), bound.String(te.value, bound.Excerpt), te.want))
	}
	var b Body
	switch m := sc.vals[fieldModel]; {
	case m == nil || string(m) == "null":
		return Body{}, badRequest("model", "missing_required_parameter", "the request names no model: set the \"model\" field")
	case m[0] != '"':
		return Body{}, badRequest("model", "invalid_type", fmt.Sprintf("field \"model\" is %s: want a string", bound.String(string(m), bound.Excerpt)))
	default:
		if b.Model = unquote(m); b.Model == "" {
			return Body{}, badRequest("model", "missing_required_parameter", "field \"model\" is empty: name a model")
		}
	}
	// The fields' types were checked: a value is null (absent) or fits.
	if v, w := sc.vals[fieldMaxTokens], sc.vals[fieldMaxCompletionTokens]; !absent(v) && !absent(w) && string(v) != string(w) {
		return Body{}, conflictingMax(string(v), string(w))
	}
	b.Stream = string(sc.vals[fieldStream]) == "true"
	for _, f := range []bodyField{fieldMaxCompletionTokens, fieldMaxTokens} {
		if v := sc.vals[f]; v != nil && v[0] != 'n' {
			n, _ := strconv.ParseInt(string(v), 10, 64) // checked by note
			b.MaxTokens = int(n)
			break
		}
	}
	if b.MaxTokens < 0 {
		return Body{}, badRequest("max_tokens", "invalid_value", fmt.Sprintf("max_tokens is %d: want a positive number", b.MaxTokens))
	}
	if v := sc.vals[fieldUser]; v != nil && v[0] == '"' {
		b.User = unquote(v)
	}
	if v := sc.vals[fieldPromptCacheKey]; v != nil && v[0] == '"' {
		b.PromptCacheKey = unquote(v)
	}
	field, prompt := promptField(ep, &sc)
	if field != fieldNone && absent(prompt) {
		return Body{}, badRequest(fieldNames[field], "missing_required_parameter", fmt.Sprintf("the request has no %q: %s needs it", fieldNames[field], ep))
	}
	b.PromptTokens = max(1, len(prompt)/4)
	b.Prompt = prompt
	if field != fieldNone {
		b.PromptField = fieldNames[field]
	}
	return b, nil
}

// promptField returns the field that holds the prompt of an endpoint
// and its raw JSON; for other endpoints, the first of messages, prompt
// and input present (fieldNone: none is required).
func promptField(ep Endpoint, sc *bodyScan) (bodyField, []byte) {
	switch ep {
	case EndpointChat:
		return fieldMessages, sc.vals[fieldMessages]
	case EndpointCompletions:
		return fieldPrompt, sc.vals[fieldPrompt]
	case EndpointEmbeddings:
		return fieldInput, sc.vals[fieldInput]
	}
	for _, f := range []bodyField{fieldMessages, fieldPrompt, fieldInput} {
		if v := sc.vals[f]; !absent(v) {
			return fieldNone, v
		}
	}
	return fieldNone, nil
}

// absent reports whether a prompt's raw JSON says there is none: missing,
// null, "" or [].
func absent(v []byte) bool {
	return len(v) == 0 || string(v) == "null" || string(v) == "[]" || string(v) == `""`
}

// ambiguousKey is the error of a body whose top-level key (decoded) an
// engine could read otherwise than ILB: a second key for field name, or a
// case variant of it. Python's json (vLLM's, SGLang's) keeps the last of
// duplicates and matches keys exactly; ILB would route on another value.
func ambiguousKey(name, key string) error {
	what := fmt.Sprintf("key %q appears more than once", name)
	if key != name {
		what = fmt.Sprintf("key %s is a case variant of %q", bound.Quote(key, bound.Excerpt), name)
	}
	return badRequest(name, "ambiguous_key", what+": an engine could read another value than the one ILB routes on; send each key once, spelled exactly")
}

// conflictingMax is the error of a body with both max_tokens and
// max_completion_tokens (raw JSON) of different values: engines pick
// between them differently (vLLM takes max_completion_tokens unless it
// is 0), so the output ILB books could differ from what is generated.
func conflictingMax(maxTokens, maxCompletion string) error {
	return badRequest("max_completion_tokens", "ambiguous_key",
		fmt.Sprintf("max_tokens is %s and max_completion_tokens is %s: engines choose between them differently; send one", bound.String(maxTokens, bound.Excerpt), bound.String(maxCompletion, bound.Excerpt)))
}
