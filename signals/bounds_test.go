package signals

import (
	"fmt"
	"strings"
	"testing"
)

// TestEngineStringsAreBounded: what an engine's answer puts in memory per
// replica (a parse error quoting its text, the model labels) is bounded,
// whatever the engine sends.
func TestEngineStringsAreBounded(t *testing.T) {
	c := testConfig(t, `  - {name: c1, region: r1, engine: vllm, models: [m1], profile: p1, endpoints: ["127.0.0.1:1"]}`+"\n", "")
	mp, err := mappingFor(c, c.Clusters[0])
	if err != nil {
		t.Fatal(err)
	}
	var many strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&many, "vllm:num_requests_running{model_name=\"m%d\"} 1\n", i)
	}
	many.WriteString("vllm:num_requests_waiting 0\n")
	tests := []struct {
		name       string
		body       string
		wantErr    bool
		wantModels int
	}{
		{"a huge value in a parse error", "vllm:num_requests_waiting " + strings.Repeat("x", 1<<20) + "\n", true, 0},
		{"a huge model label", "vllm:num_requests_running{model_name=\"" + strings.Repeat("m", 1<<20) + "\"} 1\nvllm:num_requests_waiting 0\n", false, 1},
		{"a thousand models", many.String(), false, maxModels},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := readWith(mp, []byte(tt.body), ctTxt)
			if tt.wantErr {
				if err == nil || len(err.Error()) > 1024 {
					t.Fatalf("error %d bytes (%v); want an error of at most 1 KiB", len(fmt.Sprint(err)), err != nil)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(x.metrics.Models) != tt.wantModels {
				t.Errorf("%d models; want %d", len(x.metrics.Models), tt.wantModels)
			}
			for _, m := range x.metrics.Models {
				if len(m) > 256 {
					t.Errorf("a model name of %d bytes kept", len(m))
				}
			}
		})
	}
}
