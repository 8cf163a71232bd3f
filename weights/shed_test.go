package weights_test

import (
	"math"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

// TestNoCapacityPublishesNoShedFraction: a cell no cluster can serve has
// no targets, and no shed fraction either — its requests get 503
// no_capacity whatever their priority, not a 429 "shed" for some.
func TestNoCapacityPublishesNoShedFraction(t *testing.T) {
	tests := []struct {
		name         string
		shedCritical bool
	}{
		{"critical never shed", false},
		{"critical may be shed", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg(t)
			c.Controller.Shedding.ShedCritical = tt.shedCritical
			st := weights.StaticState(c)
			st["near"] = weights.ClusterState{Unhealthy: 1}
			st["far"] = weights.ClusterState{Unhealthy: 1}
			d := demandOf("src", "m", weights.Critical, 10.0, "src", "m", weights.Standard, 10.0, "src", "m", weights.Sheddable, 10.0)
			w := mustSolve(t, weights.Input{Config: c, Clusters: st, Demand: d})
			cell := explained(t, w, "src", "m")
			if len(cell.Targets) != 0 || cell.Shed != (weights.ShedFractions{}) || cell.Served != 0 {
				t.Errorf("targets %v shed %v served %v; want none, no shed fraction, nothing served", cell.Targets, cell.Shed, cell.Served)
			}
			if !strings.Contains(cell.Explanation.Summary, "503") {
				t.Errorf("summary %q does not say requests get 503", cell.Explanation.Summary)
			}
		})
	}
}

// TestShedRatherThanOverflow: with critical demand, clusters have an
// overflow arc (critical is served above capacity when nothing else can
// take it). Standard and sheddable demand must be shed, not sent over
// capacity, at the dearest shed costs the configuration accepts.
func TestShedRatherThanOverflow(t *testing.T) {
	c := cfg(t)
	// The dearest valid costs: just below the overflow cost.
	c.Controller.Shedding.SheddableCost = config.OverflowCost - 2
	c.Controller.Shedding.StandardCost = config.OverflowCost - 1
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// near and far hold 200 together; local-only may only use near.
	d := demandOf("src", "m", weights.Standard, 500.0, "local-only", "m", weights.Critical, 10.0)
	w := mustSolve(t, weights.Input{Config: c, Clusters: weights.StaticState(c), Demand: d})
	for _, cell := range w.Explained(nil) {
		for _, tm := range cell.Explanation.Terms {
			if tm.Utilization > 1+1e-3 {
				t.Errorf("%s: %s planned at %.0f%% (%s); want standard demand shed, not overflowed", cell.Source, tm.Cluster, 100*tm.Utilization, tm.Binding)
			}
		}
	}
	src, _ := w.Cell("src", "m")
	// 200 of capacity, 10 of it for local-only's critical: 310 of 500 shed.
	if want := 310.0 / 500; math.Abs(src.Shed[weights.Standard]-want) > 1e-3 {
		t.Errorf("standard shed %.4f; want %.4f", src.Shed[weights.Standard], want)
	}
}

// TestDearestCostsDoNotOverflow solves at the dearest costs validation
// accepts, with critical shedding on (no overflow arcs) and off, and the
// longest round trip shedding allows: the solver's int64 arithmetic
// (costs × 100 × 2^34 flow units) must not overflow.
func TestDearestCostsDoNotOverflow(t *testing.T) {
	for _, shedCritical := range []bool{false, true} {
		c := cfg(t)
		sh := &c.Controller.Shedding
		sh.ShedCritical = shedCritical
		sh.SheddableCost, sh.StandardCost, sh.CriticalCost = config.OverflowCost-2, config.OverflowCost-1, config.MaxShedCost
		for i := range c.Network {
			c.Network[i].RTTMs = config.OverflowCost - 6100 // dearer than the top band, cheaper than shedding
		}
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		d := demandOf("src", "m", weights.Standard, 1e9, "src", "m", weights.Sheddable, 1e9, "local-only", "m", weights.Critical, 1e9)
		if _, err := (weights.Optimizer{}).Compute(weights.Input{Config: c, Clusters: weights.StaticState(c), Demand: d}); err != nil {
			t.Errorf("shed_critical %v: %v", shedCritical, err)
		}
	}
}
