package signals

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/config"
)

// TestReadLoRA reads vllm:lora_requests_info as vLLM exports it: one
// series per label combination ever set, the newest (largest value) the
// current one.
func TestReadLoRA(t *testing.T) {
	const head = "vllm:num_requests_waiting{model_name=\"m\"} 0\nvllm:num_requests_running{model_name=\"m\"} 2\n" +
		"vllm:kv_cache_usage_perc{model_name=\"m\"} 0.1\nvllm:prompt_tokens_total{model_name=\"m\"} 10\nvllm:generation_tokens_total{model_name=\"m\"} 5\n" +
		"# HELP vllm:lora_requests_info Running stats on lora requests.\n# TYPE vllm:lora_requests_info gauge\n"
	many := make([]string, MaxReportedAdapters+3)
	for i := range many {
		many[i] = "a" + strings.Repeat("x", i)
	}
	tests := []struct {
		name     string
		body     string
		want     *LoRA
		problems []string
	}{
		{"absent: LoRA not enabled", head, nil, nil},
		{
			"the newest series is the current one",
			head + `vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql,chat",waiting_lora_adapters=""} 1.7e9` + "\n" +
				`vllm:lora_requests_info{max_lora="4",running_lora_adapters="old",waiting_lora_adapters="x"} 1.6e9` + "\n",
			&LoRA{Running: []string{"chat", "sql"}, Max: 4}, nil,
		},
		{
			"waiting adapters, duplicates and blanks",
			head + `vllm:lora_requests_info{max_lora="2",running_lora_adapters="a,,a",waiting_lora_adapters=" b ,c"} 1.7e9` + "\n",
			&LoRA{Running: []string{"a"}, Waiting: []string{"b", "c"}, Max: 2}, nil,
		},
		{
			"bad max_lora is unknown",
			head + `vllm:lora_requests_info{max_lora="-1",running_lora_adapters="a",waiting_lora_adapters=""} 1.7e9` + "\n",
			&LoRA{Running: []string{"a"}},
			[]string{`vllm:lora_requests_info: max_lora "-1" is not a number of adapters in [0, 4096]: unknown`},
		},
		{
			"a list past the bound is cut",
			head + `vllm:lora_requests_info{max_lora="8",running_lora_adapters="` + strings.Join(many, ",") + `",waiting_lora_adapters=""} 1.7e9` + "\n",
			&LoRA{Running: sortedCopy(many[:MaxReportedAdapters]), Max: 8},
			[]string{"vllm:lora_requests_info: running_lora_adapters lists more than 64 adapters: 3 dropped"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x, err := readMetrics(t, config.EngineVLLM, []byte(tc.body), ctTxt)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(x.metrics.LoRA, tc.want) {
				t.Errorf("LoRA = %+v, want %+v", x.metrics.LoRA, tc.want)
			}
			if !reflect.DeepEqual(x.metrics.Problems, tc.problems) {
				t.Errorf("problems = %q, want %q", x.metrics.Problems, tc.problems)
			}
			if tc.want != nil && len(tc.want.Running) > 0 && !x.metrics.LoRA.Has(tc.want.Running[0]) {
				t.Errorf("Has(%s) = false", tc.want.Running[0])
			}
		})
	}
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
