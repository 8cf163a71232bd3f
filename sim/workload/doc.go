// Package workload builds request workloads for routing experiments in
// virtual time: lists of [Request] sorted by arrival, either replayed from a
// real trace or generated from a [Spec].
//
// # Traces
//
// [ReadAzureCSV] reads the Azure LLM inference trace 2023 (Azure Public
// Dataset, the data behind Patel et al., "Splitwise: Efficient generative LLM
// inference using phase splitting", ISCA 2024; licence CC-BY 4.0, keep this
// attribution wherever the data is used), [ReadJSONL] reads Mooncake-style
// JSON lines, and [LoadTrace] picks one by file extension. A [Replay]
// time-shifts and rate-scales a trace for one source and loops it to any
// duration. Rate scaling compresses (or stretches) time, so the burst shape
// of the trace is kept at the scaled time scale; no request is dropped or
// invented.
//
// # Synthetic workloads
//
// [Generate] draws, for every [SourceSpec] of a [Spec], a non-homogeneous
// renewal process whose rate is a daily sine (peak at local 14:00, in the
// source's time zone) times burst windows, with Gamma-distributed
// inter-arrival times (shape 1 is Poisson, a smaller shape is burstier). The
// two are combined by time rescaling: a stationary unit-rate Gamma renewal
// process is drawn in operational time u and every point is mapped to
// t = Λ⁻¹(u), where Λ is the integral of the rate. For shape 1 this is an
// exact non-homogeneous Poisson process; for other shapes the coefficient of
// variation of the gaps is kept wherever the rate changes slowly compared
// with the gaps. (Thinning would not do: it drifts a Gamma process towards
// Poisson.)
//
// Prompt and output lengths are lognormal, parametrised by mean and 99th
// percentile, or drawn as pairs from the rows of a trace. Part of the
// requests are turns of multi-turn sessions: a session keeps its model and
// priority, its later turns arrive at least a think time apart, and each
// turn's prompt is the previous prompt plus its answer plus a new message.
//
// # Prefix hashes
//
// [Request.Prefix] lists one hash per full [BlockTokens]-token block of the
// prompt, chained as in vLLM's prefix cache: a block's hash depends on every
// token before it, so two prompts with the same first n blocks have the same
// first n hashes. The system prompt of a source and model
// ([SourceSpec.SharedPrefixTokens]) hashes the same in every request of that
// source and model, whatever the seed; a session's history hashes the same in
// all its later turns.
//
// # Documents
//
// A source may also have a pool of documents ([SourceSpec.Documents]), as
// retrieval-augmented generation puts in prompts: a request's prompt is
// then the system prompt, a few distinct documents drawn with Zipf
// popularity (a few documents are hot), in the order drawn, and the
// question. Its Prefix holds the full blocks of the system prompt and
// documents, chained: two requests share the blocks of the system prompt
// and of their common leading documents only, so requests whose first
// documents differ share the system prompt alone, even if they share every
// other document. A document's tokens depend on the source, the seed and
// its index. A session draws documents at its first turn and keeps them as
// history. Documents are drawn from their own random stream, so adding
// them to a source changes its prompts and prefixes only. Documents are
// never cut: [Spec.Validate] wants the system prompt and documents shorter
// than [MaxTokens], and the question is cut to fit instead.
//
// Everything is deterministic per seed: randomness comes from math/rand/v2
// PCG generators seeded from [Spec.Seed] or [Replay.Seed], one stream per
// source and purpose, so that changing one source does not reshuffle
// another.
package workload
