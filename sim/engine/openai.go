package engine

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// This file holds the OpenAI wire types the server reads and writes.

// chatRequest is the body of POST /v1/chat/completions. Polymorphic fields
// stay raw and are checked by the decoder, which knows their path.
type chatRequest struct {
	Model               string            `json:"model"`
	Messages            []json.RawMessage `json:"messages"`
	Stream              bool              `json:"stream"`
	StreamOptions       *streamOptions    `json:"stream_options"`
	MaxTokens           *int              `json:"max_tokens"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	N                   *int              `json:"n"`
	User                string            `json:"user"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type contentPart struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	MaxTokens     *int            `json:"max_tokens"`
	N             *int            `json:"n"`
	User          string          `json:"user"`
}

// embeddingRequest is the body of POST /v1/embeddings.
type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat *string         `json:"encoding_format"`
	User           string          `json:"user"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// completionObject is a chat.completion, chat.completion.chunk or
// text_completion object; the choice type depends on the object.
type completionObject struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Created           int64  `json:"created"`
	Model             string `json:"model"`
	SystemFingerprint string `json:"system_fingerprint"`
	Choices           any    `json:"choices"`
	Usage             *usage `json:"usage,omitempty"`
}

type assistantMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatChoice struct {
	Index        int              `json:"index"`
	Message      assistantMessage `json:"message"`
	Logprobs     any              `json:"logprobs"`
	FinishReason string           `json:"finish_reason"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     any       `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type textChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type embeddingList struct {
	Object string          `json:"object"`
	Data   []embeddingData `json:"data"`
	Model  string          `json:"model"`
	Usage  embeddingUsage  `json:"usage"`
}

type embeddingData struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

type embeddingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

type modelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Parent is a LoRA adapter's base model (vLLM's "parent"); absent for
	// a model.
	Parent string `json:"parent,omitempty"`
}

// Error codes of apiError.
const (
	codeInvalidJSON      = "invalid_json"
	codeMissingField     = "missing_required_parameter"
	codeInvalidValue     = "invalid_value"
	codeInvalidType      = "invalid_type"
	codeModelNotFound    = "model_not_found"
	codeMethodNotAllowed = "method_not_allowed"
	codeTooLarge         = "request_too_large"
	codeNotFound         = "not_found"
	codeServerError      = "internal_error"
)

// apiError is an OpenAI-style error; it is also the decoders' error type.
type apiError struct {
	Status  int     `json:"-"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

func (e *apiError) Error() string { return e.Message }

// badRequest returns a 400 error about param (empty: none).
func badRequest(code, param, format string, args ...any) *apiError {
	e := &apiError{
		Status:  http.StatusBadRequest,
		Message: fmt.Sprintf(format, args...),
		Type:    "invalid_request_error",
		Code:    code,
	}
	if param != "" {
		e.Param = &param
	}
	return e
}

// writeJSON writes v as a JSON response with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("engine: encode response: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if _, err := w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("engine: write response: %w", err)
	}
	return nil
}

// writeAPIError writes e as {"error": e}.
func writeAPIError(w http.ResponseWriter, e *apiError) error {
	return writeJSON(w, e.Status, struct {
		Error *apiError `json:"error"`
	}{e})
}
