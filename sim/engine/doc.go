// Package engine is a minimal OpenAI-compatible inference engine: a real
// HTTP server that behaves like a small vLLM replica, used by the demo and
// by end-to-end tests in place of a GPU engine.
//
// A [Server] serves, for the models listed in [Options.Models]:
//
//   - POST /v1/chat/completions, POST /v1/completions (non-streaming JSON or
//     streaming text/event-stream, one SSE event per token, then "data: [DONE]");
//   - POST /v1/embeddings (8 deterministic floats per input);
//   - GET /v1/models, GET /v1/models/{id}, GET /health (200, empty body,
//     as vLLM);
//   - GET /metrics: Prometheus text exposition from the server's own
//     registry, in the metric names of its [Options.Kind]: vLLM's by
//     default (vllm:num_requests_running, vllm:num_requests_waiting,
//     vllm:kv_cache_usage_perc, vllm:prompt_tokens_total,
//     vllm:generation_tokens_total, vllm:request_success_total,
//     vllm:time_to_first_token_seconds), or SGLang's, TGI's (per-request
//     token histograms, no KV gauge, no model label) or trtllm-serve's, so
//     that a demo cluster of each kind is read as that engine would be.
//
// LoRA adapters ([Options.Adapters]) are served like models: a request
// whose "model" is an adapter reaches the Backend as a LoRA request on the
// primary model ([GenRequest.Adapter]), is counted in the primary model's
// series, and /v1/models lists the adapters with that model as parent. A
// vllm-kind replica whose Backend reports its adapters ([LoRAReporter],
// as sim/replica's Backend does) also exports vLLM's
// vllm:lora_requests_info (see [Options.Adapters]).
//
// Bad input is answered with an OpenAI-style JSON error
// {"error":{"message","type","param","code"}} that names the offending field.
//
// Every response carries the sim-only headers x-ilb-engine-replica (the
// replica's [Options.Name]) and x-ilb-engine-cluster ([Options.Cluster]) so
// that tests can see which replica answered. Real engines do not send them;
// ILB must never depend on them outside tests.
//
// When tokens come out is decided by a [Backend], the seam between the HTTP
// layer and the timing model. [FixedBackend] is the simple model: a fixed
// number of running slots with a FIFO waiting queue, a prefill delay that
// grows with the prompt, then one token per fixed inter-token latency.
//
// Token counts are estimates: a prompt of n characters (Unicode code points)
// counts as ceil(n/4) tokens, at least 1.
package engine
