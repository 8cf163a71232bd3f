package route_test

import (
	"math"
	"sync"
	"testing"

	"github.com/ilbproject/ilb/route"
)

// TestCalibration: the scale settles at the 0.9 quantile of actual ÷
// predicted first tokens, within [MinFirstTokenScale, 1], and ignores
// observations it cannot read.
func TestCalibration(t *testing.T) {
	// ratios is n observations whose actual ÷ predicted cycle evenly
	// through [lo, hi): their 0.9 quantile is lo + 0.9 (hi − lo).
	ratios := func(lo, hi float64, n int) [][2]float64 {
		out := make([][2]float64, n)
		for i := range out {
			out[i] = [2]float64{2, 2 * (lo + (hi-lo)*float64((i*7919)%1000)/1000)}
		}
		return out
	}
	nan := math.NaN()
	tests := []struct {
		name   string
		obs    [][2]float64 // predicted, actual (seconds)
		lo, hi float64      // the scale after them
	}{
		{"none: the bound as it is", nil, 1, 1},
		{"first tokens at 0.2–0.8 of the prediction: the 0.9 quantile, 0.74", ratios(0.2, 0.8, 5000), 0.70, 0.78},
		{"first tokens at 0.4–0.5: 0.49", ratios(0.4, 0.5, 5000), 0.47, 0.51},
		{"first tokens later than predicted: never above 1", ratios(1.5, 3, 2000), 1, 1},
		{"first tokens at once: never below the floor", ratios(0, 0.001, 5000), route.MinFirstTokenScale, route.MinFirstTokenScale},
		{"predictions within the target teach nothing", [][2]float64{{1, 0}, {0.5, 0}, {1, 0.1}}, 1, 1},
		{"unreadable observations are ignored", [][2]float64{{0, 1}, {-1, 0}, {nan, 0}, {math.Inf(1), 0}, {1, -1}, {1, nan}, {1, math.Inf(1)}}, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c route.Calibration
			for _, o := range tt.obs {
				c.Observe(o[0], o[1], 1)
			}
			if s := c.Scale(); !(s >= tt.lo && s <= tt.hi) {
				t.Errorf("scale %v; want within [%v, %v]", s, tt.lo, tt.hi)
			}
		})
	}
}

// TestCalibrationConcurrent: observations from many goroutines at once
// all count (the scale moves as far as the same ones in sequence, within
// the estimator's noise), and it stays within its bounds.
func TestCalibrationConcurrent(t *testing.T) {
	var c route.Calibration
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				c.Observe(2, 2*(0.3+0.001*float64((i*31+g)%100)), 1) // 0.3–0.4: quantile 0.39
			}
		})
	}
	wg.Wait()
	if s := c.Scale(); !(s >= 0.37 && s <= 0.41) {
		t.Errorf("scale %v after 8,000 observations of 0.3–0.4; want about 0.39", s)
	}
}
