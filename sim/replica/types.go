package replica

import (
	"fmt"
	"time"
)

// Request is one generation request submitted to a [Replica].
type Request struct {
	// ID identifies the request to the caller; the replica only passes it
	// through (and finds it by it in [Replica.Cancel]). IDs of requests in
	// the replica at the same time should differ.
	ID uint64
	// Prompt is the prompt length in tokens; values < 1 count as 1.
	Prompt int
	// Output is the number of tokens to generate; values < 1 count as 1.
	Output int
	// Prefix holds the hashes of the prompt's full blocks (BlockSize
	// tokens each) that may be shared with other requests, from the first
	// block on: a block's hash must identify the block and everything
	// before it (a chained hash, as vLLM's block hashes). Only used with
	// [Options.PrefixCache]; hashes past Prompt/BlockSize blocks are
	// ignored. The replica does not modify or keep the slice past the
	// request's life.
	Prefix []uint64
	// Adapter is the LoRA adapter the request uses; "" is the base model.
	// See [LoRA]: with LoRA disabled, a request with an adapter is
	// refused.
	Adapter string
	// Tag is passed through to the [Result] and the token hook.
	Tag any
}

// Result is what became of a request: completed, or Failed.
//
// Times are durations since the start of the experiment (the caller's
// time axis). FirstToken and Done are the ends of the steps that produced
// the first and the last token.
type Result struct {
	ID  uint64
	Tag any
	// Adapter is the request's [Request.Adapter].
	Adapter string
	// Arrival is when the request was submitted.
	Arrival time.Duration
	// FirstToken is when its first token was produced; 0 if none was (a
	// Failed request that never got that far).
	FirstToken time.Duration
	// Done is when it completed, or when it failed.
	Done time.Duration
	// Prompt is the prompt length in tokens as modelled (at least 1).
	Prompt int
	// Output is the number of tokens generated: the requested count when
	// completed, possibly fewer when Failed.
	Output int
	// CachedPrompt is the number of prompt tokens found in the prefix
	// cache at the request's last admission (not prefilled then).
	CachedPrompt int
	// Preemptions counts how often the request was preempted (its KV cache
	// freed, to be recomputed later).
	Preemptions int
	// AdapterCost is what loading and activating the request's adapter
	// added to the steps that scheduled it ([LoRA.LoadTime],
	// [LoRA.ActivateTime]); 0 when its adapter was always resident.
	AdapterCost time.Duration
	// AdapterWait is the time the request waited because its adapter
	// would have been one too many in the batch ([LoRA.MaxLoras]): the
	// total duration of the steps that skipped it for that reason.
	AdapterWait time.Duration
	// Failed is set when the request did not complete: the replica failed
	// with it inside, or refused it (submitted while draining or failed,
	// too long for the whole KV cache — vLLM rejects those up front — or
	// for an adapter with LoRA disabled).
	Failed bool
}

// Load is a replica's instantaneous state, cheap to read (O(1)): what a
// router or a metrics scrape sees.
type Load struct {
	State State
	// Waiting is the number of queued requests, not admitted (or preempted
	// and not yet readmitted), now.
	Waiting int
	// ReportedWaiting is what vLLM's num_requests_waiting shows: its
	// scheduler's queue at the end of the last step — the requests that
	// step did not admit (Scheduler.make_stats, called at the end of
	// update_from_output). A request that arrived during the step is not
	// in it: the engine core adds new requests between steps. At most
	// Waiting (a request cancelled since has left).
	ReportedWaiting int
	// Running is the number of admitted requests (vLLM's
	// num_requests_running), <= the profile's MaxSeqs.
	Running int
	// KVUsage is the fraction of KV cache blocks held by running requests,
	// in [0, 1] (vLLM's kv_cache_usage_perc: blocks that are only cached
	// for prefix reuse count as free).
	KVUsage float64
	// KVBlocksUsed and KVBlocks are the blocks held and the total.
	KVBlocksUsed, KVBlocks int
	// PendingTokens is the work left for the requests in the replica, in
	// scheduled tokens: prompt tokens still to prefill (again, after a
	// preemption) plus output tokens still to decode. A least-loaded router
	// can weigh replicas by it.
	PendingTokens int
	// Preemptions is the total number of preemptions since the replica was
	// created.
	Preemptions int
	// PromptTokens and GenerationTokens are counters since the replica was
	// created, as vLLM's prompt_tokens_total and generation_tokens_total:
	// a request's prompt counts once, when its first token is sampled.
	PromptTokens, GenerationTokens int64
	// BatchTokens and BatchSeqs are the tokens and sequences of the step in
	// progress (0 when idle); BatchTokens <= MaxBatchedTokens.
	BatchTokens, BatchSeqs int
}

// State is a replica's lifecycle state, driven by [Replica.SetState].
type State int

// The lifecycle states. A new replica is Ready.
const (
	// Starting: the engine is loading; requests queue but none is
	// admitted.
	Starting State = iota + 1
	// Warming: serving, each step slower by a factor that decays linearly
	// from [Options.WarmupSlowdown] to 1 over [Options.WarmupTime] after
	// entering the state.
	Warming
	// Ready: serving at full speed.
	Ready
	// Draining: new submissions are refused (Failed); waiting and running
	// requests are still admitted and finish.
	Draining
	// Failed: every request inside failed at once, new ones are refused,
	// and the KV cache (prefix cache included) and the loaded LoRA
	// adapters (GPU slots and CPU cache) are lost. Setting Starting,
	// Warming or Ready afterwards models a restart.
	Failed
)

// String returns the state's lower-case name.
func (s State) String() string {
	switch s {
	case Starting:
		return "starting"
	case Warming:
		return "warming"
	case Ready:
		return "ready"
	case Draining:
		return "draining"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// serving reports whether the state admits requests from the waiting
// queue.
func (s State) serving() bool { return s == Warming || s == Ready || s == Draining }

// accepting reports whether the state takes new submissions.
func (s State) accepting() bool { return s == Starting || s == Warming || s == Ready }
