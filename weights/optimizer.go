package weights

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/ilbproject/ilb/config"
)

// Optimizer is ILB's policy: each tick a capacity-constrained min-cost
// flow (package flow) assigns every cell's demand to regions and clusters,
// minimising latency + egress + a convex utilization cost per cluster +
// the cost of moving traffic + the cost of shedding by priority; then the
// result is bounded in its step from the previous weights, quantized and
// held back by a deadband. docs/controller.md has the model and the math.
type Optimizer struct{}

var _ Policy = Optimizer{}

// Name returns "optimizer".
func (Optimizer) Name() string { return string(config.PolicyOptimizer) }

// Compute solves one tick.
func (o Optimizer) Compute(in Input) (*Weights, error) {
	if err := in.check(); err != nil {
		return nil, fmt.Errorf("optimizer: %w", err)
	}
	ix := newIndex(in.Config)
	demand := floorDemand(in.Config, in.Demand)
	n := buildNetwork(in, ix, demand)
	if err := n.solve(); err != nil {
		return nil, fmt.Errorf("optimizer: %w", err)
	}
	sol := extract(in, n)
	sol.refine()
	cells := sol.cells()
	w, err := New(o.Name(), in.Now, cells)
	if err != nil {
		return nil, fmt.Errorf("optimizer: %w", err)
	}
	return w, nil
}

// floorDemand plans every cell for at least MinCellDemand, adding the
// missing part as standard demand, so a cell without traffic still gets
// the weights where its first requests are served best.
func floorDemand(c *config.Config, d Demand) Demand {
	out := make(Demand, len(d))
	for k, r := range d {
		out[k] = r
	}
	floor := c.Controller.MinCellDemand
	for _, s := range c.Sources {
		for _, m := range c.Models {
			var total float64
			for _, p := range Priorities {
				total += d[DemandKey{s.Name, m.Name, p}].CostPerSecond
			}
			if total < floor {
				k := DemandKey{s.Name, m.Name, Standard}
				r := out[k]
				r.CostPerSecond += floor - total
				out[k] = r
			}
		}
	}
	return out
}

// solution is a solved network in token-cost units per second.
type solution struct {
	in       Input
	n        *network
	ix       *index
	plans    []*cellPlan
	capacity []float64 // full capacity per cluster (config order)
	load     []float64 // planned load per cluster, after refine
}

// cellPlan is one cell's outcome. Its vectors run over the clusters that
// serve the cell's model (idx: their indexes in the configuration).
type cellPlan struct {
	cell     *cellNode // its class
	source   config.Source
	idx      []int
	demand   float64
	served   float64
	shed     ShedFractions
	opt      []float64 // optimal shares
	prev     []float64 // previous shares, nil when none
	final    []float64 // after the step bounds
	eligible []bool
	alpha    float64
	forced   bool // a cluster of the previous weights lost its eligibility or left the configuration
	deadband bool
	regionX  map[string]float64 // flow per region, token-cost/s
	pastX0   map[string]bool    // the flow into a region reached its previous amount
}

