package workload

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

func TestLognormalFromMeanP99(t *testing.T) {
	tests := []struct {
		name      string
		mean, p99 float64
		wantErr   bool
	}{
		{"conv trace prompts", 1155, 4142, false},
		{"short outputs", 28, 250, false},
		{"constant", 300, 300, false},
		{"near the limit", 100, 1490, false},
		{"p99 below the mean", 100, 99, true},
		{"tail too heavy", 100, 1500, true},
		{"zero mean", 0, 10, true},
		{"infinite p99", 10, math.Inf(1), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := lognormalFromMeanP99(tt.mean, tt.p99)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("no error, want one (mu %g sigma %g)", l.mu, l.sigma)
				}
				return
			}
			if err != nil {
				t.Fatalf("lognormalFromMeanP99: %v", err)
			}
			// The parameters give back the mean and p99 exactly.
			near(t, "mean", math.Exp(l.mu+l.sigma*l.sigma/2), tt.mean, 1e-9)
			near(t, "p99", math.Exp(l.mu+z99*l.sigma), tt.p99, 1e-9)
			if tt.mean < 10 || tt.p99 > 5*tt.mean {
				return
			}
			// Draws (rounded, clamped) are close when the tail is moderate:
			// near the limit the mean rests on rare, clamped giants.
			r := rand.New(rand.NewPCG(1, 2))
			xs := make([]int, 200000)
			sum := 0.0
			for i := range xs {
				xs[i] = l.draw(r)
				sum += float64(xs[i])
			}
			slices.Sort(xs)
			near(t, "sample mean", sum/float64(len(xs)), tt.mean, 0.01)
			near(t, "sample p99", float64(xs[len(xs)*99/100]), tt.p99, 0.03)
		})
	}
}

func TestGammaVariate(t *testing.T) {
	for _, shape := range []float64{0.04, 0.3, 1, 2.5, 50} {
		t.Run("shape "+formatFloat(shape), func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, 4))
			const n = 200000
			var sum, sq float64
			for range n {
				x := gammaVariate(r, shape)
				if !(x >= 0) {
					t.Fatalf("draw %g, want >= 0", x)
				}
				sum += x
				sq += x * x
			}
			mean := sum / n
			near(t, "mean", mean, shape, 0.03)
			near(t, "variance", sq/n-mean*mean, shape, 0.06)
		})
	}
}

func TestGeometric(t *testing.T) {
	for _, mean := range []float64{1, 1.5, 4, 20} {
		t.Run("mean "+formatFloat(mean), func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, 6))
			const n = 100000
			sum := 0
			for range n {
				k := geometric(r, mean)
				if k < 1 {
					t.Fatalf("draw %d, want >= 1", k)
				}
				sum += k
			}
			near(t, "mean", float64(sum)/n, mean, 0.02)
		})
	}
}

func formatFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
