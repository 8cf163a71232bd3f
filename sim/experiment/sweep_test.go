package experiment

import (
	"strings"
	"testing"
)

// TestSweepChecks: ILB is held at every load to the best deployable
// baseline (never to the oracle least_loaded), whether or not a baseline
// attains; past saturation to at least its goodput, with importance kept
// in what is shed.
func TestSweepChecks(t *testing.T) {
	res := func(policy string, goodput, p99 float64, shed ...float64) *Result {
		r := &Result{Policy: policy, Totals: Figures{Goodput: goodput, GoodShare: goodput / 100, TTFTp99: p99}}
		copy(r.Totals.Shed[:], shed)
		return r
	}
	tests := []struct {
		name   string
		load   float64
		rs     []*Result
		failed []string // substrings of the failed checks' rules
	}{
		{
			name: "light load: within 0.98 of the best and 1.1 of its p99",
			load: 0.3, rs: []*Result{res("ilb", 99, 2.1), res("waterfall", 100, 2.0), res("proportional", 100, 2.5)},
		},
		{
			name: "light load: the deployable least loaded is a baseline",
			load: 0.3, rs: []*Result{res("ilb", 95, 3.3), res("waterfall", 97.9, 2.5), res("least_loaded_seen", 98.7, 2.2)},
			failed: []string{"least_loaded_seen's 98.70/s", "p99 TTFT 3.30s ≤ 1.1 × least_loaded_seen's"},
		},
		{
			name: "the oracle is not a baseline",
			load: 0.3, rs: []*Result{res("ilb", 99, 2.1), res("waterfall", 99, 2.1), res("least_loaded", 100, 1.0)},
		},
		{
			name: "among equal goodput, the lowest p99 is the bar",
			load: 0.5, rs: []*Result{res("ilb", 100, 2.5), res("waterfall", 100, 2.0), res("proportional", 100, 3.0)},
			failed: []string{"p99 TTFT 2.50s ≤ 1.1 × waterfall's"},
		},
		{
			name: "standard shed below saturation fails",
			load: 0.9, rs: []*Result{res("ilb", 100, 1, 0, 0.02, 0.05), res("waterfall", 99, 1)},
			failed: []string{"standard shed"},
		},
		{
			name: "past saturation, no baseline attains: still held, to 1.0×",
			load: 1.1, rs: []*Result{res("ilb", 50, 10, 0, 0, 0.15), res("waterfall", 54, 500)},
			failed: []string{"(past saturation)"},
		},
		{
			name: "past saturation: standard shed before sheddable fails",
			load: 1.3, rs: []*Result{res("ilb", 80, 4, 0, 0.2, 0.1), res("waterfall", 50, 500)},
			failed: []string{"shed critical"},
		},
		{
			name: "past saturation: ahead, sheddable first",
			load: 1.1, rs: []*Result{res("ilb", 80, 4, 0, 0.05, 0.4), res("waterfall", 50, 500), res("least_loaded_seen", 40, 300)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Sweep{Loads: []float64{tt.load}, Results: [][]*Result{tt.rs}, Attain: 0.95}
			var failed []string
			for _, c := range s.Checks() {
				if c.Load > 0 && !c.OK {
					failed = append(failed, c.Rule)
				}
			}
			if len(failed) != len(tt.failed) {
				t.Fatalf("failed checks %q; want %d matching %q", failed, len(tt.failed), tt.failed)
			}
			for i, want := range tt.failed {
				if !strings.Contains(failed[i], want) {
					t.Errorf("failed check %q; want one with %q", failed[i], want)
				}
			}
		})
	}
}
