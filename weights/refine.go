package weights

import (
	"math"
	"slices"
)

// refine applies the stability rules to the optimal shares: the weight
// step bound per cell, then the utilization step bound per cluster. Cells
// that lost a cluster move at once.
func (s *solution) refine() {
	ct := s.in.Config.Controller
	for _, p := range s.plans {
		p.final = slices.Clone(p.opt) // members of a class share opt
		if p.prev == nil {
			continue
		}
		for i, w := range p.prev {
			if w > 0 && !p.eligible[i] {
				p.forced = true
			}
		}
		if p.forced {
			continue
		}
		var d float64
		for i := range p.opt {
			d = math.Max(d, math.Abs(p.opt[i]-p.prev[i]))
		}
		if d > ct.MaxWeightStep {
			p.alpha = ct.MaxWeightStep / d
			for i := range p.final {
				p.final[i] = p.prev[i] + p.alpha*(p.opt[i]-p.prev[i])
			}
		}
	}
	if s.in.Previous != nil {
		s.boundUtilizationStep(ct.MaxUtilizationStep)
	}
	s.load = make([]float64, len(s.capacity))
	for _, p := range s.plans {
		for j, w := range p.final {
			s.load[p.idx[j]] += p.served * w
		}
	}
}

// utilizationRounds is how many times boundUtilizationStep recomputes
// net load changes before its last, conservative pass.
const utilizationRounds = 4

// boundUtilizationStep scales back moves so that no cluster's planned
// load grows by more than step of its capacity in one tick: it guards the
// clusters load moves to (herding), never the ones it leaves, so load
// always comes off an overloaded cluster as fast as the clusters taking
// it allow. Only the cells that move load onto a bound cluster are scaled
// back; forced moves (lost capacity) are not scaled.
func (s *solution) boundUtilizationStep(step float64) {
	var moving []*cellPlan
	for _, p := range s.plans {
		if p.prev != nil && !p.forced {
			moving = append(moving, p)
		}
	}
	forced := make([]float64, len(s.capacity))
	for _, p := range s.plans {
		if p.prev != nil && p.forced {
			for j, i := range p.idx {
				forced[i] += p.served * (p.final[j] - p.prev[j])
			}
		}
	}
	// factor[k] scales moving[k]'s move. Scaling a cell back also shrinks
	// the load it takes off other clusters, which may push one of those
	// over its bound: a few rounds on net changes settle it, then a last
	// pass ignores what scaled cells take off, which is always safe.
	factor := make([]float64, len(moving))
	for k := range factor {
		factor[k] = 1
	}
	for round := range utilizationRounds + 1 {
		inc := make([]float64, len(s.capacity)) // load moved onto a cluster
		dec := make([]float64, len(s.capacity)) // load moved off it, <= 0
		for k, p := range moving {
			for j, i := range p.idx {
				if d := factor[k] * p.served * (p.final[j] - p.prev[j]); d > 0 {
					inc[i] += d
				} else {
					dec[i] += d
				}
			}
		}
		last := round == utilizationRounds
		scale := make([]float64, len(s.capacity))
		bound := make([]bool, len(s.capacity))
		anyBound := false
		for i, c := range s.capacity {
			if c <= 0 || inc[i] <= 0 {
				continue
			}
			rest := forced[i]
			if !last {
				rest += dec[i]
			}
			if inc[i]+rest <= step*c*(1+1e-9) {
				continue
			}
			scale[i], bound[i], anyBound = max(0, step*c-rest)/inc[i], true, true
		}
		if !anyBound {
			break
		}
		for k, p := range moving {
			f := 1.0
			for j, i := range p.idx {
				if bound[i] && p.final[j] > p.prev[j] {
					f = min(f, scale[i])
				}
			}
			factor[k] *= f
		}
	}
	for k, p := range moving {
		if factor[k] >= 1 {
			continue
		}
		for j := range p.final {
			p.final[j] = p.prev[j] + factor[k]*(p.final[j]-p.prev[j])
		}
		p.alpha *= factor[k]
	}
}

// cells quantizes the final shares, applies the deadband and attaches
// lazy explanations that hold only this version's explainer and plans
// (never the flow network or the previous version).
func (s *solution) cells() []Cell {
	c := s.in.Config
	ex := &explainer{c: c, ix: s.ix, capacity: s.capacity, load: s.load}
	out := make([]Cell, 0, len(s.plans))
	for _, p := range s.plans {
		w := Quantize(p.final, Total)
		cell := Cell{Source: p.source.Name, Model: p.cell.model.Name, Shed: p.shed, Demand: p.demand, Served: p.served}
		if p.prev != nil && !p.forced && s.withinDeadband(p, w, c.Controller.Deadband) {
			p.deadband = true
			prev, _ := s.in.Previous.Cell(cell.Source, cell.Model)
			cell.Shed = prev.Shed
			for j, v := range p.prev {
				w[j] = uint32(v*Total + 0.5)
			}
		}
		for j, i := range p.idx {
			if w[j] > 0 {
				cell.Targets = append(cell.Targets, Target{Cluster: c.Clusters[i].Name, Weight: w[j]})
			}
		}
		explainLazily(&cell, s.in.Previous, func() Explanation {
			return Explanation{Policy: "optimizer", Summary: p.summary(), Terms: ex.terms(p, w)}
		})
		out = append(out, cell)
	}
	return out
}

// withinDeadband reports whether a cell's new routing moved less than
// deadband from the previous version: its quantized weights w and shed
// fractions. A step-bounded cell is judged by its optimum instead: its
// bounded step may be small, but the deadband must not freeze a cell
// whose optimum is far away.
func (s *solution) withinDeadband(p *cellPlan, w []uint32, deadband float64) bool {
	prev, _ := s.in.Previous.Cell(p.source.Name, p.cell.model.Name)
	if p.alpha < 1 {
		w = Quantize(p.opt, Total)
	}
	for j := range w {
		if math.Abs(float64(w[j])/Total-p.prev[j]) >= deadband {
			return false
		}
	}
	for _, pr := range Priorities {
		if math.Abs(p.shed[pr]-prev.Shed[pr]) >= deadband {
			return false
		}
	}
	return true
}
