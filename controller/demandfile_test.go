package controller_test

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/weights"
)

func TestParseDemandFile(t *testing.T) {
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../examples/demo/demand.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, st, err := controller.ParseDemandFile(c, data)
	if err != nil {
		t.Fatal(err)
	}
	// 8 rps × (800 × 1 + 200 × 4) = 12800 token-cost/s, alias resolved.
	k := weights.DemandKey{Source: "edge-us", Model: "llama-3.1-8b-instruct", Priority: weights.Standard}
	if got := d[k]; got.RequestsPerSecond != 8 || math.Abs(got.CostPerSecond-12800) > 1e-9 {
		t.Errorf("demand %+v = %+v; want 8 rps, 12800 token-cost/s", k, got)
	}
	// 1 ready + 0.5 warming × 12000; the draining replica counts zero.
	if got := st["us-east-vllm"]; got.Capacity != 18000 || got.Draining != 1 {
		t.Errorf("us-east-vllm state = %+v", got)
	}
	if got := st["eu-west-vllm"]; got.Capacity != 24000 {
		t.Errorf("eu-west-vllm keeps its static state: %+v", got)
	}

	tests := []struct {
		name, file string
		want       []string
	}{
		{"every bad row at once", `demand:
  - {source: edge-mars, model: llama3-8b, priority: standard, requests_per_second: 1, prompt_tokens: 1, output_tokens: 1}
  - {source: edge-us, model: gpt-9, priority: urgent, requests_per_second: -1, prompt_tokens: 1, output_tokens: .nan}
replicas:
  - {cluster: nowhere, ready: 1}
  - {cluster: us-east-vllm, ready: 1, warming: [1.5]}
`, []string{
			`demand[0].source: unknown source "edge-mars"`,
			`demand[1].model: unknown model "gpt-9"`,
			`demand[1].priority: unknown priority "urgent"`,
			`demand[1].requests_per_second: -1 is not a finite number >= 0`,
			`demand[1].output_tokens: NaN is not a finite number >= 0`,
			`replicas[0].cluster: unknown cluster "nowhere"`,
			`replicas[1].warming[0]: 1.5 is not a ramp fraction in [0, 1]`,
		}},
		{"duplicate row", `demand:
  - {source: edge-us, model: llama3-8b, requests_per_second: 1}
  - {source: edge-us, model: llama-3.1-8b-instruct, priority: standard, requests_per_second: 2}
`, []string{`demand[1]: a second row for (edge-us, llama-3.1-8b-instruct, standard)`}},
		{"unknown field", "demand:\n  - {source: edge-us, model: m, rps: 3}\n", []string{"field rps not found"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := controller.ParseDemandFile(c, []byte(tt.file))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}
