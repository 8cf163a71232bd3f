package weights_test

import (
	"math"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/weights"
)

// TestShedAgainstSaturation: the plan sheds against a cluster's
// saturation throughput when it is above its capacity within the TTFT
// target — sheddable demand past 90% of it, standard demand past all of
// it — and against the capacity otherwise. local-only may use near alone
// (capacity 100).
func TestShedAgainstSaturation(t *testing.T) {
	tests := []struct {
		name       string
		saturation float64
		priority   weights.Priority
		demand     float64
		served     float64 // of demand, on near
		binding    string  // near's binding, "" for any
	}{
		{"unknown: sheddable served to 90% of the capacity", 0, weights.Sheddable, 140, 90, "above target utilization"},
		{"at the capacity: the same", 100, weights.Sheddable, 140, 90, ""},
		{"below the capacity: the same", 60, weights.Sheddable, 140, 90, ""},
		{"1.5× the capacity: sheddable served to 90% of it", 150, weights.Sheddable, 140, 135, "over the capacity within the TTFT target, below saturation"},
		{"1.5× the capacity: standard served to all of it", 150, weights.Standard, 170, 150, "at capacity"},
		{"unknown: standard served to the capacity", 0, weights.Standard, 170, 100, "at capacity"},
		{"within the capacity nothing is shed", 150, weights.Sheddable, 80, 80, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg(t)
			st := weights.StaticState(c)
			near := st["near"]
			near.Saturation = tt.saturation
			st["near"] = near
			d := demandOf("local-only", "m", tt.priority, tt.demand)
			w := mustSolve(t, weights.Input{Config: c, Clusters: st, Demand: d})
			cell := explained(t, w, "local-only", "m")
			if want := 1 - tt.served/tt.demand; math.Abs(cell.Shed[tt.priority]-want) > 1e-3 {
				t.Errorf("%s shed %.4f; want %.4f (%v)", tt.priority, cell.Shed[tt.priority], want, cell.Explanation.Summary)
			}
			for _, tm := range cell.Explanation.Terms {
				if tm.Cluster == "near" && tt.binding != "" && !strings.Contains(tm.Binding, tt.binding) {
					t.Errorf("near's binding %q at %.0f%%; want %q", tm.Binding, 100*tm.Utilization, tt.binding)
				}
			}
			if cost := weights.Evaluate(weights.Input{Config: c, Clusters: st, Demand: d}, w); cost.OverflowLoad > 1e-2 {
				t.Errorf("overflow %.3f; want none: the load is within the curve", cost.OverflowLoad)
			}
		})
	}
}

// TestBadSaturationRejected: a saturation throughput that is NaN,
// infinite or negative is bad input, named.
func TestBadSaturationRejected(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), -1} {
		c := cfg(t)
		st := weights.StaticState(c)
		near := st["near"]
		near.Saturation = v
		st["near"] = near
		_, err := weights.Optimizer{}.Compute(weights.Input{Config: c, Clusters: st, Demand: demandOf("src", "m", weights.Standard, 10.0)})
		if err == nil || !strings.Contains(err.Error(), "cluster near") {
			t.Errorf("saturation %v: %v; want an error naming cluster near", v, err)
		}
	}
}
