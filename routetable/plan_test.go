package routetable_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/routetable"
)

// TestPlan: the steps of each source's table in the demo world, in
// order, with what each routes to or answers.
func TestPlan(t *testing.T) {
	tests := []struct {
		name, source, drop string
		want               []string
	}{
		{"fail-open: hints, the fallback on the clusters serving every model", "edge-us", "", []string{
			"cluster [us-east-vllm us-west-sglang eu-west-vllm eu-west-tgi]",
			"model llama-3.1-8b-instruct → us-east-vllm us-west-sglang",
			"model qwen2.5-7b-instruct → us-east-vllm eu-west-vllm eu-west-tgi",
			"hint llama-3.1-8b-instruct [llama-3.1-8b-instruct llama3-8b meta-llama/Llama-3.1-8B-Instruct] under [/v1/] → us-east-vllm us-west-sglang",
			"hint qwen2.5-7b-instruct [qwen2.5-7b-instruct qwen-7b] under [/v1/] → us-east-vllm eu-west-vllm eu-west-tgi",
			"fallback llama-3.1-8b-instruct under [/v1/] → us-east-vllm",
			"not found: 404 path_not_found",
		}},
		{"fail-closed: no hints, the fallback refuses", "edge-eu", "", []string{
			"cluster [eu-west-vllm eu-west-tgi]",
			"model llama-3.1-8b-instruct → eu-west-vllm",
			"model qwen2.5-7b-instruct → eu-west-vllm eu-west-tgi",
			"fallback llama-3.1-8b-instruct under [/v1/]: 503 routing_unavailable",
			"not found: 404 path_not_found",
		}},
		{"no capacity anywhere: every cell refuses", "edge-us", "*", []string{
			"cluster [us-east-vllm us-west-sglang eu-west-vllm eu-west-tgi]",
			"model llama-3.1-8b-instruct: 503 no_capacity",
			"model qwen2.5-7b-instruct: 503 no_capacity",
			"hint llama-3.1-8b-instruct [llama-3.1-8b-instruct llama3-8b meta-llama/Llama-3.1-8B-Instruct] under [/v1/]: 503 no_capacity",
			"hint qwen2.5-7b-instruct [qwen2.5-7b-instruct qwen-7b] under [/v1/]: 503 no_capacity",
			"fallback llama-3.1-8b-instruct under [/v1/]: 503 no_capacity",
			"not found: 404 path_not_found",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, w := world(t, tt.drop)
			s, _ := c.Source(tt.source)
			var got []string
			for _, st := range routetable.Plan(c, w, s) {
				got = append(got, describe(st))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("plan\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

func describe(st routetable.Step) string {
	var d string
	switch st.Kind {
	case routetable.ToCluster:
		var names []string
		for _, e := range st.Clusters {
			names = append(names, e.Name)
		}
		return fmt.Sprintf("cluster %v", names)
	case routetable.ByModel:
		d = "model " + st.Model
	case routetable.ByHint:
		d = fmt.Sprintf("hint %s %v under %v", st.Model, st.Names, st.Prefixes)
	case routetable.Fallback:
		d = fmt.Sprintf("fallback %s under %v", st.Model, st.Prefixes)
	case routetable.NotFound:
		d = "not found"
	}
	if st.Reply != nil {
		return fmt.Sprintf("%s: %d %s", d, st.Reply.Status, st.Reply.Code)
	}
	var to []string
	for _, tg := range st.Targets {
		to = append(to, tg.Cluster)
	}
	return d + " → " + strings.Join(to, " ")
}

// TestServingAll: without ext_proc nothing reads the model, so the
// fallback keeps the clusters that serve every model — or every target
// when none does.
func TestServingAll(t *testing.T) {
	c, w := world(t, "")
	cell, _ := w.Cell("edge-us", "qwen2.5-7b-instruct")
	var got []string
	for _, tg := range routetable.ServingAll(c, cell.Targets) {
		got = append(got, tg.Cluster)
	}
	if want := []string{"us-east-vllm", "eu-west-vllm"}; !slices.Equal(got, want) {
		t.Errorf("serving every model: %v; want %v", got, want)
	}
	one := *c
	one.Models = append([]config.Model(nil), c.Models...)
	one.Clusters = nil
	for _, e := range c.Clusters {
		if e.Name == "us-west-sglang" || e.Name == "eu-west-tgi" {
			one.Clusters = append(one.Clusters, e)
		}
	}
	cell, _ = w.Cell("edge-us", "llama-3.1-8b-instruct")
	if got := routetable.ServingAll(&one, cell.Targets); len(got) != len(cell.Targets) {
		t.Errorf("no cluster serves every model: %d targets kept; want all %d", len(got), len(cell.Targets))
	}
}
