package controller_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/weights"
)

// tickSeq runs a controller over a demand level that level(i) gives at
// tick i, every 5 s, and returns one character per tick: '.' for a tick
// that used its inputs, 'F' for a fail-static tick, and the last error.
func tickSeq(t *testing.T, ticks int, level func(i int) float64) (string, error) {
	t.Helper()
	c := cfg(t)
	now := time.Unix(1000, 0)
	i := 0
	ctl, err := controller.New(controller.Options{
		Config: c, Policy: weights.Optimizer{},
		Now: func() time.Time { return now },
		Demand: func() (weights.Demand, time.Time) {
			return weights.Demand{{Source: "src", Model: "m", Priority: weights.Standard}: {RequestsPerSecond: 1, CostPerSecond: level(i)}}, now
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	var last error
	for i = range ticks {
		now = now.Add(5 * time.Second)
		if last = ctl.Tick(context.Background()); last != nil {
			b.WriteByte('F')
		} else {
			b.WriteByte('.')
		}
	}
	return b.String(), last
}

// TestDemandGuard: the demand-jump guard compares each tick's demand with
// the level last accepted (not the lagging average), holds a jump for at
// most two ticks and then believes it once: the new level is the
// reference from then on, so a persistent change never flaps.
func TestDemandGuard(t *testing.T) {
	tests := []struct {
		name  string
		level func(i int) float64
		want  string
	}{
		{"steady", func(int) float64 { return 150 }, strings.Repeat(".", 40)},
		{"persistent 100× drop: held twice, then believed", func(i int) float64 {
			if i < 20 {
				return 150
			}
			return 1.5
		}, strings.Repeat(".", 20) + "FF" + strings.Repeat(".", 18)},
		{"persistent 20× surge: held twice, then believed", func(i int) float64 {
			if i < 20 {
				return 10
			}
			return 200
		}, strings.Repeat(".", 20) + "FF" + strings.Repeat(".", 18)},
		{"one-tick blip: held, then the old level is plausible", func(i int) float64 {
			if i == 20 {
				return 5000
			}
			return 150
		}, strings.Repeat(".", 20) + "F" + strings.Repeat(".", 19)},
		{"gradual decline within the factor per tick: never held", func(i int) float64 {
			return 1e4 * math.Pow(0.5, float64(i))
		}, strings.Repeat(".", 40)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := tickSeq(t, 40, tt.level)
			if got != tt.want {
				t.Errorf("ticks (F: fail-static)\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestBadDemandDoesNotPoisonTheAverage: one report of NaN, infinite or
// negative demand is refused before it reaches the moving average; the
// next good demand is used again.
func TestBadDemandDoesNotPoisonTheAverage(t *testing.T) {
	for _, bad := range []float64{math.NaN(), math.Inf(1), -5} {
		seq, last := tickSeq(t, 12, func(i int) float64 {
			if i == 2 {
				return bad
			}
			return 60
		})
		if want := "..F" + strings.Repeat(".", 9); seq != want || last != nil {
			t.Errorf("demand %v at tick 2: ticks %s (last error %v); want %s", bad, seq, last, want)
		}
	}
}

// TestStaleDemandHolds: demand measured longer ago than stale_after keeps
// the last good weights until fresh demand comes back.
func TestStaleDemandHolds(t *testing.T) {
	c := cfg(t)
	now := time.Unix(1000, 0)
	measured := now
	ctl, err := controller.New(controller.Options{
		Config: c, Policy: weights.Optimizer{},
		Now: func() time.Time { return now },
		Demand: func() (weights.Demand, time.Time) {
			return weights.Demand{{Source: "src", Model: "m", Priority: weights.Standard}: {CostPerSecond: 60}}, measured
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ctl.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	good := ctl.Current().Version()
	now = now.Add(31 * time.Second)
	if err := ctl.Tick(ctx); err == nil || !strings.Contains(err.Error(), "stale_demand") {
		t.Errorf("Tick with demand 31s old: %v; want stale_demand", err)
	}
	if ctl.Current().Version() != good {
		t.Error("weights changed on stale demand")
	}
	measured = now
	if err := ctl.Tick(ctx); err != nil {
		t.Errorf("Tick with fresh demand again: %v", err)
	}
}
