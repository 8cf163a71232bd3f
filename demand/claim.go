package demand

import (
	"math"

	"github.com/ilbproject/ilb/config"
)

// Limits are the rule by which one request of a model counts as demand,
// in token-cost units (config.Model.TokenCost), as ext_proc books it and
// the routing benchmark meters it:
//
//   - Its estimate (Estimate): the prompt's tokens (the client's evidence,
//     else the default prompt) and its output (max_tokens, else the
//     default output), capped by the model's context and
//     max_output_tokens.
//   - At the decision, its provisional share (Provisional): the
//     estimate, but never more than a typical request of its stream — an
//     Ordinary one, or what the stream's served requests cost (Typical)
//     when that is more — so that N requests claiming huge prompts or
//     max_tokens add at most N typical requests unless the engines take
//     them.
//   - A request refused for want of capacity (429, 503) counts as a
//     typical served request of its stream (Refused): shedding by plan or
//     by saturation picks requests whatever their size, so the refused
//     count as much as the served ones on average — on long-prompt
//     traffic far more than a default-sized request, which a refusal
//     counted at its provisional share would under-count (the controller
//     then sheds too little and the engines queue).
//   - As an engine serves it, the rest (Served): what the engine showed
//     it prefilled and generated, kept between what is booked and the
//     estimate.
//
// A Limits is a value; its methods are pure.
type Limits struct {
	// Model is the model's configuration: its token costs.
	Model config.Model
	// Context and MaxOutput are its context and output caps, in tokens.
	Context, MaxOutput float64
	// Ordinary is the cost of a request of the configured default size.
	Ordinary float64
	// DefaultPrompt and DefaultOutput are extproc.default_prompt_tokens
	// and default_output_tokens.
	DefaultPrompt, DefaultOutput float64
}

// NewLimits is model m's rule under ext_proc settings ep.
func NewLimits(ep config.ExtProc, m config.Model) Limits {
	l := Limits{
		Model: m, Context: float64(m.ContextTokens), MaxOutput: float64(m.MaxOutputTokens),
		DefaultPrompt: float64(ep.DefaultPromptTokens), DefaultOutput: float64(ep.DefaultOutputTokens),
	}
	l.Ordinary, _ = l.Estimate(0, false, 0)
	return l
}

// Estimate is a request's cost and the prompt tokens it counts, from its
// prompt's tokens (known: the client's evidence gave them; else the
// default prompt) and its max_tokens (0: unset, the default output).
func (l Limits) Estimate(promptTokens float64, known bool, maxTokens int) (cost, prompt float64) {
	prompt, output := l.Tokens(promptTokens, known, maxTokens)
	return l.Model.TokenCost(prompt, output), prompt
}

// Tokens is the prompt and output tokens Estimate counts, capped by the
// model's limits: what a token budget reserves for the request.
func (l Limits) Tokens(promptTokens float64, known bool, maxTokens int) (prompt, output float64) {
	prompt = min(l.DefaultPrompt, l.Context)
	if known {
		prompt = min(promptTokens, l.Context)
	}
	output = l.DefaultOutput
	if maxTokens > 0 {
		output = float64(maxTokens)
	}
	return prompt, min(output, l.MaxOutput, math.Max(1, l.Context-prompt))
}

// OverContext is how many times its model's context a prompt's estimate
// (its JSON's bytes / 4) must exceed for ILB to refuse it as too long.
// Tokenizers in common use average 3 to 5 bytes a token on prose, code
// and JSON (fewer on other scripts), so a prompt past twice the context
// by this estimate — more than 8 bytes of it per token of context —
// cannot fit. Nearer the limit only the engine's tokenizer can tell, and
// the engine does.
const OverContext = 2

// TooLong reports whether a prompt estimated at promptTokens certainly
// exceeds the model's context (OverContext).
func (l Limits) TooLong(promptTokens float64) bool {
	return l.Context > 0 && promptTokens > OverContext*l.Context
}

// Provisional is the share of an estimate of cost booked at the
// decision, before any engine accepted the request, whose stream's
// served requests typically cost typical (Typical.Of; 0: unknown).
func (l Limits) Provisional(cost, typical float64) float64 {
	return min(cost, max(l.Ordinary, typical))
}

// Refused is what a request estimated at cost counts when ILB refused
// it for want of capacity: a typical served request of its stream
// (Typical.Of), or, before its stream has one, its provisional share.
func (l Limits) Refused(cost, typical float64) float64 {
	if typical > 0 {
		return typical
	}
	return l.Provisional(cost, 0)
}

// Served is what a request estimated at cost counts once its engine
// showed prompt prefilled and generated output tokens, booked already
// counted: never less than booked (a report sent cannot be taken back),
// never more than the estimate.
func (l Limits) Served(cost, booked, prompt, generated float64) float64 {
	return min(max(l.Model.TokenCost(min(prompt, l.Context), min(generated, l.MaxOutput)), booked), cost)
}
