package signals

import (
	"bytes"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/ilbproject/ilb/config"
)

const (
	fuzzCTText = "text/plain; version=0.0.4; charset=utf-8"
	fuzzCTOM   = "application/openmetrics-text; version=1.0.0; charset=utf-8"
	// fuzzMaxBody caps a body after repetition, so one input stays fast.
	fuzzMaxBody = 1 << 16
	// fuzzMaxProblem bounds one problem's text: problems name selectors
	// from the configuration and numbers, never an excerpt of the body.
	fuzzMaxProblem = 512
	// fuzzMaxError bounds a parse error: it is kept per replica and shown
	// in /debug/signals and logs, so it may quote a bounded excerpt of
	// the engine's answer, never all of it.
	fuzzMaxError = 1024
	// fuzzMaxModel bounds a model name read from a label: it is kept per
	// replica and shown in /debug/signals.
	fuzzMaxModel = 1024
)

// FuzzParseExposition feeds arbitrary metrics bodies, in the text format
// or OpenMetrics, repeated up to 16 times (up to 64 KiB; sizes beyond the
// fuzzer's small inputs), through parseExposition and every built-in
// mapping's extract. Invariants: no panic; an error names a line of the
// body (1..lines) or says the OpenMetrics body is truncated, in at most
// fuzzMaxError bytes; a parse with
// a scratch reused from other bodies equals a fresh one (same families,
// same extraction); extracted values are finite and >= 0, KV usage is in
// [0, 1] and 0 when unknown; a load that is not good has a problem; the
// problems are few and short, and the models are label values of the
// body, each at most fuzzMaxModel bytes.
func FuzzParseExposition(f *testing.F) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		f.Fatalf("no exposition fixtures: %v", err)
	}
	for _, p := range files {
		body, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(body, filepath.Base(p) == "openmetrics.txt", uint8(0))
	}
	for _, s := range []struct {
		body   string
		om     bool
		repeat uint8
	}{
		{"vllm:num_requests_waiting 1e308\nvllm:num_requests_waiting{a=\"b\"} 1e308\nvllm:num_requests_running -0\n", false, 0},
		{"# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{model_name=\"m\"} 1 1700000000.123 # {trace_id=\"x\"} 1\n# EOF\n", true, 0},
		{"# TYPE x unknown\nx 1\n# TYPE y info\ny_info{a=\"}\"} 1\n# EOF", true, 3},
		{"vllm:num_requests_waiting{model_name=\"a\\\"}\"} 1\n", false, 15},
		{"nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"used\"} 5\nnv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"max\"} 0\n", false, 0},
		{"tgi_queue_size 0x1p3\ntgi_batch_current_size +Inf\n", false, 1},
		{"# EOF\n", true, 0},
		{"sglang:num_queue_reqs 1", false, 7}, // no final newline: the repeat joins lines
	} {
		f.Add([]byte(s.body), s.om, s.repeat)
	}
	mappings := map[config.EngineKind]*mapping{}
	for k, spec := range builtinMappings {
		mp, err := spec.compile()
		if err != nil {
			f.Fatal(err)
		}
		mappings[k] = mp
	}
	kinds := []config.EngineKind{config.EngineVLLM, config.EngineSGLang, config.EngineTGI, config.EngineTRTLLM, config.EngineTriton}
	if len(kinds) != len(mappings) {
		f.Fatalf("built-in mappings %d, kinds listed here %d: list every kind", len(mappings), len(kinds))
	}
	lineRE := regexp.MustCompile(`^parse error at line ([0-9]+): .`)
	var reused parseScratch // carried from one input to the next, as a worker's is
	f.Fuzz(func(t *testing.T, body []byte, om bool, repeat uint8) {
		if n := 1 + int(repeat%16); n > 1 && len(body)*n <= fuzzMaxBody {
			body = bytes.Repeat(body, n)
		}
		h := http.Header{"Content-Type": {fuzzCTText}}
		if om {
			h.Set("Content-Type", fuzzCTOM)
		}
		lines := bytes.Count(body, []byte("\n"))
		if len(body) > 0 && body[len(body)-1] != '\n' {
			lines++
		}
		// One kind per input (a different one as the length changes) also
		// parses with a fresh scratch, which must give the same answer.
		fresh := kinds[len(body)%len(kinds)]
		for _, kind := range kinds {
			mp := mappings[kind]
			fams, err := parseExposition(body, h, mp.want, &reused)
			if kind == fresh {
				fams2, err2 := parseExposition(body, h, mp.want, &parseScratch{})
				if fuzzErrText(err) != fuzzErrText(err2) || !sameFamilies(fams, fams2) {
					t.Fatalf("%s: a reused scratch changes the parse: %v, with a fresh one %v", kind, err, err2)
				}
				if err == nil {
					x, x2 := mp.extract(fams), mp.extract(fams2)
					checkExtraction(t, kind, x, lines, len(body)) // no NaN: DeepEqual can compare
					if !reflect.DeepEqual(x, x2) {
						t.Fatalf("%s: extract differs on equal families: %+v, then %+v", kind, x, x2)
					}
				}
			}
			if err != nil {
				msg := err.Error()
				if len(msg) > fuzzMaxError {
					t.Fatalf("%s: a parse error of %d bytes (bound %d): %.200q...", kind, len(msg), fuzzMaxError, msg)
				}
				if om && msg == `parse error: OpenMetrics body without "# EOF" (truncated)` {
					continue
				}
				m := lineRE.FindStringSubmatch(msg)
				if m == nil {
					t.Fatalf("%s: error %q names no line", kind, msg)
				}
				if n, _ := strconv.Atoi(m[1]); n < 1 || n > lines {
					t.Fatalf("%s: error %q names line %d of a body of %d lines", kind, msg, n, lines)
				}
				continue
			}
			checkExtraction(t, kind, mp.extract(fams), lines, len(body))
		}
	})
}

