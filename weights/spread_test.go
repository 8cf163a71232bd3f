package weights_test

import (
	"math"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

// oneRegion: two equal clusters in one region, a third one that also
// serves a second model, and a source in a region without clusters, equally
// far from two regions.
const oneRegion = `
regions: [{name: a}, {name: b}, {name: c}]
network:
  - {from: c, to: a, rtt_ms: 40, egress_usd_per_gb: 0}
  - {from: c, to: b, rtt_ms: 40, egress_usd_per_gb: 0}
  - {from: a, to: c, rtt_ms: 40, egress_usd_per_gb: 0}
  - {from: b, to: c, rtt_ms: 40, egress_usd_per_gb: 0}
  - {from: a, to: b, rtt_ms: 80, egress_usd_per_gb: 0}
  - {from: b, to: a, rtt_ms: 80, egress_usd_per_gb: 0}
sources:
  - {name: src, region: a}
  - {name: between, region: c}
models: [{name: m}, {name: other}]
profiles: [{name: p, capacity_per_replica: 100}]
clusters:
  - {name: a1, region: a, engine: vllm, models: [m], profile: p, endpoints: ["10.0.0.1:80"]}
  - {name: a2, region: a, engine: vllm, models: [m], profile: p, endpoints: ["10.0.0.2:80"]}
  - {name: a3, region: a, engine: vllm, models: [m, other], profile: p, endpoints: ["10.0.0.3:80", "10.0.0.4:80"]}
  - {name: b1, region: b, engine: vllm, models: [m], profile: p, endpoints: ["10.0.1.1:80"]}
controller: {min_cell_demand: 0, max_weight_step: 1, max_utilization_step: 1, deadband: 0}
`

// TestEvenSpreadInRegion checks that clusters of one region end at the same
// utilization at every load below the target, counting the load another
// model puts on a shared cluster.
func TestEvenSpreadInRegion(t *testing.T) {
	c, err := config.Parse([]byte(oneRegion))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		m, other  float64 // token-cost/s from src
		wantUtil  float64 // of a1, a2 and a3
		wantOther float64 // a3's load of model other
	}{
		{"5% load", 20, 0, 0.05, 0},
		{"18% load", 72, 0, 0.18, 0},
		{"50% load", 200, 0, 0.5, 0},
		{"75% load", 300, 0, 0.75, 0},
		{"a3 busy with the other model", 200, 100, 0.75, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := demandOf("src", "m", weights.Standard, tt.m)
			if tt.other > 0 {
				d[weights.DemandKey{Source: "src", Model: "other", Priority: weights.Standard}] = weights.Rate{CostPerSecond: tt.other}
			}
			w := solve(t, c, d, nil)
			load := map[string]float64{"a3": tt.wantOther}
			cell, _ := w.Cell("src", "m")
			for _, tg := range cell.Targets {
				load[tg.Cluster] += tt.m * float64(tg.Weight) / weights.Total
			}
			capacity := map[string]float64{"a1": 100, "a2": 100, "a3": 200}
			for _, cl := range []string{"a1", "a2", "a3"} {
				if u := load[cl] / capacity[cl]; math.Abs(u-tt.wantUtil) > 0.002 {
					t.Errorf("%s at %.3f utilization; want %.3f (targets %v)", cl, u, tt.wantUtil, cell.Targets)
				}
			}
		})
	}
}

// TestTiesExplainedAsTies: a source equally far from two regions with
// little demand gets one of them only (the first band of either absorbs
// it); the other is a tie, not dearer.
func TestTiesExplainedAsTies(t *testing.T) {
	c, err := config.Parse([]byte(oneRegion))
	if err != nil {
		t.Fatal(err)
	}
	w := solve(t, c, demandOf("between", "m", weights.Standard, 1.0), nil)
	e, ok := w.Explain("between", "m")
	if !ok {
		t.Fatal("no explanation")
	}
	ties := 0
	for _, term := range e.Terms {
		if term.Weight == 0 && term.Excluded == "" {
			if !strings.HasPrefix(term.Binding, "tied") {
				t.Errorf("%s: weight 0, binding %q; want a tie", term.Cluster, term.Binding)
			}
			ties++
		}
	}
	if ties == 0 {
		t.Skipf("the solver split the tie (terms %+v): nothing to explain", e.Terms)
	}
}
