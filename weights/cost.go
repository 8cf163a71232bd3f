package weights

import "math"

// Cost is the optimizer's objective for a set of weights and an input,
// by term, in ms-equivalent per second (token-cost units per second × cost
// per unit). It prices the weights of any policy the same way, so policies
// can be compared; movement is charged as the optimizer charges it, 2×
// movement cost per unit a region receives above its previous amount.
type Cost struct {
	Latency     float64 `json:"latency"`
	Egress      float64 `json:"egress"`
	Utilization float64 `json:"utilization"`
	Overflow    float64 `json:"overflow"` // load above 100% of a cluster, priced
	// OverflowLoad is that load, in token-cost units per second.
	OverflowLoad float64 `json:"overflow_load"`
	Movement     float64 `json:"movement"`
	Shed         float64 `json:"shed"`
	Total        float64 `json:"total"`
}

// Evaluate prices w for in (demand floored as the optimizer plans it).
func Evaluate(in Input, w *Weights) Cost {
	c := in.Config
	ct := c.Controller
	ix := newIndex(c)
	demand := floorDemand(c, in.Demand)
	shedCost := [numPriorities]float64{ct.Shedding.CriticalCost, ct.Shedding.StandardCost, ct.Shedding.SheddableCost}
	var cost Cost
	load := make([]float64, len(c.Clusters))
	prevShare := make([]float64, len(c.Regions))
	for _, cell := range w.cells {
		s, ok := c.Source(cell.Source)
		if !ok {
			continue
		}
		var served float64
		for _, p := range Priorities {
			d := demand[DemandKey{cell.Source, cell.Model, p}].CostPerSecond
			shed := cell.Shed[p]
			if len(cell.Targets) == 0 {
				shed = 1 // nowhere to go: every request is refused
			}
			served += d * (1 - shed)
			cost.Shed += d * shed * shedCost[p]
		}
		from := ix.region[s.Region]
		perRegion := make([]float64, len(c.Regions))
		for _, t := range cell.Targets {
			i, ok := ix.cluster[t.Cluster]
			if !ok {
				continue
			}
			x := served * float64(t.Weight) / Total
			r := ix.clusterRegion[i]
			link := ix.links[from][r]
			cost.Latency += x * link.RTTMs
			cost.Egress += x * link.EgressUSDPerGB * ct.EgressMsPerUSDPerGB
			load[i] += x
			perRegion[r] += x
		}
		var pc *Cell
		if in.Previous != nil {
			if prev, ok := in.Previous.Cell(cell.Source, cell.Model); ok {
				pc = &prev
			}
		}
		previousRegionShares(ix, pc, prevShare)
		if in.Previous != nil {
			var d float64
			for _, p := range Priorities {
				d += demand[DemandKey{cell.Source, cell.Model, p}].CostPerSecond
			}
			for r, x := range perRegion {
				cost.Movement += 2 * ct.MovementCost * math.Max(0, x-prevShare[r]*d)
			}
		}
	}
	for i, e := range c.Clusters {
		full := in.Clusters[e.Name].Capacity
		if full <= 0 {
			cost.OverflowLoad += load[i]
			continue
		}
		curve := ix.clusterCurve(in.Clusters[e.Name])
		from := 0.0
		for _, b := range curve {
			if in := math.Min(load[i], b.UpTo*full) - from*full; in > 0 {
				cost.Utilization += in * b.Cost
			}
			from = b.UpTo
		}
		cost.OverflowLoad += math.Max(0, load[i]-curveEnd(curve)*full)
	}
	cost.Overflow = cost.OverflowLoad * overflowCost
	cost.Total = cost.Latency + cost.Egress + cost.Utilization + cost.Overflow + cost.Movement + cost.Shed
	return cost
}
