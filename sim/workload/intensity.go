package workload

import (
	"math"
	"slices"
	"time"
)

// intensity is the arrival rate of one source and its integral, with times
// in seconds since the start of the workload and rates in requests per
// second:
//
//	λ(t) = f(t) · m (1 + a cos(2π (t/p + φ)))
//
// where f is the product of the burst factors active at t, and φ, in
// cycles, puts the peak at PeakLocalHour local time. Without bursts the
// integral is closed-form:
//
//	S(t) = m (t + a p/2π (sin(2π(t/p + φ)) - sin(2πφ)))
//
// and with them Λ is piecewise f·S on the segments where f is constant.
type intensity struct {
	m, a, p, phase float64
	segs           []segment
	end            float64 // the workload's duration
}

// segment is an interval [start, end) of constant burst factor.
type segment struct {
	start, end float64
	factor     float64
	cum        float64 // Λ(start)
	base       float64 // S(start)
}

func newIntensity(src SourceSpec, period, duration time.Duration) *intensity {
	in := &intensity{
		m:     src.MeanRate,
		a:     src.DiurnalAmplitude,
		p:     period.Seconds(),
		phase: (src.UTCOffsetHours - PeakLocalHour) / 24,
		end:   duration.Seconds(),
	}
	cuts := []float64{0, in.end}
	for _, b := range src.Bursts {
		for _, c := range []float64{b.At.Seconds(), (b.At + b.Duration).Seconds()} {
			if c > 0 && c < in.end {
				cuts = append(cuts, c)
			}
		}
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	cum := 0.0
	for i := range len(cuts) - 1 {
		s := segment{start: cuts[i], end: cuts[i+1], factor: 1, cum: cum, base: in.base(cuts[i])}
		mid := (s.start + s.end) / 2
		for _, b := range src.Bursts {
			if mid >= b.At.Seconds() && mid < (b.At+b.Duration).Seconds() {
				s.factor *= b.Factor
			}
		}
		cum += s.factor * (in.base(s.end) - s.base)
		in.segs = append(in.segs, s)
	}
	return in
}

// base is S(t), the integral of the rate without bursts from 0 to t.
func (in *intensity) base(t float64) float64 {
	if in.a == 0 {
		return in.m * t
	}
	k := in.a * in.p / (2 * math.Pi)
	return in.m * (t + k*(math.Sin(2*math.Pi*(t/in.p+in.phase))-math.Sin(2*math.Pi*in.phase)))
}

// baseRate is the rate without bursts at t, dS/dt.
func (in *intensity) baseRate(t float64) float64 {
	return in.m * (1 + in.a*math.Cos(2*math.Pi*(t/in.p+in.phase)))
}

// rate is λ(t), bursts included; for tests and reports.
func (in *intensity) rate(t float64) float64 {
	for _, s := range in.segs {
		if t >= s.start && t < s.end {
			return s.factor * in.baseRate(t)
		}
	}
	return 0
}

// total is Λ(end), the expected number of arrivals.
func (in *intensity) total() float64 {
	s := in.segs[len(in.segs)-1]
	return s.cum + s.factor*(in.base(s.end)-s.base)
}

// inverse returns t with Λ(t) = u, for 0 <= u < total(). Successive calls
// must have non-decreasing u: *seg is the segment searched from (start at
// 0) and guess a time close to the answer (the previous one).
func (in *intensity) inverse(u float64, seg *int, guess float64) float64 {
	for *seg+1 < len(in.segs) && u >= in.segs[*seg+1].cum {
		*seg++
	}
	s := in.segs[*seg]
	target := s.base + (u-s.cum)/s.factor // S(t) = target, t in [start, end]
	if in.a == 0 {
		return target / in.m
	}
	// Newton's method on S, safeguarded by bisection on [lo, hi] (S is
	// non-decreasing); from the previous arrival it takes two or three
	// steps, the rate changing little between arrivals.
	lo, hi := s.start, s.end
	t := min(max(guess, lo), hi)
	for range 100 {
		g := in.base(t) - target
		if g == 0 {
			return t
		}
		if g > 0 {
			hi = t
		} else {
			lo = t
		}
		next := (lo + hi) / 2
		if d := in.baseRate(t); d > 0 {
			if n := t - g/d; n > lo && n < hi {
				next = n
			}
		}
		if math.Abs(next-t) < 1e-10*max(1, t) || hi-lo < 1e-10*max(1, hi) {
			return next
		}
		t = next
	}
	return t
}
