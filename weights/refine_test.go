package weights_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

// smallNearBigFar is twoRegions with default controller settings and far
// grown to 40 replicas (4000 token-cost/s): near (region a, 1 replica, 100
// token-cost/s) is the source's local cluster, far is 50 ms away.
func smallNearBigFar(t *testing.T) *config.Config {
	t.Helper()
	eps := make([]string, 40)
	for i := range eps {
		eps[i] = fmt.Sprintf("%q", fmt.Sprintf("10.0.1.%d:80", i+1))
	}
	y := `
regions: [{name: a}, {name: b}]
network:
  - {from: a, to: b, rtt_ms: 50, egress_usd_per_gb: 0}
  - {from: b, to: a, rtt_ms: 50, egress_usd_per_gb: 0}
sources: [{name: src, region: a}]
models: [{name: m}]
profiles: [{name: p, capacity_per_replica: 100}]
clusters:
  - {name: near, region: a, engine: vllm, models: [m], profile: p, endpoints: ["10.0.0.1:80"]}
  - {name: far, region: b, engine: vllm, models: [m], profile: p, endpoints: [` + strings.Join(eps, ", ") + `]}
`
	c, err := config.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// utilization is the planned utilization of cluster in w's explanation of
// (src, m), and the explanation's summary.
func utilization(t *testing.T, w *weights.Weights, cluster string) (float64, string) {
	t.Helper()
	e, ok := w.Explain("src", "m")
	if !ok {
		t.Fatal("no cell (src, m)")
	}
	for _, tm := range e.Terms {
		if tm.Cluster == cluster {
			return tm.Utilization, e.Summary
		}
	}
	t.Fatalf("no term for %s in %+v", cluster, e.Terms)
	return 0, ""
}

// TestOverloadedClusterShedsLoad runs the optimizer tick after tick with
// the default stability settings after a cluster is suddenly overloaded:
// the step bounds must never hold load on it (they guard the clusters
// load moves to, not the one it leaves), and the deadband must not freeze
// a step-bounded move. Within a few ticks the cluster is within its
// capacity, and the weights then settle at the optimum.
func TestOverloadedClusterShedsLoad(t *testing.T) {
	std := func(v float64) weights.Demand {
		return weights.Demand{{Source: "src", Model: "m", Priority: weights.Standard}: {CostPerSecond: v}}
	}
	tests := []struct {
		name string
		// before and after the event: near's state and the demand
		nearBefore, nearAfter weights.ClusterState
		demandBefore          float64
		demandAfter           float64
	}{
		{
			name:       "39 of 40 replicas become unhealthy",
			nearBefore: weights.NewClusterState(100, 40, nil, 0, 0), nearAfter: weights.NewClusterState(100, 1, nil, 0, 39),
			demandBefore: 3000, demandAfter: 3000,
		},
		{
			name:       "demand surges onto a one-replica cluster",
			nearBefore: weights.NewClusterState(100, 1, nil, 0, 0), nearAfter: weights.NewClusterState(100, 1, nil, 0, 0),
			demandBefore: 50, demandAfter: 3000,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := smallNearBigFar(t)
			st := weights.StaticState(c)
			st["near"] = tt.nearBefore
			var w *weights.Weights
			for range 10 {
				w = mustSolve(t, weights.Input{Config: c, Clusters: st, Demand: std(tt.demandBefore), Previous: w})
			}
			st["near"] = tt.nearAfter
			const within, settle = 5, 20
			var versions []string
			for i := 1; i <= settle; i++ {
				w = mustSolve(t, weights.Input{Config: c, Clusters: st, Demand: std(tt.demandAfter), Previous: w})
				versions = append(versions, w.Version())
				u, summary := utilization(t, w, "near")
				if i == within && u > 1 {
					t.Fatalf("tick %d after the event: near still planned at %.0f%% of its capacity: %s", i, 100*u, summary)
				}
			}
			u, summary := utilization(t, w, "near")
			if target := c.Controller.TargetUtilization; u > target+0.01 {
				t.Errorf("after %d ticks near is planned at %.0f%%; want at most its target %.0f%%: %s", settle, 100*u, 100*target, summary)
			}
			if n := len(versions); versions[n-1] != versions[n-2] || versions[n-2] != versions[n-3] {
				t.Errorf("weights still change after %d ticks: %v", settle, versions[n-3:])
			}
			if far, _ := utilization(t, w, "far"); far > 0.8 {
				t.Errorf("far planned at %.0f%%; want the spill within its target", 100*far)
			}
		})
	}
}

