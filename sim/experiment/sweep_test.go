package experiment

import (
	"slices"
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

// TestSweepSaturation: a load the oracle cannot sustain is past
// saturation whatever its nominal value (an outage takes capacity away):
// there standard traffic may be shed, as long as importance is kept in
// what is shed and in what is served within the SLO.
func TestSweepSaturation(t *testing.T) {
	res := func(policy string, goodShare float64, shed [3]float64, good [3]float64) *Result {
		return &Result{Policy: policy, Totals: Figures{
			Goodput: 100 * goodShare, GoodShare: goodShare, TTFTp99: 1, Shed: shed,
			ByPriority: [3]int{10000, 50000, 40000}, GoodByPriority: good,
		}}
	}
	none := [3]float64{}
	tests := []struct {
		name    string
		oracle  [2]float64 // its good share at 0.5 and 0.7
		ilb     *Result
		sat     float64
		failed  []string
		checked []string
	}{
		{
			name:   "the oracle sustains 0.5 only: at 0.7 standard shed is allowed, importance kept",
			oracle: [2]float64{0.99, 0.6}, sat: 0.5,
			ilb:     res("ilb", 0.8, [3]float64{0, 0.05, 0.5}, [3]float64{0.99, 0.9, 0.45}),
			checked: []string{"(past saturation)", "shed critical", "within the SLO: critical 99.0% ≥ standard 90.0% ≥ sheddable 45.0%"},
		},
		{
			name:   "past saturation: standard served within the SLO less often than sheddable fails",
			oracle: [2]float64{0.99, 0.6}, sat: 0.5,
			ilb:    res("ilb", 0.8, [3]float64{0, 0.05, 0.5}, [3]float64{0.99, 0.4, 0.45}),
			failed: []string{"within the SLO: critical 99.0% ≥ standard 40.0% ≥ sheddable 45.0%"},
		},
		{
			name:   "past saturation: critical a hair under standard is noise, not a loss",
			oracle: [2]float64{0.99, 0.6}, sat: 0.5,
			ilb:     res("ilb", 0.8, [3]float64{0, 0.05, 0.5}, [3]float64{0.985, 0.986, 0.45}),
			checked: []string{"within the SLO: critical 98.5% ≥ standard 98.6% ≥ sheddable 45.0%"},
		},
		{
			name:   "the oracle sustains both: standard shed at 0.7 fails",
			oracle: [2]float64{0.99, 0.97}, sat: 0.7,
			ilb:    res("ilb", 0.97, [3]float64{0, 0.05, 0.1}, [3]float64{1, 0.95, 0.9}),
			failed: []string{"standard shed 5.0% ≤ 1%"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := res("waterfall", 0.6, none, [3]float64{0.6, 0.6, 0.6})
			s := Sweep{Loads: []float64{0.5, 0.7}, Attain: 0.95, Results: [][]*Result{
				{res("ilb", 0.99, none, [3]float64{1, 1, 1}), res("least_loaded", tt.oracle[0], none, none), res("waterfall", 0.99, none, none)},
				{tt.ilb, res("least_loaded", tt.oracle[1], none, none), base},
			}}
			if got := s.Saturation(); got != tt.sat {
				t.Fatalf("Saturation() = %v, want %v", got, tt.sat)
			}
			var failed, checked []string
			for _, c := range s.Checks() {
				if c.Load != 0.7 {
					continue
				}
				checked = append(checked, c.Rule)
				if !c.OK {
					failed = append(failed, c.Rule)
				}
			}
			if len(failed) != len(tt.failed) {
				t.Fatalf("failed checks %q; want %q", failed, tt.failed)
			}
			for i, want := range tt.failed {
				if !strings.Contains(failed[i], want) {
					t.Errorf("failed check %q; want one with %q", failed[i], want)
				}
			}
			for _, want := range tt.checked {
				if !slices.ContainsFunc(checked, func(r string) bool { return strings.Contains(r, want) }) {
					t.Errorf("checks at 0.7 %q; want one with %q", checked, want)
				}
			}
		})
	}
}
