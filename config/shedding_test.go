package config_test

import (
	"strings"
	"testing"

	"github.com/ilbproject/ilb/config"
)

// TestValidateShedding: shed costs sit between the dearest way of serving
// and the overflow cost (serving critical demand above a cluster's
// capacity), so ILB sheds standard and sheddable demand rather than
// overload a cluster; and every cost stays small enough for the solver's
// int64 arithmetic.
func TestValidateShedding(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(sh *config.Shedding)
		want   []string // each must appear in one problem; none: valid
	}{
		{"defaults", func(*config.Shedding) {}, nil},
		{"dearest valid costs", func(sh *config.Shedding) {
			sh.SheddableCost, sh.StandardCost = config.OverflowCost-2, config.OverflowCost-1
		}, nil},
		{"critical shed at the cap", func(sh *config.Shedding) {
			sh.ShedCritical, sh.CriticalCost = true, config.MaxShedCost
		}, nil},
		{"shed costs above the overflow cost", func(sh *config.Shedding) {
			sh.SheddableCost, sh.StandardCost = 2e6, 3e6
		}, []string{
			"controller.shedding.sheddable_cost: 2e+06 is too high: want a cost in (1010, 1e+06)",
			"controller.shedding.standard_cost: 3e+06 is too high: want a cost in (2e+06, 1e+06)",
			"serving critical demand above a cluster's capacity",
		}},
		{"standard at the overflow cost", func(sh *config.Shedding) {
			sh.StandardCost = config.OverflowCost
		}, []string{"controller.shedding.standard_cost: 1e+06 is too high: want a cost in (10000, 1e+06)"}},
		{"critical cost past the cap", func(sh *config.Shedding) {
			sh.ShedCritical, sh.CriticalCost = true, 1e12
		}, []string{"controller.shedding.critical_cost: 1e+12 is too high: want a cost in (100000, 1e+06]", "overflow"}},
		{"too low, as before", func(sh *config.Shedding) {
			sh.SheddableCost = 5
		}, []string{"controller.shedding.sheddable_cost: 5 is too low: want more than 1010"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, base)
			tt.mutate(&c.Controller.Shedding)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v; want valid", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate() = nil; want problems")
			}
			msgs := problems(t, err)
			for _, w := range tt.want {
				if !containsOne(msgs, w) {
					t.Errorf("no problem contains %q; got:\n%s", w, strings.Join(msgs, "\n"))
				}
			}
		})
	}
}
