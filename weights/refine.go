package weights

import (
	"math"
	"slices"

	"github.com/ilbproject/ilb/config"
)

// refine applies the stability rules to the optimal shares: the weight
// step bound per cell, then the utilization step bound per cluster. Cells
// that lost a cluster move at once. The cells of a group share every
// step (planGroup), so each step runs once per group; the sums over cells
// run cell by cell, in plan order.
func (s *solution) refine() {
	ct := s.in.Config.Controller
	for _, g := range s.groups {
		g.final = slices.Clone(g.opt)
		if g.prev == nil {
			continue
		}
		for i, w := range g.prev {
			if w > 0 && !g.eligible[i] {
				g.forced = true
			}
		}
		if g.forced {
			continue
		}
		var d float64
		for i := range g.opt {
			d = math.Max(d, math.Abs(g.opt[i]-g.prev[i]))
		}
		if d > ct.MaxWeightStep {
			g.alpha = ct.MaxWeightStep / d
			for i := range g.final {
				g.final[i] = g.prev[i] + g.alpha*(g.opt[i]-g.prev[i])
			}
		}
	}
	if s.in.Previous != nil {
		s.boundUtilizationStep(ct.MaxUtilizationStep)
	}
	s.load = make([]float64, len(s.capacity))
	for k := range s.plans {
		p := &s.plans[k]
		for j, w := range p.final {
			if w != 0 { // served × 0 adds nothing
				s.load[p.idx[j]] += p.served * w
			}
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
// back; forced moves (lost capacity) are not scaled. A group's cells
// have the same shares, so they are scaled by the same factor.
func (s *solution) boundUtilizationStep(step float64) {
	var moving []*planGroup
	for _, g := range s.groups {
		if g.prev != nil && !g.forced {
			g.moving = len(moving)
			moving = append(moving, g)
		}
	}
	forced := make([]float64, len(s.capacity))
	for k := range s.plans {
		if p := &s.plans[k]; p.prev != nil && p.forced {
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
	inc := make([]float64, len(s.capacity)) // load moved onto a cluster
	dec := make([]float64, len(s.capacity)) // load moved off it, <= 0
	scale := make([]float64, len(s.capacity))
	bound := make([]bool, len(s.capacity))
	for round := range utilizationRounds + 1 {
		clear(inc)
		clear(dec)
		for k := range s.plans {
			p := &s.plans[k]
			if p.moving < 0 {
				continue
			}
			for j, i := range p.idx {
				if d := factor[p.moving] * p.served * (p.final[j] - p.prev[j]); d > 0 {
					inc[i] += d
				} else {
					dec[i] += d
				}
			}
		}
		last := round == utilizationRounds
		clear(scale)
		clear(bound)
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
		for k, g := range moving {
			f := 1.0
			for j, i := range g.idx {
				if bound[i] && g.final[j] > g.prev[j] {
					f = min(f, scale[i])
				}
			}
			factor[k] *= f
		}
	}
	for k, g := range moving {
		if factor[k] >= 1 {
			continue
		}
		for j := range g.final {
			g.final[j] = g.prev[j] + factor[k]*(g.final[j]-g.prev[j])
		}
		g.alpha *= factor[k]
	}
}

// cells quantizes the final shares, applies the deadband and attaches
// lazy explanations that hold only this version's explainer and plans
// (never the flow network or the previous version). The cells come in
// the order of their names, source then model (New's order); cells of
// one group share their targets slices (capped: an append copies).
func (s *solution) cells() []Cell {
	c := s.in.Config
	ix := s.ix
	nm := len(c.Models)
	rank := make([]int, len(c.Sources)+nm) // position in name order: sources, then models
	for r, i := range ix.sourcesByName {
		rank[i] = r
	}
	for r, i := range ix.modelsByName {
		rank[len(c.Sources)+i] = r
	}
	ex := &explainer{c: c, ix: ix, capacity: s.capacity, load: s.load, curves: make([][]config.CostBand, len(c.Clusters))}
	for i, e := range c.Clusters {
		ex.curves[i] = ix.clusterCurve(s.in.Clusters[e.Name])
	}
	out := make([]Cell, len(s.plans))
	prevs := make([]prevCell, len(s.plans))
	for k := range s.plans {
		p := &s.plans[k]
		g := p.planGroup
		w, targets := g.quantized(c)
		cell := Cell{Source: p.source.Name, Model: g.cell.model.Name, Shed: g.shed, Demand: p.demand, Served: p.served}
		pc := s.ws.previous(ix, s.in.Previous, p.si, p.mi)
		if g.prev != nil && !g.forced && s.withinDeadband(p, pc, c.Controller.Deadband) {
			p.deadband = true
			cell.Shed = pc.Shed
			w, targets = g.keptWeights(c)
		}
		cell.Targets = targets
		var before *prevCell
		if pc != nil {
			prevs[k] = prevCell{targets: pc.Targets, shed: pc.Shed}
			before = &prevs[k]
		}
		shed := cell.Shed
		cell.explain = func() Explanation {
			e := Explanation{Policy: "optimizer", Summary: p.summary(), Terms: ex.terms(p, w)}
			withChanges(&e, targets, shed, before)
			return e
		}
		out[rank[p.si]*nm+rank[len(c.Sources)+p.mi]] = cell
	}
	return out
}

// quantized is the group's final shares as integer weights summing to
// Total (Quantize) and its targets, computed once.
func (g *planGroup) quantized(c *config.Config) ([]uint32, []Target) {
	if g.weights == nil {
		g.weights = Quantize(g.final, Total)
		g.targets = targetsOf(c, g.idx, g.weights)
	}
	return g.weights, g.targets
}

// keptWeights is the group's previous shares as integer weights (what
// the deadband keeps) and their targets, computed once.
func (g *planGroup) keptWeights(c *config.Config) ([]uint32, []Target) {
	if g.kept == nil {
		g.kept = make([]uint32, len(g.prev))
		for j, v := range g.prev {
			g.kept[j] = uint32(v*Total + 0.5)
		}
		g.keptTarget = targetsOf(c, g.idx, g.kept)
	}
	return g.kept, g.keptTarget
}

// targetsOf lists the clusters idx with a positive weight w, in
// configuration order; nil when none.
func targetsOf(c *config.Config, idx []int, w []uint32) []Target {
	var out []Target
	for j, i := range idx {
		if w[j] > 0 {
			out = append(out, Target{Cluster: c.Clusters[i].Name, Weight: w[j]})
		}
	}
	return slices.Clip(out)
}

// withinDeadband reports whether a cell's new routing moved less than
// deadband from its previous cell pc: its quantized weights and shed
// fractions. A step-bounded cell is judged by its optimum instead: its
// bounded step may be small, but the deadband must not freeze a cell
// whose optimum is far away. The weights part is its group's, judged
// once.
func (s *solution) withinDeadband(p *cellPlan, pc *Cell, deadband float64) bool {
	g := p.planGroup
	if g.within == 0 {
		w, _ := g.quantized(s.in.Config)
		if g.alpha < 1 {
			w = Quantize(g.opt, Total)
		}
		g.within = 1
		for j := range w {
			if math.Abs(float64(w[j])/Total-g.prev[j]) >= deadband {
				g.within = 2
				break
			}
		}
	}
	if g.within == 2 {
		return false
	}
	for _, pr := range Priorities {
		if math.Abs(p.shed[pr]-pc.Shed[pr]) >= deadband {
			return false
		}
	}
	return true
}
