package weights_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/internal/configtest"
	"github.com/ilbproject/ilb/weights"
)

// twoRegions: source src in region a; cluster near in a, far in b (RTT
// 50 ms, no egress), each 100 token-cost/s at full capacity; target 0.8,
// the default utilization curve: 0.25, 0.5, 1, 2, 4, 8 in six bands up to
// 0.8, then 1000, 1500, 3000, 6000 up to 1.
// cfg parses the two-region world afresh (tests change its controller
// settings).
func cfg(t *testing.T) *config.Config { return configtest.TwoRegions(t) }

func demandOf(rows ...any) weights.Demand {
	d := weights.Demand{}
	for i := 0; i+3 < len(rows)+1; i += 4 {
		k := weights.DemandKey{Source: rows[i].(string), Model: rows[i+1].(string), Priority: rows[i+2].(weights.Priority)}
		d[k] = weights.Rate{CostPerSecond: rows[i+3].(float64)}
	}
	return d
}

func solve(t *testing.T, c *config.Config, d weights.Demand, prev *weights.Weights) *weights.Weights {
	t.Helper()
	w, err := weights.Optimizer{}.Compute(weights.Input{Config: c, Clusters: weights.StaticState(c), Demand: d, Previous: prev})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestHandComputed checks the optimum of small cases worked out by hand
// from the cost curve (see the comment of twoRegions).
func TestHandComputed(t *testing.T) {
	c := cfg(t)
	tests := []struct {
		name    string
		demand  weights.Demand
		source  string
		targets []weights.Target
		shed    weights.ShedFractions
	}{
		// 60 units: near up to u=0.6 costs at most 2 < 50 (the trip to far).
		{
			"all local below target", demandOf("src", "m", weights.Standard, 60.0), "src",
			[]weights.Target{{Cluster: "near", Weight: 10000}},
			weights.ShedFractions{},
		},
		// 120: near to 0.8 (marginal 8); the next unit costs 150 near but
		// 50 + 0 far: far takes 40 (u 0.4). 80/120, 40/120.
		{
			"spill past the target", demandOf("src", "m", weights.Standard, 120.0), "src",
			[]weights.Target{{Cluster: "near", Weight: 6667}, {Cluster: "far", Weight: 3333}},
			weights.ShedFractions{},
		},
		// 200: near to 80 (≤ 8), far to 80 (≤ 58 < 150), then alternating
		// 150 near, 200 far, 400 near, 450 far: both full, 50/50.
		{
			"both full", demandOf("src", "m", weights.Standard, 200.0), "src",
			[]weights.Target{{Cluster: "near", Weight: 5000}, {Cluster: "far", Weight: 5000}},
			weights.ShedFractions{},
		},
		// 230 (200 standard + 30 sheddable): capacity is 200; the 30
		// sheddable units are shed, never the standard ones.
		{
			"shed the lowest priority", demandOf("src", "m", weights.Standard, 200.0, "src", "m", weights.Sheddable, 30.0), "src",
			[]weights.Target{{Cluster: "near", Weight: 5000}, {Cluster: "far", Weight: 5000}},
			weights.ShedFractions{weights.Sheddable: 1},
		},
		// Residency: local-only may use near only (100): 50 critical + 80
		// standard: 30 standard shed (30/80), critical served.
		{
			"residency caps, standard shed before critical", demandOf("local-only", "m", weights.Critical, 50.0, "local-only", "m", weights.Standard, 80.0), "local-only",
			[]weights.Target{{Cluster: "near", Weight: 10000}},
			weights.ShedFractions{weights.Standard: 30.0 / 80},
		},
		// 150 critical on near alone: critical is never shed, so near
		// runs over capacity (the only case where it may).
		{
			"critical over capacity rather than shed", demandOf("local-only", "m", weights.Critical, 150.0), "local-only",
			[]weights.Target{{Cluster: "near", Weight: 10000}},
			weights.ShedFractions{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := solve(t, c, tt.demand, nil)
			cell := explained(t, w, tt.source, "m")
			if !slices.Equal(cell.Targets, tt.targets) {
				t.Errorf("targets = %v; want %v\n%s", cell.Targets, tt.targets, cell.Explanation.Summary)
			}
			for _, p := range weights.Priorities {
				if math.Abs(cell.Shed[p]-tt.shed[p]) > 1e-4 {
					t.Errorf("shed %s = %v; want %v", p, cell.Shed[p], tt.shed[p])
				}
			}
		})
	}
}

func TestStepBoundAndDeadband(t *testing.T) {
	c := cfg(t)
	c.Controller.MaxWeightStep = 0.25
	prev := solve(t, c, demandOf("src", "m", weights.Standard, 60.0), nil) // near 100%
	// The optimum for 120 is 66.67/33.33: a move of 1/3 > 0.25, so the
	// weights move a quarter of the way... exactly 0.25 of the traffic.
	w := solve(t, c, demandOf("src", "m", weights.Standard, 120.0), prev)
	cell := explained(t, w, "src", "m")
	if want := []weights.Target{{Cluster: "near", Weight: 7500}, {Cluster: "far", Weight: 2500}}; !slices.Equal(cell.Targets, want) {
		t.Errorf("step-bounded targets = %v; want %v", cell.Targets, want)
	}
	if !strings.Contains(cell.Explanation.Summary, "step-bounded") || cell.Explanation.Terms[0].Binding != "step bound" {
		t.Errorf("explanation does not name the step bound: %q %+v", cell.Explanation.Summary, cell.Explanation.Terms)
	}
	if !slices.Contains(cell.Explanation.Changes, "near 100.0% -> 75.0% (step bound)") {
		t.Errorf("changes = %q", cell.Explanation.Changes)
	}
	// A tiny change of demand moves the optimum by less than the deadband:
	// same version.
	c.Controller.Deadband = 0.01
	a := solve(t, c, demandOf("src", "m", weights.Standard, 120.0), nil)
	b := solve(t, c, demandOf("src", "m", weights.Standard, 121.0), a)
	if a.Version() != b.Version() {
		t.Errorf("a change within the deadband made a new version")
	}
	if cb := explained(t, b, "src", "m"); !strings.Contains(cb.Explanation.Summary, "deadband") {
		t.Errorf("summary %q does not name the deadband", cb.Explanation.Summary)
	}
}

func TestLostCapacityMovesAtOnce(t *testing.T) {
	c := cfg(t)
	c.Controller.MaxWeightStep = 0.1
	c.Controller.MaxUtilizationStep = 0.1
	st := weights.StaticState(c)
	prev := solve(t, c, demandOf("src", "m", weights.Standard, 60.0), nil)
	st["near"] = weights.ClusterState{Unhealthy: 1}
	w, err := weights.Optimizer{}.Compute(weights.Input{Config: c, Clusters: st, Demand: demandOf("src", "m", weights.Standard, 60.0), Previous: prev})
	if err != nil {
		t.Fatal(err)
	}
	cell, _ := w.Cell("src", "m")
	if want := []weights.Target{{Cluster: "far", Weight: 10000}}; !slices.Equal(cell.Targets, want) {
		t.Errorf("targets = %v; want all on far at once despite the step bounds", cell.Targets)
	}
}

// explained returns a cell with its explanation filled.
func explained(t *testing.T, w *weights.Weights, source, model string) weights.Cell {
	t.Helper()
	cs := w.Explained(func(c weights.Cell) bool { return c.Source == source && c.Model == model })
	if len(cs) != 1 {
		t.Fatalf("no cell (%s, %s)", source, model)
	}
	return cs[0]
}

// TestBeatsBaselines prices every policy's weights with the optimizer's
// objective on random worlds: where a baseline is feasible (no cluster
// over capacity), the optimizer costs no more, up to the rounding of
// weights to 1/10000: each weight is off by less than 1e-4, so each
// unit's cost by at most the dearest band plus the dearest link — a bound
// of 2e-4 × demand × (400 + 160 + 10) here.
func TestBeatsBaselines(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	compared := map[string]int{}
	for i := 0; compared["waterfall"] < 150 && i < 5000; i++ {
		wd := genWorld(r, false)
		if wd == nil {
			continue
		}
		in := wd.input(nil)
		opt := weights.Evaluate(in, mustSolve(t, in))
		// Weights are rounded to 1/10000: a cluster planned at exactly
		// 100% may end a hair above it. That is rounding, not overflow.
		if opt.OverflowLoad <= 1e-4*in.Demand.Total()+1e-6 {
			opt.Total -= opt.Overflow
		}
		for _, p := range []weights.Policy{weights.RoundRobin{}, weights.Proportional{}, weights.Waterfall{}} {
			bw, err := p.Compute(in)
			if err != nil {
				t.Fatal(err)
			}
			base := weights.Evaluate(in, bw)
			if base.OverflowLoad > 1e-6 {
				continue // infeasible: the baseline overloads a cluster
			}
			compared[p.Name()]++
			if tol := 2e-4 * in.Demand.Total() * (6000 + 160 + 10); opt.Total > base.Total+tol+1e-6 {
				t.Fatalf("world %d: optimizer costs %+v, more than %s %+v", i, opt, p.Name(), base)
			}
		}
	}
	t.Logf("feasible comparisons: %v", compared)
}

// TestCostOfHandComputedCase prices the spill case by hand: 80 units on
// near (six bands of 80/6 units at 0.25, 0.5, 1, 2, 4, 8 = 210) and 40 on
// far (its first bands, 50 ms away = 2000).
func TestCostOfHandComputedCase(t *testing.T) {
	c := cfg(t)
	in := weights.Input{Config: c, Clusters: weights.StaticState(c), Demand: demandOf("src", "m", weights.Standard, 120.0)}
	got := weights.Evaluate(in, mustSolve(t, in))
	// Weights are 6667/3333: x_far = 120 × 0.3333 = 39.996, near 80.004
	// (0.004 into the 1000 band), and near is 1 ms away (inside a region).
	band := 80.0 / 6
	near := band*(0.25+0.5+1+2+4+8) + 0.004*1000
	far := band*(0.25+0.5) + (39.996-2*band)*1
	want := near + far + 39.996*50 + 80.004*1
	if math.Abs(got.Total-want) > 0.01 {
		t.Errorf("cost %+v; want total %.3f", got, want)
	}
}

// TestBadDemandNamesEveryOffender: the optimizer refuses demand with a bad
// rate or an unknown stream, naming every offender once per problem, in
// (source, model, priority) order, whatever the map's order.
func TestBadDemandNamesEveryOffender(t *testing.T) {
	c := cfg(t)
	d := weights.Demand{
		{Source: "src", Model: "m", Priority: weights.Standard}:         {CostPerSecond: 10},
		{Source: "zz", Model: "m", Priority: weights.Critical}:          {CostPerSecond: math.NaN()},
		{Source: "src", Model: "nope", Priority: weights.Standard}:      {CostPerSecond: 1},
		{Source: "local-only", Model: "m", Priority: weights.Sheddable}: {CostPerSecond: -1},
		{Source: "src", Model: "m", Priority: weights.Priority(7)}:      {CostPerSecond: 1},
	}
	want := []string{
		"demand of (local-only, m, sheddable) is",
		"demand for unknown (src, m, priority(7))",
		"demand for unknown (src, nope, standard)",
		"demand of (zz, m, critical) is",
		"demand for unknown (zz, m, critical)",
	}
	for range 5 { // map order varies from run to run
		_, err := weights.Optimizer{}.Compute(weights.Input{Config: c, Clusters: weights.StaticState(c), Demand: d})
		if !errors.Is(err, weights.ErrBadInput) {
			t.Fatalf("error %v; want ErrBadInput", err)
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != len(want) {
			t.Fatalf("%d errors; want %d:\n%v", len(lines), len(want), err)
		}
		for i, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("error %d is %q; want it to name %q", i, lines[i], w)
			}
		}
	}
}