func extract(in Input, n *network) *solution {
	c := in.Config
	ix := n.ix
	sol := &solution{in: in, n: n, ix: ix, capacity: make([]float64, len(c.Clusters))}
	for i, cn := range n.clusters {
		sol.capacity[i] = cn.full
	}
	split := evenSplit(n)
	for _, cell := range n.cells {
		idx := ix.byModel[cell.model.Name]
		pos := ix.position[cell.model.Name]
		opt := make([]float64, len(idx))
		eligible := make([]bool, len(idx))
		regionX := map[string]float64{}
		pastX0 := map[string]bool{}
		var served, demand float64
		for _, d := range cell.demand {
			demand += d
		}
		for _, ra := range cell.regions {
			x := float64(n.g.Flow(ra.arcs[1])) * n.quantum
			if ra.arcs[0] >= 0 {
				x += float64(n.g.Flow(ra.arcs[0])) * n.quantum
			}
			regionX[ra.region] = x
			pastX0[ra.region] = x/n.quantum >= ra.x0
			served += x
			for i, cn := range ra.hub.clusters {
				eligible[pos[cn.index]] = true
				opt[pos[cn.index]] += x * split[ra.hub][i]
			}
		}
		var shed ShedFractions // none for a cell without regions: 503, not shedding
		for pr, pa := range cell.prio {
			if pa.shed >= 0 && pa.units > 0 {
				shed[pr] = min(1, float64(n.g.Flow(pa.shed))/float64(pa.units))
			}
		}
		if served > 0 {
			for i := range opt {
				opt[i] /= served
			}
		}
		for _, mb := range cell.members {
			p := &cellPlan{
				cell: cell, source: mb.source, idx: idx, opt: opt, eligible: eligible, shed: shed,
				alpha: 1, regionX: regionX, pastX0: pastX0,
			}
			for pr, d := range mb.demand {
				p.demand += d
				if len(cell.regions) > 0 {
					p.served += d * (1 - shed[pr])
				}
			}
			if served <= 0 {
				p.opt = fallbackShares(p, sol.capacity)
			}
			p.prev, p.forced = previousShares(ix, in.Previous, mb.source.Name, cell.model.Name, in.Config.Controller.MinCellDemand)
			sol.plans = append(sol.plans, p)
		}
	}
	return sol
}

// evenSplit is how each hub's flow splits over its clusters: equal
// utilization, not the solver's arbitrary choice among ties. The clusters
// of a hub sit in one region and serve one model, so they are equally far
// from every source, and every cluster prices its utilization on the same
// convex curve: for a hub's total flow X, with the load L_i other hubs put
// on cluster i, Σ full_i·C((L_i + x_i)/full_i) is least when the
// utilizations are as equal as they can be (water-filling:
// x_i = max(0, λ·full_i − L_i), Σx_i = X). The solver's split has the same
// totals per hub and per band price, so it is no cheaper; equal clusters
// in one region then share load evenly at any load. Hubs are levelled in
// order, each against the others' latest split; a hub without flow
// splits by capacity (where a first request would go).
func evenSplit(n *network) map[*hubNode][]float64 {
	load := make(map[*clusterNode]float64, len(n.clusters))
	flows := make(map[*hubNode][]float64, len(n.hubs))
	for _, h := range n.hubs {
		f := make([]float64, len(h.clusters))
		for i, a := range h.arcs {
			f[i] = float64(n.g.Flow(a))
			load[h.clusters[i]] += f[i]
		}
		flows[h] = f
	}
	split := make(map[*hubNode][]float64, len(n.hubs))
	for _, h := range n.hubs {
		f := flows[h]
		var total, capTotal float64
		for i, c := range h.clusters {
			total += f[i]
			capTotal += c.full
			load[c] -= f[i] // the others' load
		}
		sh := make([]float64, len(h.clusters))
		if total <= 0 {
			for i, c := range h.clusters {
				sh[i] = c.full / capTotal
			}
			split[h] = sh
			continue
		}
		other := make([]float64, len(h.clusters))
		full := make([]float64, len(h.clusters))
		for i, c := range h.clusters {
			other[i], full[i] = load[c], c.full/n.quantum // in flow units
		}
		x := waterFill(total, full, other)
		for i, c := range h.clusters {
			sh[i] = x[i] / total
			load[c] += x[i]
		}
		split[h] = sh
	}
	return split
}