// TestUtilizationStepBoundsOnlyIncreases: the step bound limits how fast
// load arrives on a cluster (herding), scaling only the cells that move
// load onto that cluster; a cell that does not touch the binding cluster
// moves freely.
func TestUtilizationStepBoundsOnlyIncreases(t *testing.T) {
	c, err := config.Parse([]byte(`
regions: [{name: a}, {name: b}, {name: c}]
network:
  - {from: a, to: b, rtt_ms: 50, egress_usd_per_gb: 0}
  - {from: b, to: a, rtt_ms: 50, egress_usd_per_gb: 0}
  - {from: a, to: c, rtt_ms: 50, egress_usd_per_gb: 0}
  - {from: c, to: a, rtt_ms: 50, egress_usd_per_gb: 0}
  - {from: b, to: c, rtt_ms: 50, egress_usd_per_gb: 0}
  - {from: c, to: b, rtt_ms: 50, egress_usd_per_gb: 0}
sources: [{name: sa, region: a}, {name: sc, region: c}]
models: [{name: m}, {name: n}]
profiles: [{name: p, capacity_per_replica: 100}]
clusters:
  - {name: a1, region: a, engine: vllm, models: [m], profile: p, endpoints: ["10.0.0.1:80", "10.0.0.2:80"]}
  - {name: b1, region: b, engine: vllm, models: [m], profile: p, endpoints: ["10.0.1.1:80"]}
  - {name: c1, region: c, engine: vllm, models: [n], profile: p, endpoints: ["10.0.2.1:80"]}
  - {name: c2, region: c, engine: vllm, models: [n], profile: p, endpoints: ["10.0.2.2:80"]}
controller: {max_weight_step: 1, min_cell_demand: 0}
`))
	if err != nil {
		t.Fatal(err)
	}
	st := weights.StaticState(c)
	d := weights.Demand{
		{Source: "sa", Model: "m", Priority: weights.Standard}: {CostPerSecond: 120},
		{Source: "sc", Model: "n", Priority: weights.Standard}: {CostPerSecond: 120},
	}
	prev := mustSolve(t, weights.Input{Config: c, Clusters: st, Demand: d})
	// a1 loses a replica: sa's load must spill to b1 (bounded: +25 per
	// tick of b1's 100), while sc/n, which does not touch b1, rebalances
	// between c1 and c2 (c2 falls to 80: c1 takes ~7 more, within its
	// bound) at once.
	st["a1"] = weights.NewClusterState(100, 1, nil, 0, 1)
	st["c2"] = weights.NewClusterState(100, 0, []float64{0.8}, 0, 1)
	w := mustSolve(t, weights.Input{Config: c, Clusters: st, Demand: d, Previous: prev})
	sa := explained(t, w, "sa", "m")
	sc := explained(t, w, "sc", "n")
	var b1 float64
	for _, tm := range sa.Explanation.Terms {
		if tm.Cluster == "b1" {
			b1 = tm.Flow
		}
	}
	if b1 > 25+1e-6 || b1 < 25-1 || !strings.Contains(sa.Explanation.Summary, "step-bounded") {
		t.Errorf("sa -> b1 = %.2f (%s); want the bound's 25", b1, sa.Explanation.Summary)
	}
	if strings.Contains(sc.Explanation.Summary, "step-bounded") || strings.Contains(sc.Explanation.Summary, "deadband") {
		t.Errorf("sc/n does not touch b1 but was held: %s", sc.Explanation.Summary)
	}
}

