package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
)

// TestValidateShedding: shed costs sit between the dearest way of serving
// (here 6000 top band + 2 × 5 movement + 80 ms + 0.05 $/GB × 100 = 6095;
// for sheddable demand, up to the target utilization: 8 + 85 + 10 = 103) and
// the overflow cost (serving critical demand above a cluster's
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
			"controller.shedding.sheddable_cost: 2e+06 is too high: want a cost in (103, 1e+06): shedding it must cost less than serving critical demand above a cluster's capacity (1e+06)",
			"controller.shedding.standard_cost: 3e+06 is too high: want a cost in (6095, 1e+06)",
		}},
		{"standard at the overflow cost", func(sh *config.Shedding) {
			sh.StandardCost = config.OverflowCost
		}, []string{"controller.shedding.standard_cost: 1e+06 is too high: want a cost in (6095, 1e+06): shedding it must cost less"}},
		{"critical cost past the cap", func(sh *config.Shedding) {
			sh.ShedCritical, sh.CriticalCost = true, 1e12
		}, []string{"controller.shedding.critical_cost: 1e+12 is too high: want a cost in (100000, 1e+06]: larger costs overflow the solver's int64 arithmetic"}},
		{"too low, as before", func(sh *config.Shedding) {
			sh.SheddableCost = 5
		}, []string{"controller.shedding.sheddable_cost: 5 is too low: want more than 103 (the dearest way of serving up to the target utilization"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse([]byte(base))
			if err != nil {
				t.Fatal(err)
			}
			tt.mutate(&c.Controller.Shedding)
			err = c.Validate()
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

// TestStaleAfterCoversReports: demand is dated by the tick after each
// reporter's last report, so stale_after must cover a tick plus a report
// interval, or the controller would hold the weights between reports.
func TestStaleAfterCoversReports(t *testing.T) {
	tests := []struct {
		name                  string
		stale, tick, interval time.Duration
		want                  string // "" when valid
	}{
		{"defaults", 30 * time.Second, 5 * time.Second, time.Second, ""},
		{"exactly a tick and an interval", 6 * time.Second, 5 * time.Second, time.Second, ""},
		{"shorter than the tick", 4 * time.Second, 5 * time.Second, time.Second, "controller.stale_after: 4s is shorter than the tick 5s"},
		{
			"shorter than tick + report interval", 30 * time.Second, 5 * time.Second, 40 * time.Second,
			"controller.stale_after: 30s is shorter than the tick 5s plus extproc.report_interval 40s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse([]byte(base))
			if err != nil {
				t.Fatal(err)
			}
			c.Controller.StaleAfter, c.Controller.Tick, c.ExtProc.ReportInterval = config.Duration(tt.stale), config.Duration(tt.tick), config.Duration(tt.interval)
			err = c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate() = %v; want valid", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate() = %v; want %q", err, tt.want)
			}
		})
	}
}
