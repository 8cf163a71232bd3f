package weights

import (
	"fmt"
	"math"
	"slices"

	"github.com/ilbproject/ilb/config"
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

// boundUtilizationStep scales back the moves of unforced cells by one
// factor so that no cluster's planned load moves by more than step of its
// capacity; moves forced by lost capacity are not scaled.
func (s *solution) boundUtilizationStep(step float64) {
	free := make([]float64, len(s.capacity))   // load change of unforced cells
	forced := make([]float64, len(s.capacity)) // of forced cells
	for _, p := range s.plans {
		if p.prev == nil {
			continue
		}
		dst := free
		if p.forced {
			dst = forced
		}
		for j, i := range p.idx {
			dst[i] += p.served * (p.final[j] - p.prev[j])
		}
	}
	beta := 1.0
	for i, c := range s.capacity {
		if c <= 0 || math.Abs(free[i]+forced[i]) <= step*c {
			continue
		}
		room := math.Max(0, step*c-math.Abs(forced[i]))
		if math.Abs(free[i]) > 0 {
			beta = math.Min(beta, room/math.Abs(free[i]))
		}
	}
	if beta >= 1 {
		return
	}
	for _, p := range s.plans {
		if p.prev == nil || p.forced {
			continue
		}
		for i := range p.final {
			p.final[i] = p.prev[i] + beta*(p.final[i]-p.prev[i])
		}
		p.alpha *= beta
	}
}

// cells quantizes the final shares, applies the deadband and explains.
func (s *solution) cells() []Cell {
	c := s.in.Config
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
			return Explanation{Policy: "optimizer", Summary: p.summary(), Terms: s.terms(p, w)}
		})
		out = append(out, cell)
	}
	return out
}

// withinDeadband reports whether quantized weights w and the plan's shed
// fractions moved less than deadband from the previous version.
func (s *solution) withinDeadband(p *cellPlan, w []uint32, deadband float64) bool {
	prev, _ := s.in.Previous.Cell(p.source.Name, p.cell.model.Name)
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

// terms explains every cluster that serves the cell's model.
func (s *solution) terms(p *cellPlan, w []uint32) []Term {
	c := s.in.Config
	ct := c.Controller
	out := make([]Term, 0, len(p.idx))
	from := s.ix.region[p.source.Region]
	for j, i := range p.idx {
		e := c.Clusters[i]
		link := s.ix.links[from][s.ix.clusterRegion[i]]
		t := Term{
			Cluster: e.Name, Region: e.Region, Capacity: s.capacity[i], Share: p.final[j], Weight: w[j],
			LatencyMs: link.RTTMs, EgressCost: link.EgressUSDPerGB * ct.EgressMsPerUSDPerGB,
		}
		switch {
		case !p.source.Allows(e.Region):
			t.Excluded = fmt.Sprintf("residency: region %s is not in the allowed regions of source %s", e.Region, p.source.Name)
		case s.capacity[i] <= 0:
			t.Excluded = "no capacity: no ready replica"
		case !p.eligible[j]:
			t.Excluded = fmt.Sprintf("TTFT budget: %.0f ms round trip is over the model's %.0f ms", link.RTTMs, p.cell.model.TTFTBudgetMs)
		}
		if t.Excluded == "" {
			u := s.load[i] / s.capacity[i]
			t.Flow, t.Utilization = p.served*p.final[j], u
			t.MarginalCost = t.LatencyMs + t.EgressCost + s.movementSlope(p, e.Region) + bandCost(s.ix.curve, u)
			t.Binding = s.binding(p, u, w[j])
		}
		out = append(out, t)
	}
	return out
}

// movementSlope is the movement cost of one more unit into region r: 2μ
// once the cell has at least its previous amount there.
func (s *solution) movementSlope(p *cellPlan, r string) float64 {
	if p.pastX0[r] {
		return 2 * s.in.Config.Controller.MovementCost
	}
	return 0
}

func (s *solution) binding(p *cellPlan, u float64, w uint32) string {
	target := s.in.Config.Controller.TargetUtilization
	switch {
	case p.forced:
		return "capacity lost: moved at once"
	case p.deadband:
		return "deadband"
	case p.alpha < 1:
		return "step bound"
	case u > 1+1e-6:
		return "over capacity: demand that may not be shed"
	case u >= 1-1e-6:
		return "at capacity"
	case u >= target-1e-6:
		return "above target utilization"
	case w == 0:
		return "dearer than the clusters chosen"
	}
	return ""
}

// bandCost is the marginal cost of load at utilization u on the curve.
func bandCost(curve []config.CostBand, u float64) float64 {
	for _, b := range curve {
		if u < b.UpTo-1e-12 {
			return b.Cost
		}
	}
	return overflowCost
}
