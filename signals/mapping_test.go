package signals

import (
	"bytes"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/config"
)

const (
	llama = "meta-llama/Llama-3.1-8B-Instruct"
	qwen  = "Qwen/Qwen2.5-7B-Instruct"
	nvFP8 = "nvidia/Llama-3.1-8B-Instruct-FP8"
	ctOM  = "application/openmetrics-text; version=1.0.0; charset=utf-8"
	ctTxt = "text/plain; version=0.0.4; charset=utf-8"
)

// readMetrics parses a fixture body as a replica's answer would be and
// applies the engine's built-in mapping.
func readMetrics(t *testing.T, engine config.EngineKind, body []byte, contentType string) (extraction, error) {
	t.Helper()
	mp, err := builtinMappings[engine].compile()
	if err != nil {
		t.Fatal(err)
	}
	return readWith(mp, body, contentType)
}

func readWith(mp *mapping, body []byte, contentType string) (extraction, error) {
	h := http.Header{}
	h.Set("Content-Type", contentType)
	fams, err := parseExposition(body, h, mp.want, &parseScratch{})
	if err != nil {
		return extraction{}, err
	}
	return mp.extract(fams), nil
}

func TestBuiltinMappings(t *testing.T) {
	tritonNoFraction := strings.ReplaceAll(string(readFixture(t, "triton_trtllm.txt")),
		`nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="tensorrt_llm",version="1"} 0.25`+"\n", "")
	tests := []struct {
		name        string
		engine      config.EngineKind
		body        []byte
		contentType string
		want        Metrics
		good        bool
		wantErr     string
	}{
		{
			name: "vllm: two models on one endpoint are summed, KV is the fullest pool", engine: config.EngineVLLM,
			body: readFixture(t, "vllm.txt"), contentType: ctTxt, good: true,
			want: Metrics{
				Waiting: 3, Running: 17, KVUsage: 0.4212, KVKnown: true,
				PromptTokens: 1484567, GenerationTokens: 555554, Models: []string{qwen, llama},
			},
		},
		{
			name: "sglang", engine: config.EngineSGLang, body: readFixture(t, "sglang.txt"), contentType: ctTxt, good: true,
			want: Metrics{
				Waiting: 7, Running: 24, KVUsage: 0.61, KVKnown: true,
				PromptTokens: 8128902, GenerationTokens: 7557572, Models: []string{llama},
			},
		},
		{
			name: "tgi: no KV gauge, tokens from the histograms' sums", engine: config.EngineTGI,
			body: readFixture(t, "tgi.txt"), contentType: "text/plain; version=0.0.4", good: true,
			want: Metrics{Waiting: 9, Running: 32, PromptTokens: 4213550, GenerationTokens: 1607200},
		},
		{
			name: "trtllm-serve", engine: config.EngineTRTLLM, body: readFixture(t, "trtllm.txt"), contentType: ctTxt, good: true,
			want: Metrics{
				Waiting: 130, Running: 64, KVUsage: 0.875, KVKnown: true,
				PromptTokens: 1.912e6, GenerationTokens: 603411, Models: []string{nvFP8},
			},
		},
		{
			name: "trtllm on triton: request_type and kv_cache_block_type labels", engine: config.EngineTRTLLM,
			body: readFixture(t, "triton_trtllm.txt"), contentType: ctTxt, good: true,
			want: Metrics{Waiting: 6, Running: 46, KVUsage: 0.25, KVKnown: true, PromptTokens: 1.912e6, GenerationTokens: 603411},
		},
		{
			name: "triton: the backend's families, the model label read", engine: config.EngineTriton,
			body: readFixture(t, "triton_trtllm.txt"), contentType: ctTxt, good: true,
			want: Metrics{Waiting: 6, Running: 46, KVUsage: 0.25, KVKnown: true, PromptTokens: 1.912e6, GenerationTokens: 603411, Models: []string{"tensorrt_llm"}},
		},
		{
			name: "trtllm on triton without the fraction: used / max", engine: config.EngineTRTLLM,
			body: []byte(tritonNoFraction), contentType: ctTxt, good: true,
			want: Metrics{Waiting: 6, Running: 46, KVUsage: 1560.0 / 6239, KVKnown: true, PromptTokens: 1.912e6, GenerationTokens: 603411},
		},
		{
			name: "openmetrics by content type", engine: config.EngineVLLM,
			body: readFixture(t, "openmetrics.txt"), contentType: ctOM, good: true,
			want: Metrics{Waiting: 15, Running: 7, KVUsage: 0.97, KVKnown: true, PromptTokens: 40000, GenerationTokens: 2000, Models: []string{llama}},
		},
		{
			name: "NaN, Inf and negative values are unknown, not numbers", engine: config.EngineVLLM,
			body: readFixture(t, "nan_values.txt"), contentType: ctTxt, good: true,
			want: Metrics{
				Waiting: 1, Running: 4, Models: []string{llama},
				Problems: []string{
					"vllm:kv_cache_usage_perc is NaN: unknown",
					"vllm:prompt_tokens_total is +Inf: unknown",
					"vllm:generation_tokens_total is negative (-12): unknown",
				},
			},
		},
		{
			name: "missing running: load unknown; KV from the older gauge", engine: config.EngineVLLM,
			body: readFixture(t, "missing_metric.txt"), contentType: ctTxt, good: false,
			want: Metrics{
				KVUsage: 0.5, KVKnown: true, PromptTokens: 100, Models: []string{llama},
				Problems: []string{"vllm:num_requests_running missing", "vllm:generation_tokens_total missing"},
			},
		},
		{
			name: "garbage", engine: config.EngineVLLM, body: readFixture(t, "garbage.txt"), contentType: "text/html",
			wantErr: "parse error at line 1: invalid metric name",
		},
		{
			name: "truncated mid-line: the error names the original line", engine: config.EngineVLLM,
			body: readFixture(t, "truncated.txt"), contentType: ctTxt,
			wantErr: "parse error at line 25: unexpected end of input stream",
		},
		{
			name: "empty body: everything missing", engine: config.EngineSGLang, body: nil, contentType: ctTxt,
			want: Metrics{Problems: []string{
				"sglang:num_queue_reqs missing", "sglang:num_running_reqs missing", "sglang:token_usage missing",
				"sglang:prompt_tokens_total missing", "sglang:generation_tokens_total missing",
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := readMetrics(t, tt.engine, tt.body, tt.contentType)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(x.metrics, tt.want) || x.good != tt.good {
				t.Errorf("got good=%v %+v\nwant good=%v %+v", x.good, x.metrics, tt.good, tt.want)
			}
		})
	}
}

func TestCustomMapping(t *testing.T) {
	c := testConfig(t, `  - {name: c1, region: r1, engine: vllm, models: [m1], profile: p1, endpoints: ["127.0.0.1:1"], metrics: {mapping: triton}}`+"\n",
		`  mappings:
    triton:
      waiting: 'nv_trt_llm_request_metrics{request_type="waiting"}'
      running: 'nv_trt_llm_request_metrics{request_type=scheduled}'
      kv_usage: 'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}'
      model_label: model`)
	mp, err := mappingFor(c, c.Clusters[0])
	if err != nil {
		t.Fatal(err)
	}
	x, err := readWith(mp, readFixture(t, "triton_trtllm.txt"), ctTxt)
	if err != nil {
		t.Fatal(err)
	}
	want := Metrics{Waiting: 6, Running: 40, KVUsage: 0.25, KVKnown: true, Models: []string{"tensorrt_llm"}}
	if !reflect.DeepEqual(x.metrics, want) || !x.good {
		t.Errorf("got %+v, want %+v", x.metrics, want)
	}

	bad := testConfig(t, `  - {name: c1, region: r1, engine: vllm, models: [m1], profile: p1, endpoints: ["127.0.0.1:1"], metrics: {mapping: bad}}`+"\n",
		`  mappings: {bad: {waiting: 'q{x', running: r}}`)
	if _, err := New(Options{Config: bad}); err == nil || !strings.Contains(err.Error(), `mapping bad: waiting: "q{x"`) {
		t.Errorf("New with a bad selector: %v", err)
	}
}

func TestFilterLines(t *testing.T) {
	want := map[string]struct{}{"a": {}, "h": {}, "h_sum": {}, "h_count": {}, "h_bucket": {}}
	body := strings.Join([]string{
		"# HELP a the a", //  1 dropped: help text is not read
		"# TYPE a gauge", //  2 kept
		"a 1",            //  3 kept
		"# TYPE b gauge", //  4 dropped
		`b{x="}"} 2`,     //  5 dropped: well-formed
		"",               //  6 dropped
		"# a comment",    //  7 dropped
		"b 3 1700000000", //  8 dropped
		"b oops",         //  9 kept: malformed
		"<html>",         // 10 kept: not a sample
		`h_bucket{le="+Inf"} 4`,
		"# EOF",
	}, "\n")
	got, lines, eof := filterLines(nil, nil, []byte(body), want, false)
	wantText := "# TYPE a gauge\na 1\nb oops\n<html>\nh_bucket{le=\"+Inf\"} 4\n"
	if string(got) != wantText || !eof {
		t.Errorf("filtered (eof %v):\n%s\nwant:\n%s", eof, got, wantText)
	}
	if !reflect.DeepEqual(lines, []int32{2, 3, 9, 10, 11}) {
		t.Errorf("lines %v", lines)
	}
	if bytes.Contains(got, []byte("b 3")) {
		t.Error("kept an unwanted well-formed sample")
	}
}

func TestOpenMetricsNormalisation(t *testing.T) {
	want := map[string]struct{}{"c": {}, "c_total": {}, "g": {}, "i": {}, "i_info": {}}
	body := strings.Join([]string{
		"# HELP c tokens",
		"# TYPE c counter",
		"# UNIT c tokens",
		`c_total{m="x # {y}"} 17 1700000000.5 # {trace_id="abc"} 1.0 1700000000.1`,
		`c_created{m="x # {y}"} 1700000000`,
		"# TYPE g unknown",
		"g 2",
		"# TYPE i info",
		`i_info{version="1"} 1`,
		"# EOF",
	}, "\n")
	got, _, eof := filterLines(nil, nil, []byte(body), want, true)
	wantText := "# TYPE c_total counter\nc_total{m=\"x # {y}\"} 17\n# TYPE g untyped\ng 2\ni_info{version=\"1\"} 1\n"
	if string(got) != wantText || !eof {
		t.Errorf("normalised (eof %v):\n%s\nwant:\n%s", eof, got, wantText)
	}
	h := http.Header{"Content-Type": {ctOM}}
	fams, err := parseExposition([]byte(body), h, want, &parseScratch{})
	if err != nil {
		t.Fatal(err)
	}
	if c := fams["c_total"]; c.GetType().String() != "COUNTER" || c.GetMetric()[0].GetCounter().GetValue() != 17 {
		t.Errorf("c_total %v", c)
	}
	if g := fams["g"]; g.GetType().String() != "UNTYPED" || g.GetMetric()[0].GetUntyped().GetValue() != 2 {
		t.Errorf("g %v", g)
	}
	_, err = parseExposition([]byte(strings.TrimSuffix(body, "# EOF")), h, want, &parseScratch{})
	if err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("OpenMetrics without # EOF: %v", err)
	}
}

func TestParseSelector(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"vllm:num_requests_running", "vllm:num_requests_running"},
		{`nv_trt_llm_request_metrics{request_type="waiting"}`, `nv_trt_llm_request_metrics{request_type="waiting"}`},
		{"  m { a = b , c=\"d\" }  ", `m{a="b",c="d"}`},
		{`nv_llm_input_token_len_sum{response_metric_type="total_input_tokens"}`, `nv_llm_input_token_len_sum{response_metric_type="total_input_tokens"}`},
	} {
		in, want := tt.in, tt.want
		s, err := parseSelector(in)
		if err != nil || s.String() != want {
			t.Errorf("parseSelector(%q) = %q, %v; want %q", in, s, err, want)
		}
	}
	for _, in := range []string{"", "1abc", "a{b", "a{b:c=d}", "a{=d}"} {
		if _, err := parseSelector(in); err == nil {
			t.Errorf("parseSelector(%q): no error", in)
		}
	}
}
