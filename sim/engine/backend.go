package engine

import (
	"context"
	"errors"
	"fmt"
)

// Backend decides when tokens come out: it is the seam between the HTTP
// layer of a [Server] and the engine's timing model.
//
// Implementations must be safe for concurrent use: the server calls
// Generate once per choice of every request, from many goroutines, and Load
// at every /metrics scrape.
type Backend interface {
	// Generate admits req and returns a channel that yields exactly
	// req.MaxTokens tokens, with Index 0, 1, ... in order (or fewer if ctx
	// ends), then closes. Generate must not block on admission: a request
	// that cannot run yet is queued and counted in Load().Waiting.
	//
	// When ctx ends (client gone) the implementation stops producing,
	// releases everything the request held and closes the channel; the
	// caller need not drain it. Generate returns an error, and no channel,
	// if req is invalid (see [ErrInvalidGenRequest]) or ctx is already done.
	Generate(ctx context.Context, req GenRequest) (<-chan Token, error)
	// Load reports the instantaneous state, read at every /metrics scrape.
	Load() Load
}

// GenRequest is one generation request as seen by a [Backend]. A
// completions request with several prompts becomes one GenRequest per prompt.
type GenRequest struct {
	// Model is the served model name the request asked for: one of
	// [Options.Models], or of [Options.Adapters].
	Model string
	// Adapter is the LoRA adapter the request uses, "" for the base
	// model: the request's model when it is one of [Options.Adapters].
	// A backend that does not model LoRA serves it as a base-model
	// request.
	Adapter string
	// PromptTokens is the (estimated) prompt length in tokens, >= 0.
	PromptTokens int
	// MaxTokens is the number of tokens to generate, >= 1.
	MaxTokens int
}

// Token is one generated token.
type Token struct {
	// Index is the position of the token in the completion, from 0.
	Index int
	// Text is the token's text; concatenating the texts gives the completion.
	Text string
}

// Load is a backend's instantaneous state, reported as vLLM gauges.
type Load struct {
	// Running is the number of admitted requests (vllm:num_requests_running), >= 0.
	Running int
	// Waiting is the number of queued, not yet admitted requests
	// (vllm:num_requests_waiting), >= 0; vLLM reports its scheduler's
	// queue at the end of the last step.
	Waiting int
	// KVCacheUsage is the fraction of the KV cache in use
	// (vllm:kv_cache_usage_perc), in [0, 1].
	KVCacheUsage float64
}

// LoRAReporter is implemented by a [Backend] that models LoRA adapters;
// the server reads it at every /metrics scrape to export
// vllm:lora_requests_info.
type LoRAReporter interface {
	// LoRALoad reports the adapters' requests now.
	LoRALoad() LoRALoad
}

// LoRALoad is what a backend reports of its LoRA adapters, as vLLM's
// scheduler statistics do (SchedulerStats.running_lora_adapters and
// waiting_lora_adapters, vllm/v1/metrics/stats.py).
type LoRALoad struct {
	// MaxLoras is vLLM's --max-loras, the max_lora label; 0 means LoRA is
	// disabled.
	MaxLoras int
	// Adapters are the adapters with requests, running or waiting, in the
	// order the label lists them (vLLM: the order the adapters got their
	// requests).
	Adapters []AdapterLoad
}

// AdapterLoad is one adapter's requests.
type AdapterLoad struct {
	Name string
	// Running and Waiting count its admitted and its queued requests.
	Running, Waiting int
}

// ErrInvalidGenRequest is wrapped by the error a [Backend] returns for a
// [GenRequest] with MaxTokens < 1 or PromptTokens < 0.
var ErrInvalidGenRequest = errors.New("engine: invalid generation request")

// Validate reports whether r is acceptable to a [Backend]; the error wraps
// [ErrInvalidGenRequest].
func (r GenRequest) Validate() error {
	var errs []error
	if r.MaxTokens < 1 {
		errs = append(errs, fmt.Errorf("%w: MaxTokens %d, want >= 1", ErrInvalidGenRequest, r.MaxTokens))
	}
	if r.PromptTokens < 0 {
		errs = append(errs, fmt.Errorf("%w: PromptTokens %d, want >= 0", ErrInvalidGenRequest, r.PromptTokens))
	}
	return errors.Join(errs...)
}

// TokenText returns the deterministic text of the token at index i: the
// words of a fixed sentence in a cycle, each after the first preceded by a
// space (a negative i counts as 0). Backends should use it so that
// completions are reproducible.
func TokenText(i int) string {
	vocabulary := [...]string{
		"The", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog",
		"while", "a", "simulated", "engine", "streams", "tokens", "to", "you.",
	}
	if i <= 0 {
		return vocabulary[0]
	}
	return " " + vocabulary[i%len(vocabulary)]
}
