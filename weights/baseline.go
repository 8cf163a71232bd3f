package weights

import (
	"fmt"

	"github.com/ilbproject/ilb/config"
)

// baselineRow is one cell of a baseline policy: its demand (token-cost/s)
// and its exact shares over every cluster (config order).
type baselineRow struct {
	source  config.Source
	model   string
	demand  float64
	shares  []float64
	summary string
}

// finishBaseline quantizes baseline shares into cells whose lazy
// explanations have the optimizer's shape: every cluster serving the
// model, its cost terms at the load every cell's shares put on it, and
// the constraint that shows (the baselines never shed, so a cluster may
// run over capacity).
func finishBaseline(in Input, policy string, rows []baselineRow) []Cell {
	c := in.Config
	ix := newIndex(c)
	capacity := make([]float64, len(c.Clusters))
	load := make([]float64, len(c.Clusters))
	curves := make([][]config.CostBand, len(c.Clusters))
	for i, e := range c.Clusters {
		capacity[i] = in.Clusters[e.Name].Capacity
		curves[i] = ix.clusterCurve(in.Clusters[e.Name])
	}
	for _, r := range rows {
		for i, sh := range r.shares {
			load[i] += r.demand * sh
		}
	}
	cells := make([]Cell, 0, len(rows))
	for _, r := range rows {
		w := Quantize(r.shares, Total)
		cell := Cell{Source: r.source.Name, Model: r.model, Demand: r.demand, Served: r.demand}
		for i, e := range c.Clusters {
			if w[i] > 0 {
				cell.Targets = append(cell.Targets, Target{Cluster: e.Name, Weight: w[i]})
			}
		}
		summary := r.summary
		if len(cell.Targets) == 0 {
			summary = "no eligible cluster has capacity: requests get 503"
		}
		// The closure holds the configuration, not in: in.Previous holds
		// the previous version, whose explanations hold the one before.
		explainLazily(&cell, in.Previous, func() Explanation {
			return Explanation{Policy: policy, Summary: summary, Terms: baselineTerms(ix, c, r, w, capacity, load, curves)}
		})
		cells = append(cells, cell)
	}
	return cells
}

func baselineTerms(ix *index, c *config.Config, r baselineRow, w []uint32, capacity, load []float64, curves [][]config.CostBand) []Term {
	ct := c.Controller
	from := ix.region[r.source.Region]
	var terms []Term
	for _, i := range ix.byModel[r.model] {
		e := c.Clusters[i]
		link := ix.links[from][ix.clusterRegion[i]]
		t := Term{
			Cluster: e.Name, Region: e.Region, Capacity: capacity[i], Share: r.shares[i], Weight: w[i],
			LatencyMs: link.RTTMs, EgressCost: link.EgressUSDPerGB * ct.EgressMsPerUSDPerGB,
		}
		switch {
		case !r.source.Allows(e.Region):
			t.Excluded = fmt.Sprintf("residency: region %s is not in the allowed regions of source %s", e.Region, r.source.Name)
		case capacity[i] <= 0:
			t.Excluded = "no capacity: no ready replica"
		default:
			u := load[i] / capacity[i]
			t.Flow, t.Utilization = r.demand*r.shares[i], u
			t.MarginalCost = t.LatencyMs + t.EgressCost + bandCost(curves[i], u)
			switch {
			case u > 1+1e-6:
				t.Binding = "over capacity (the baseline never sheds)"
			case u >= ct.TargetUtilization-1e-6:
				t.Binding = "above target utilization"
			}
		}
		terms = append(terms, t)
	}
	return terms
}