// waterFill spreads total over bins of the given capacities already
// holding other: x_i = max(0, λ·full_i − other_i) with Σx_i = total, so
// that the bins that receive anything end at the same fill level λ.
// Capacities are > 0.
func waterFill(total float64, full, other []float64) []float64 {
	idx := make([]int, len(full))
	for i := range idx {
		idx[i] = i
	}
	// Bins in order of their current level; the level rises past each.
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(other[a]/full[a], other[b]/full[b]) })
	var sumFull, sumOther float64
	lambda := 0.0
	for k, i := range idx {
		sumFull += full[i]
		sumOther += other[i]
		lambda = (total + sumOther) / sumFull
		if k+1 == len(idx) || lambda <= other[idx[k+1]]/full[idx[k+1]] {
			break
		}
	}
	x := make([]float64, len(full))
	for i := range x {
		x[i] = max(0, lambda*full[i]-other[i])
	}
	return x
}

// fallbackShares are the shares of a cell whose whole demand is shed:
// proportional to capacity over its eligible clusters, so that what the
// fast loop lets through still goes somewhere sensible.
func fallbackShares(p *cellPlan, capacity []float64) []float64 {
	out := make([]float64, len(p.idx))
	var total float64
	for j, i := range p.idx {
		if p.eligible[j] {
			out[j] = capacity[i]
			total += capacity[i]
		}
	}
	for j := range out {
		if total > 0 {
			out[j] /= total
		}
	}
	return out
}

// previousShares is a cell's previous weights as shares over the clusters
// serving its model, nil without a previous cell, or when the previous
// cell carried no measured traffic (planned for at most minDemand, the
// min_cell_demand floor): it has no load to herd, so at a cold start or
// when a source starts sending, its weights go to the optimum at once
// instead of creeping there from the floor's placement by step bounds.
// lost reports a previous target the configuration no longer has serving
// the model (the cluster was removed, or serves other models now): the
// shares then sum to less than 1 and the cell must move at once, as one
// whose cluster lost its capacity.
func previousShares(ix *index, prev *Weights, source, model string, minDemand float64) (shares []float64, lost bool) {
	if prev == nil {
		return nil, false
	}
	cell, ok := prev.Cell(source, model)
	if !ok || len(cell.Targets) == 0 || cell.Demand <= minDemand*(1+1e-9) {
		return nil, false
	}
	pos := ix.position[model]
	out := make([]float64, len(ix.byModel[model]))
	for _, t := range cell.Targets {
		j, ok := -1, false
		if i, known := ix.cluster[t.Cluster]; known {
			j, ok = pos[i]
		}
		if !ok {
			lost = true
			continue
		}
		out[j] = float64(t.Weight) / Total
	}
	return out, lost
}

// summary describes a cell's plan in one line.
func (p *cellPlan) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "optimizer: planned %.0f token-cost/s", p.demand)
	var regs []string
	var classServed float64
	for _, x := range p.regionX {
		classServed += x
	}
	for _, ra := range p.cell.regions {
		if x := p.regionX[ra.region]; x > 0 && classServed > 0 {
			regs = append(regs, fmt.Sprintf("%s %.0f%%", ra.region, 100*x/classServed))
		}
	}
	if len(regs) > 0 {
		fmt.Fprintf(&b, ", served in %s", strings.Join(regs, ", "))
	}
	switch shed := p.demand - p.served; {
	case len(p.cell.regions) == 0:
		b.WriteString(", no eligible cluster has capacity: requests get 503")
	case shed > 1e-9*max(p.demand, 1):
		fmt.Fprintf(&b, ", %.0f shed (demand exceeds the capacity it may use)", shed)
	}
	if p.cell.ttftRelaxed {
		fmt.Fprintf(&b, "; no cluster within the TTFT budget of %.0f ms can serve, so the budget is relaxed", p.cell.model.TTFTBudgetMs)
	}
	switch {
	case p.forced:
		b.WriteString("; a cluster it used lost its capacity or eligibility: moved at once")
	case p.deadband:
		b.WriteString("; change below the deadband: previous weights kept")
	case p.alpha < 1:
		fmt.Fprintf(&b, "; step-bounded: moved %.0f%% of the way to the optimum", 100*p.alpha)
	}
	return b.String()
}
