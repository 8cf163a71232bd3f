package controller

import (
	"math"
	"time"

	"github.com/ilbproject/ilb/weights"
)

// Smoother is an exponentially weighted moving average of demand per
// stream, with a half-life in time (not in ticks), so irregular ticks
// weigh observations by the time they cover. Not safe for concurrent use.
type Smoother struct {
	halfLife time.Duration
	at       time.Time
	avg      weights.Demand
}

// NewSmoother returns a smoother with the given half-life (> 0).
func NewSmoother(halfLife time.Duration) *Smoother { return &Smoother{halfLife: halfLife} }

// Observe folds in the demand measured at time at and returns the
// smoothed demand. The first observation of a stream is taken as is (a
// source that starts sending, or every stream at a cold start, is planned
// for at its measured rate at once, not ramped up from zero over the
// half-life); a stream absent from an observation counts as zero then,
// and decays.
func (s *Smoother) Observe(d weights.Demand, at time.Time) weights.Demand {
	if s.avg == nil {
		s.avg = make(weights.Demand, len(d))
		for k, r := range d {
			s.avg[k] = r
		}
		s.at = at
		return s.Current()
	}
	dt := at.Sub(s.at)
	if dt < 0 {
		dt = 0
	}
	a := 1 - math.Exp2(-dt.Seconds()/s.halfLife.Seconds()) // weight of the new observation
	next := make(weights.Demand, len(s.avg)+len(d))
	for k, r := range s.avg {
		next[k] = weights.Rate{RequestsPerSecond: (1 - a) * r.RequestsPerSecond, CostPerSecond: (1 - a) * r.CostPerSecond}
	}
	for k, r := range d {
		o, known := next[k]
		if !known {
			next[k] = r
			continue
		}
		next[k] = weights.Rate{RequestsPerSecond: o.RequestsPerSecond + a*r.RequestsPerSecond, CostPerSecond: o.CostPerSecond + a*r.CostPerSecond}
	}
	for k, r := range next { // forget streams that decayed to nothing
		if r.CostPerSecond < 1e-9 && r.RequestsPerSecond < 1e-9 {
			delete(next, k)
		}
	}
	s.avg, s.at = next, at
	return s.Current()
}

// Current returns a copy of the smoothed demand.
func (s *Smoother) Current() weights.Demand {
	out := make(weights.Demand, len(s.avg))
	for k, r := range s.avg {
		out[k] = r
	}
	return out
}