// checkExtraction holds the invariants of one extraction.
func checkExtraction(t *testing.T, kind config.EngineKind, x extraction, lines, bodyLen int) {
	t.Helper()
	m := x.metrics
	for _, v := range []float64{m.Waiting, m.Running, m.KVUsage, m.PromptTokens, m.GenerationTokens, m.TokensPerSecond, x.tokens} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			t.Fatalf("%s: bad value %v in %+v", kind, v, m)
		}
	}
	if m.KVUsage > 1 || (!m.KVKnown && m.KVUsage != 0) {
		t.Fatalf("%s: KV %v known=%v", kind, m.KVUsage, m.KVKnown)
	}
	if !x.good && (m.Waiting != 0 || m.Running != 0 || len(m.Problems) == 0) {
		t.Fatalf("%s: a load that is not good: %+v", kind, m)
	}
	if x.tokensKnown && x.tokens != m.PromptTokens+m.GenerationTokens {
		t.Fatalf("%s: tokens %v is not prompt + generation in %+v", kind, x.tokens, m)
	}
	// At most one problem per source of each of the five signals.
	if len(m.Problems) > 16 {
		t.Fatalf("%s: %d problems: %q", kind, len(m.Problems), m.Problems)
	}
	for _, p := range m.Problems {
		if len(p) > fuzzMaxProblem {
			t.Fatalf("%s: a problem of %d bytes: %.200q...", kind, len(p), p)
		}
	}
	// Models are label values of the body: no more than its lines, none
	// longer than the body.
	if len(m.Models) > lines {
		t.Fatalf("%s: %d models from %d lines", kind, len(m.Models), lines)
	}
	for _, model := range m.Models {
		if len(model) > fuzzMaxModel {
			t.Fatalf("%s: a model name of %d bytes (bound %d): %.200q...", kind, len(model), fuzzMaxModel, model)
		}
		if model == "" || len(model) > bodyLen {
			t.Fatalf("%s: model %.200q (%d bytes) from a body of %d bytes", kind, model, len(model), bodyLen)
		}
	}
}

// sameFamilies compares two parses.
func sameFamilies(a, b map[string]*dto.MetricFamily) bool {
	if len(a) != len(b) {
		return false
	}
	for k, fa := range a {
		if fb, ok := b[k]; !ok || !proto.Equal(fa, fb) {
			return false
		}
	}
	return true
}
