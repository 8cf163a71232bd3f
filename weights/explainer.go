package weights

import (
	"fmt"
	"math"

	"github.com/ilbproject/ilb/config"
)

// explainer is what the optimizer's explanations of one version need
// besides each cell's plan: the configuration, the lookup tables, and the
// capacity and planned load of every cluster. Lazy explanations hold it
// (shared by the version's cells) instead of the solution, which holds
// the flow network and the previous version, whose explanations hold the
// version before: every version would keep all earlier ones alive.
type explainer struct {
	c        *config.Config
	ix       *index
	capacity []float64
	load     []float64
	// curves is each cluster's cost curve (index.clusterCurve).
	curves [][]config.CostBand
}

// terms explains every cluster that serves the cell's model.
func (x *explainer) terms(p *cellPlan, w []uint32) []Term {
	c := x.c
	ct := c.Controller
	out := make([]Term, 0, len(p.idx))
	from := x.ix.region[p.source.Region]
	for j, i := range p.idx {
		e := c.Clusters[i]
		link := x.ix.links[from][x.ix.clusterRegion[i]]
		t := Term{
			Cluster: e.Name, Region: e.Region, Capacity: x.capacity[i], Share: p.final[j], Weight: w[j],
			LatencyMs: link.RTTMs, EgressCost: link.EgressUSDPerGB * ct.EgressMsPerUSDPerGB,
		}
		switch {
		case !p.source.Allows(e.Region):
			t.Excluded = fmt.Sprintf("residency: region %s is not in the allowed regions of source %s", e.Region, p.source.Name)
		case x.capacity[i] <= 0:
			t.Excluded = "no capacity: no ready replica"
		case !p.eligible[j]:
			t.Excluded = fmt.Sprintf("TTFT budget: %.0f ms round trip is over the model's %.0f ms", link.RTTMs, p.cell.model.TTFTBudgetMs)
		}
		if t.Excluded == "" {
			u := x.load[i] / x.capacity[i]
			t.Flow, t.Utilization = p.served*p.final[j], u
			t.MarginalCost = t.LatencyMs + t.EgressCost + x.movementSlope(p, e.Region) + bandCost(x.curves[i], u)
			t.Binding = x.binding(p, u, curveEnd(x.curves[i]), w[j])
		}
		out = append(out, t)
	}
	// A cluster without weight whose marginal cost is no higher than that
	// of every chosen one lost a tie (or its share rounded to 0), not on
	// cost: say so rather than call it dearer.
	least := math.Inf(1)
	for _, t := range out {
		if t.Excluded == "" && t.Weight > 0 {
			least = min(least, t.MarginalCost)
		}
	}
	for i := range out {
		if t := &out[i]; t.Excluded == "" && t.Weight == 0 && t.Binding == bindingDearer && t.MarginalCost <= least+1e-9 {
			t.Binding = fmt.Sprintf("tied: the same marginal cost (%.3g) as the cheapest cluster chosen", t.MarginalCost)
		}
	}
	return out
}

const bindingDearer = "dearer than the clusters chosen"

// movementSlope is the movement cost of one more unit into region r: 2μ
// once the cell has at least its previous amount there.
func (x *explainer) movementSlope(p *cellPlan, r string) float64 {
	if p.pastX0[r] {
		return 2 * x.c.Controller.MovementCost
	}
	return 0
}

// binding names the constraint that shows at utilization u on a cluster
// whose curve ends at end (its saturation throughput over its capacity,
// or 1).
func (x *explainer) binding(p *cellPlan, u, end float64, w uint32) string {
	target := x.c.Controller.TargetUtilization
	switch {
	case p.forced:
		return "capacity lost: moved at once"
	case p.deadband:
		return "deadband"
	case p.alpha < 1:
		return "step bound"
	case u > end+1e-6:
		return "over capacity: demand that may not be shed"
	case u >= end-1e-6:
		return "at capacity"
	case u > 1+1e-6:
		return "over the capacity within the TTFT target, below saturation"
	case u >= target-1e-6:
		return "above target utilization"
	case w == 0:
		return bindingDearer
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
