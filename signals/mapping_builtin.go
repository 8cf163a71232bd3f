package signals

import (
	"fmt"

	"github.com/ilbproject/ilb/config"
)

// The built-in mappings, one per engine, with the engines' real metric
// names. Each signal lists its sources in order: the first whose family is
// present is used (older names and other serving stacks as fallbacks).
//
// vLLM — docs.vllm.ai/en/stable/usage/metrics and vllm/v1/metrics/loggers.py:
// gauges vllm:num_requests_waiting, vllm:num_requests_running,
// vllm:kv_cache_usage_perc ("1 means 100 percent usage"; it replaced
// vllm:gpu_cache_usage_perc, deprecated in V1, kept as the fallback),
// counters vllm:prompt_tokens_total and vllm:generation_tokens_total; every
// series carries model_name (and engine, one per data-parallel engine).
//
// SGLang — docs.sglang.io/references/production_metrics (server started
// with --enable-metrics): gauges sglang:num_queue_reqs,
// sglang:num_running_reqs, sglang:token_usage (KV pool usage, 0..1),
// counters sglang:prompt_tokens_total and sglang:generation_tokens_total;
// label model_name (plus tp_rank, pp_rank, engine_type).
//
// Time to first token, where the engine exports it as a histogram in
// seconds: vllm:time_to_first_token_seconds,
// sglang:time_to_first_token_seconds, trtllm_time_to_first_token_seconds
// (trtllm-serve; vLLM's bucket bounds); TGI has none.
//
// TGI — huggingface.co/docs/text-generation-inference/reference/metrics,
// checked against TGI's router source (router/src/infer/queue.rs sets the
// gauge tgi_queue_size as entries come and go; router/src/server.rs
// observes the histograms tgi_request_input_length and
// tgi_request_generated_tokens once per request, as it ends):
// gauges tgi_queue_size and tgi_batch_current_size. TGI has no KV cache
// gauge (KV stays unknown) and no token counters; the histograms
// tgi_request_input_length and tgi_request_generated_tokens count tokens
// per request, so their _sum series are the token counters. No model label
// (one model per server).
//
// TensorRT-LLM — two serving stacks:
//   - trtllm-serve (tensorrt_llm/metrics/collector.py, MetricsCollector; the
//     Prometheus endpoint is /prometheus/metrics — its /metrics is JSON
//     iteration stats, so set metrics.path): gauges
//     trtllm_num_requests_waiting (numQueuedRequests),
//     trtllm_num_requests_running (numActiveRequests),
//     trtllm_kv_cache_utilization (used/max KV blocks), counters
//     trtllm_prompt_tokens_total and trtllm_generation_tokens_total, label
//     model_name. The iteration gauges need enable_iter_perf_stats; releases
//     up to 1.1 exported only request histograms, so running/waiting are
//     then missing and the replica goes stale.
//   - the Triton backend (triton_backend/inflight_batcher_llm/src/
//     custom_metrics_reporter): gauge families
//     nv_trt_llm_request_metrics{request_type=waiting|active|scheduled|...}
//     and nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=
//     fraction|used|max|...}, token histograms nv_llm_input_token_len and
//     nv_llm_output_token_len. Running is request_type="active" (the same
//     executor statistic as trtllm_num_requests_running; the Gateway API
//     inference extension uses "scheduled", the requests of the current
//     iteration). KV is "fraction", or used/max on backends without it.
var builtinMappings = map[config.EngineKind]mappingSpec{
	config.EngineVLLM: {
		waiting:    []string{"vllm:num_requests_waiting"},
		running:    []string{"vllm:num_requests_running"},
		kv:         []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
		prompt:     []string{"vllm:prompt_tokens_total"},
		generation: []string{"vllm:generation_tokens_total"},
		ttft:       []string{"vllm:time_to_first_token_seconds"},
		lora:       "vllm:lora_requests_info",
		modelLabel: "model_name",
	},
	config.EngineSGLang: {
		waiting:    []string{"sglang:num_queue_reqs"},
		running:    []string{"sglang:num_running_reqs"},
		kv:         []string{"sglang:token_usage"},
		prompt:     []string{"sglang:prompt_tokens_total"},
		generation: []string{"sglang:generation_tokens_total"},
		ttft:       []string{"sglang:time_to_first_token_seconds"},
		modelLabel: "model_name",
	},
	config.EngineTGI: {
		waiting:    []string{"tgi_queue_size"},
		running:    []string{"tgi_batch_current_size"},
		prompt:     []string{"tgi_request_input_length_sum"},
		generation: []string{"tgi_request_generated_tokens_sum"},
	},
	// Triton with the TensorRT-LLM backend: the backend's families alone,
	// labelled "model" (and "version") as Triton labels every series.
	config.EngineTriton: {
		waiting: []string{`nv_trt_llm_request_metrics{request_type="waiting"}`},
		running: []string{`nv_trt_llm_request_metrics{request_type="active"}`},
		kv: []string{
			`nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}`,
			`nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used"} / nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max"}`,
		},
		prompt:     []string{`nv_llm_input_token_len_sum{response_metric_type="total_input_tokens"}`},
		generation: []string{`nv_llm_output_token_len_sum{response_metric_type="total_output_tokens"}`},
		modelLabel: "model",
	},
	config.EngineTRTLLM: {
		waiting: []string{"trtllm_num_requests_waiting", `nv_trt_llm_request_metrics{request_type="waiting"}`},
		running: []string{"trtllm_num_requests_running", `nv_trt_llm_request_metrics{request_type="active"}`},
		kv: []string{
			"trtllm_kv_cache_utilization",
			`nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}`,
			`nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used"} / nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max"}`,
		},
		prompt:     []string{"trtllm_prompt_tokens_total", `nv_llm_input_token_len_sum{response_metric_type="total_input_tokens"}`},
		generation: []string{"trtllm_generation_tokens_total", `nv_llm_output_token_len_sum{response_metric_type="total_output_tokens"}`},
		ttft:       []string{"trtllm_time_to_first_token_seconds"},
		modelLabel: "model_name",
	},
}