// TestColdStartMovesAtOnce: weights planned with no measured traffic (the
// min_cell_demand floor, as at a cold start) put the cell on its local
// cluster; when traffic arrives, the next tick goes straight to the
// optimum, while a cell that carried traffic is held by the step bound.
func TestColdStartMovesAtOnce(t *testing.T) {
	c := smallNearBigFar(t)
	static := weights.StaticState(c)
	tests := []struct {
		name     string
		before   float64 // src's demand for the first tick
		wantFar  float64 // far's share after the second tick, ± 0.01
		wantNote string
	}{
		{"no traffic before: to the optimum at once", 0, 0.9, ""},
		{"traffic before: held by the step bound", 50, 0.25, "step bound"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := mustSolve(t, weights.Input{Config: c, Clusters: static, Demand: demandOf("src", "m", weights.Standard, tt.before)})
			if share := farShare(t, first); share > 0.01 {
				t.Fatalf("first tick: far has %.3f of the cell; want ~0 (all local)", share)
			}
			// 800 units/s: near takes its 80 at target, far the rest.
			next := mustSolve(t, weights.Input{Config: c, Clusters: static, Previous: first, Demand: demandOf("src", "m", weights.Standard, 800.0)})
			if share := farShare(t, next); share < tt.wantFar-0.01 || share > tt.wantFar+0.01 {
				e, _ := next.Explain("src", "m")
				t.Errorf("second tick: far has %.3f of the cell; want %.2f (%s)", share, tt.wantFar, e.Summary)
			}
		})
	}
}

func farShare(t *testing.T, w *weights.Weights) float64 {
	t.Helper()
	cell, ok := w.Cell("src", "m")
	if !ok {
		t.Fatal("no cell (src, m)")
	}
	for _, tg := range cell.Targets {
		if tg.Cluster == "far" {
			return float64(tg.Weight) / weights.Total
		}
	}
	return 0
}

// TestRemovedClusterMovesAtOnce: when the configuration no longer has a
// cluster the previous weights used (removed, or no longer serving the
// model), the cell lost it as surely as one that lost its capacity: it
// moves at once, and neither the deadband nor the step bound may keep
// previous weights that no longer sum to Total.
func TestRemovedClusterMovesAtOnce(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *config.Config)
	}{
		{"cluster removed", func(c *config.Config) { c.Clusters = c.Clusters[:1] }},
		{"cluster serves another model", func(c *config.Config) {
			other := c.Models[0]
			other.Name = "other"
			c.Models = append(c.Models, other)
			c.Clusters[1].Models = []string{"other"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := smallNearBigFar(t)
			c.Controller.Deadband, c.Controller.MaxWeightStep = 0.99, 0.1
			d := demandOf("src", "m", weights.Standard, 800.0)
			first := mustSolve(t, weights.Input{Config: c, Clusters: weights.StaticState(c), Demand: d})
			if share := farShare(t, first); share < 0.5 {
				t.Fatalf("first tick: far has %.3f of the cell; the test needs most of it there", share)
			}
			next := *c
			next.Clusters = slices.Clone(c.Clusters)
			next.Models = slices.Clone(c.Models)
			tt.change(&next)
			if err := next.Validate(); err != nil {
				t.Fatal(err)
			}
			w := mustSolve(t, weights.Input{Config: &next, Clusters: weights.StaticState(&next), Demand: d, Previous: first})
			cell := explained(t, w, "src", "m")
			if len(cell.Targets) != 1 || cell.Targets[0].Cluster != "near" || cell.Targets[0].Weight != weights.Total {
				t.Errorf("targets %+v; want all on near", cell.Targets)
			}
			if !strings.Contains(cell.Explanation.Summary, "moved at once") {
				t.Errorf("summary %q does not say the cell moved at once", cell.Explanation.Summary)
			}
		})
	}
}
