package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// z99 is the 99th percentile of the standard normal distribution.
const z99 = 2.3263478740408408

// MaxLognormalRatio is the largest p99/mean ratio accepted: a lognormal
// distribution can have at most exp(z²/2) ≈ 14.968, z being the normal
// 99th percentile.
const MaxLognormalRatio = 14.96

// lognormal is exp(N(mu, sigma²)), drawn as a length in tokens.
type lognormal struct{ mu, sigma float64 }

// lognormalFromMeanP99 solves mu and sigma from the mean and the 99th
// percentile: with r = ln(p99/mean), p99 = exp(mu + z·sigma) and
// mean = exp(mu + sigma²/2) give sigma²/2 - z·sigma + r = 0, whose smaller
// root sigma = z - sqrt(z² - 2r) is taken (the larger one would put most of
// the mass near zero with a far tail). It needs 1 <= p99/mean <=
// MaxLognormalRatio.
func lognormalFromMeanP99(mean, p99 float64) (lognormal, error) {
	if !(mean > 0) || !(p99 >= mean) || math.IsInf(p99, 0) {
		return lognormal{}, fmt.Errorf("want 0 < mean <= p99, got mean %g, p99 %g", mean, p99)
	}
	r := math.Log(p99 / mean)
	d := z99*z99 - 2*r
	if d < 0 {
		return lognormal{}, fmt.Errorf("p99/mean = %.4g is more than a lognormal allows (%g)", p99/mean, MaxLognormalRatio)
	}
	sigma := z99 - math.Sqrt(d)
	return lognormal{mu: math.Log(mean) - sigma*sigma/2, sigma: sigma}, nil
}

// draw returns a length rounded and clamped to [1, MaxTokens].
func (l lognormal) draw(r *rand.Rand) int {
	return clampTokens(math.Exp(l.mu + l.sigma*r.NormFloat64()))
}

func clampTokens(x float64) int {
	switch {
	case !(x >= 1): // also NaN
		return 1
	case x >= MaxTokens:
		return MaxTokens
	}
	return int(math.Round(x))
}

// gammaVariate draws from Gamma(shape, 1), shape > 0, by Marsaglia and
// Tsang's method ("A simple method for generating gamma variables", 2000),
// boosting shapes below 1 with U^(1/shape).
func gammaVariate(r *rand.Rand, shape float64) float64 {
	if shape == 1 {
		return r.ExpFloat64()
	}
	boost := 1.0
	if shape < 1 {
		boost = math.Pow(1-r.Float64(), 1/shape) // 1-U is in (0, 1]
		shape++
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := 1 - r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < x*x/2+d*(1-v+math.Log(v)) {
			return d * v * boost
		}
	}
}

// geometric draws a number of turns >= 1 with the given mean >= 1:
// P(n) = (1-p)^(n-1) p with p = 1/mean.
func geometric(r *rand.Rand, mean float64) int {
	if mean <= 1 {
		return 1
	}
	p := 1 / mean
	u := 1 - r.Float64() // (0, 1]
	n := 1 + math.Floor(math.Log(u)/math.Log1p(-p))
	return int(min(n, 1<<20))
}