// mappingSpec is a mapping as written: per signal, source expressions in
// order of preference (a selector, or "selector / selector" for a ratio).
type mappingSpec struct {
	waiting, running, kv, prompt, generation []string
	// ttft lists histogram families of the time to first token.
	ttft []string
	// lora is the family of the engine's LoRA adapter report (LoRA), ""
	// when it has none.
	lora       string
	modelLabel string
}

// mappingFor compiles the mapping of an engine cluster: the custom mapping
// it names, else the built-in one of its engine.
func mappingFor(c *config.Config, e config.EngineCluster) (*mapping, error) {
	if name := e.Metrics.Mapping; name != "" {
		mm, ok := c.Signals.Mappings[name]
		if !ok {
			return nil, fmt.Errorf("cluster %s: unknown mapping %q", e.Name, name)
		}
		spec := mappingSpec{
			waiting: one(mm.Waiting), running: one(mm.Running), kv: one(mm.KVUsage),
			prompt: one(mm.PromptTokens), generation: one(mm.GenerationTokens),
			ttft: one(mm.TTFT), modelLabel: mm.ModelLabel,
		}
		if spec.modelLabel == "" {
			spec.modelLabel = "model_name"
		}
		m, err := spec.compile()
		if err != nil {
			return nil, fmt.Errorf("cluster %s: mapping %s: %w", e.Name, name, err)
		}
		m.ttft.target = c.Controller.Capacity.TTFTTarget.Std().Seconds()
		return m, nil
	}
	spec, ok := builtinMappings[e.Engine]
	if !ok {
		return nil, fmt.Errorf("cluster %s: no built-in metric mapping for engine %q", e.Name, e.Engine)
	}
	m, err := spec.compile()
	if err != nil {
		return nil, err
	}
	m.ttft.target = c.Controller.Capacity.TTFTTarget.Std().Seconds()
	return m, nil
}

// one is a one-source list, or nil for "".
func one(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}
