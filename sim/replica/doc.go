// Package replica is an iteration-level model of one vLLM-like LLM engine
// replica: continuous batching with chunked prefill, a paged KV cache with
// preemption by recompute, an optional prefix cache, and a step time from a
// per-(GPU, model) [Profile]. It runs in virtual time, for fast
// discrete-event experiments ([Replica]), and in real time behind the
// OpenAI-compatible simulated engine of package sim/engine ([Backend]).
//
// # Model
//
// It follows vLLM v1's scheduler (vllm/v1/core/sched/scheduler.py,
// FCFS policy; see [Replica] and the comments of the scheduling code):
//
//   - Every step builds a batch: first the running requests in admission
//     order (a decoding one takes 1 token of the step's token budget,
//     MaxBatchedTokens; one still prefilling takes a chunk of its prompt),
//     then waiting requests in FIFO order while the budget lasts, fewer
//     than MaxSeqs run and their first chunk's KV blocks can be allocated.
//     A prompt longer than the budget is prefilled over several steps.
//   - A request's first token comes out of the step that completes its
//     prefill, then one token per step.
//   - The KV cache is BlockSize-token blocks; a sequence holds
//     ceil(computed tokens / BlockSize) of them. When a running request
//     needs a block and none is free, the most recently admitted running
//     request is preempted: its blocks are freed and it goes back to the
//     front of the waiting queue, to prefill its prompt and the tokens it
//     generated again (vLLM's recompute preemption). No waiting request is
//     admitted in a step that preempted.
//   - With the prefix cache, the blocks named by [Request.Prefix] hashes
//     stay cached after their requests end, until evicted (least recently
//     freed first) by allocations; a request admitted later skips the
//     prefill of its leading cached blocks ([Result.CachedPrompt]).
//   - With [Options.LoRA], a request may use a LoRA adapter
//     ([Request.Adapter]): a batch holds at most MaxLoras distinct
//     adapters (a waiting request of one more adapter is skipped, and
//     those behind it may still be admitted), and a step whose batch
//     needs an adapter that is not in a GPU slot takes longer, by the
//     time to load it from disk into the CPU cache (if not there either)
//     and to copy it into a slot. Both caches evict the least recently
//     used adapter. [Replica.Adapters] reports each adapter's running and
//     waiting requests, as vLLM's vllm:lora_requests_info is built from.
//   - A step of T tokens whose decoding sequences hold C context tokens in
//     all takes [Profile.StepTime](T, C), plus adapter loading.
//   - The waiting count the engine reports ([Load.ReportedWaiting], what
//     the simulated engine exports as vllm:num_requests_waiting) is the
//     queue the last step left unadmitted: vLLM makes its scheduler
//     statistics at the end of each step (Scheduler.make_stats, from
//     update_from_output), and its engine core adds a request that
//     arrives during a step to the queue before the next. [Load.Waiting]
//     is the queue now.
//
// Lifecycle states ([State]) are set by the caller with [Replica.SetState].
//
// # Time
//
// Times are durations since the start of the experiment. A step starts
// when the previous one ends, or, on an idle replica, at the time of the
// Submit (or SetState) that gives it work; its composition is decided when
// it starts, so a request submitted during a step joins at the next one.
// A step is started by [Replica.Next], or by a call that advances time past
// its start; requests submitted at the same instant before that join it.
// Tokens and completions happen at the end of the step that produces them.
// Callers pass non-decreasing times.
//
// The virtual path does not allocate in steady state: sequences and
// prefix-cache entries are recycled, and [Replica.Advance] appends to the
// caller's slice. One simulated hour of one replica at ~15 req/s of
// Azure-conversation traffic costs a fraction of a second of CPU (see
// BenchmarkVirtualHour).
//
// # Real time
//
// [Backend] implements sim/engine's Backend: a goroutine steps a Replica
// on an injected [Clock], sleeping until each step's end, and streams
// every request's tokens as their steps end; a client that goes away frees
// its KV blocks and slot at once ([Replica.Cancel]).
//
// # Determinism and concurrency
//
// A Replica has no clock, no randomness and no map iteration: the same
// calls give the same results (adapter names are looked up in a map, never
// iterated). It is not safe for concurrent use; a
// Backend is.
package replica
