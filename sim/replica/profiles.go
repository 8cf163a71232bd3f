package replica

import "time"

// Names of the shipped profiles, for [LookupProfile].
const (
	ProfileLlama3x8BH100     = "llama-3-8b/h100"
	ProfileLlama3x8BA100     = "llama-3-8b/a100-80gb"
	ProfileLlama3x70BH100TP4 = "llama-3-70b/h100-tp4"
)

// KV cache bytes per token: 2 (K and V) x layers x KV heads x head dim x
// 2 bytes (bf16). Llama 3 8B: 32 layers, 8 KV heads (GQA), head dim 128;
// Llama 3 70B: 80 layers, 8 KV heads, head dim 128 (the models' config.json).
const (
	kvPerTokenLlama3x8B  = 2 * 32 * 8 * 128 * 2 // 131072 B = 128 KiB
	kvPerTokenLlama3x70B = 2 * 80 * 8 * 128 * 2 // 327680 B = 320 KiB
)

// Profiles returns the calibrated profiles, a fresh slice at each call.
//
// What is derived and what is estimated, for all of them:
//
//   - KVBytesPerToken is exact arithmetic on the model architecture.
//   - KVCacheBytes follows vLLM's memory plan: gpu_memory_utilization 0.9
//     of the GPUs' memory, minus the bf16 weights, minus an estimated
//     3.5-5 GiB per GPU of activations, CUDA graphs and NCCL buffers
//     (estimate; vLLM logs the real figure as "GPU KV cache size").
//   - Floor is the time to stream the weights from HBM at ~80% of peak
//     bandwidth (H100 SXM 3.35 TB/s, A100 80GB 2.0 TB/s); FloorTokens is
//     where a step turns compute-bound (estimate).
//   - PerToken is the marginal prefill cost: 2 x parameters FLOP per token
//     at an effective fraction of bf16 peak (estimate, checked against
//     public vLLM prefill throughput figures of ~45-50k tokens/s for an 8B
//     model on one H100).
//   - PerContextToken is the KV bytes of a token read once per decode step
//     at ~40% of peak bandwidth (paged attention over mixed batches);
//     for the H100 8B profile it is the free parameter fitted so that one
//     replica saturates at 16-20 req/s of Azure-conversation traffic
//     (mean 1155 prompt / 211 output tokens). Estimate.
//   - Overhead is vLLM v1's per-step CPU work (scheduling, sampling,
//     detokenizing), fitted to a batch-1 inter-token latency of 7-8 ms on
//     H100 for the 8B model, as in public vLLM serving benchmarks. Estimate.
//
// The numbers are a model, good for routing and capacity experiments, not
// a substitute for measuring a real deployment.
func Profiles() []Profile {
	return []Profile{
		{
			Name: ProfileLlama3x8BH100,
			Source: "Llama-3-8B bf16 on 1x H100 SXM 80GB, vLLM v1. KV 128 KiB/token (exact); " +
				"KV cache 420k tokens = 0.9 x 79 GiB - 15 GiB weights - ~5 GiB runtime (estimate); " +
				"floor 6 ms = 16 GB of weights at ~80% of 3.35 TB/s; 21 us per token past 128 " +
				"(~48k prefill tokens/s); 90 ns per decode context token and 1.2 ms per-step " +
				"overhead fitted to batch-1 ITL ~7.3 ms and saturation ~18 req/s of Azure " +
				"conversation traffic (estimates)",
			FloorTokens:      128,
			Floor:            6 * time.Millisecond,
			PerToken:         21 * time.Microsecond,
			PerContextToken:  90 * time.Nanosecond,
			Overhead:         1200 * time.Microsecond,
			KVBytesPerToken:  kvPerTokenLlama3x8B,
			KVCacheBytes:     420_000 * kvPerTokenLlama3x8B,
			BlockSize:        DefaultBlockSize,
			MaxSeqs:          DefaultMaxSeqs,
			MaxBatchedTokens: DefaultMaxBatchedTokens,
		},
		{
			// 1.6-2x slower than the H100: HBM 2.0 vs 3.35 TB/s (1.67x) for
			// the memory-bound parts, bf16 312 vs 989 TFLOP/s for prefill,
			// where vLLM's smaller default token budget and better relative
			// utilization leave ~1.9x in practice (estimate).
			Name: ProfileLlama3x8BA100,
			Source: "Llama-3-8B bf16 on 1x A100 SXM 80GB, vLLM v1. KV 128 KiB/token (exact); " +
				"KV cache 420k tokens as on H100 80GB (estimate); floor 10.5 ms = 16 GB at ~75% " +
				"of 2.0 TB/s, compute-bound past ~64 tokens; 40 us per token, 150 ns per decode " +
				"context token, 1.5 ms overhead: ~1.7x H100 at batch 1, ~1.9x on prefill " +
				"(estimates); token budget 2048 = vLLM's A100 default",
			FloorTokens:      64,
			Floor:            10500 * time.Microsecond,
			PerToken:         40 * time.Microsecond,
			PerContextToken:  150 * time.Nanosecond,
			Overhead:         1500 * time.Microsecond,
			KVBytesPerToken:  kvPerTokenLlama3x8B,
			KVCacheBytes:     420_000 * kvPerTokenLlama3x8B,
			BlockSize:        DefaultBlockSize,
			MaxSeqs:          DefaultMaxSeqs,
			MaxBatchedTokens: 2048,
		},
		{
			// Tensor parallel 4: each GPU holds a quarter of the weights and
			// of every token's KV; every layer adds two all-reduces.
			Name: ProfileLlama3x70BH100TP4,
			Source: "Llama-3-70B bf16 on 4x H100 SXM 80GB, tensor parallel 4, vLLM v1. " +
				"KV 320 KiB/token over the 4 GPUs (exact); KV cache 450k tokens = " +
				"4 x 0.9 x 79 GiB - 131 GiB weights - ~14 GiB runtime (estimate); floor 14 ms = " +
				"35 GB per GPU at ~80% of 3.35 TB/s + 160 all-reduces; 60 us per token " +
				"(140 GFLOP/token on 4 GPUs at ~60% of peak); 55 ns per decode context token; " +
				"1.5 ms overhead: batch-1 ITL ~15.5 ms (estimates)",
			FloorTokens:      128,
			Floor:            14 * time.Millisecond,
			PerToken:         60 * time.Microsecond,
			PerContextToken:  55 * time.Nanosecond,
			Overhead:         1500 * time.Microsecond,
			KVBytesPerToken:  kvPerTokenLlama3x70B,
			KVCacheBytes:     450_000 * kvPerTokenLlama3x70B,
			BlockSize:        DefaultBlockSize,
			MaxSeqs:          DefaultMaxSeqs,
			MaxBatchedTokens: DefaultMaxBatchedTokens,
		},
	}
}

// LookupProfile returns the shipped profile named name (see [Profiles]),
// e.g. "llama-3-8b/h100", and whether there is one.
func LookupProfile(name string) (Profile, bool) {
	for _, p := range Profiles() {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}
