package weights

import (
	"cmp"
	"slices"

	"github.com/ilbproject/ilb/config"
)

// solution is a solved network in token-cost units per second.
type solution struct {
	in       Input
	ix       *index
	ws       *workspace
	plans    []cellPlan   // one per cell, class by class, in class order
	groups   []*planGroup // in the order of their first cell
	capacity []float64    // full capacity per cluster (config order)
	load     []float64    // planned load per cluster, after refine
}

// planGroup is the plan the cells of one class share. The cells of a
// class have the same previous weights (the class key holds them), so
// those planned from their previous shares go through every step with
// the same shares, and so do those planned without (no previous cell, or
// one that carried no more than min_cell_demand): a class has at most
// two groups, and a group's vectors are computed once, not per cell. Its
// vectors run over the clusters that serve the class's model (idx: their
// indexes in the configuration).
type planGroup struct {
	cell     *cellNode // its class
	idx      []int
	shed     ShedFractions
	opt      []float64 // optimal shares, shared by the class's groups
	prev     []float64 // previous shares, nil when none
	final    []float64 // after the step bounds
	eligible []bool
	alpha    float64
	forced   bool               // a cluster of the previous weights lost its eligibility or left the configuration
	regionX  map[string]float64 // flow per region, token-cost/s
	pastX0   map[string]bool    // the flow into a region reached its previous amount
	moving   int                // index among the groups boundUtilizationStep moves, -1 if none

	// What cells computes once per group: the quantized final shares and
	// their targets, the previous weights as integers and their targets
	// (for cells the deadband holds), and whether the weights are within
	// the deadband of the previous ones (0 not known yet, 1 yes, 2 no).
	weights, kept       []uint32
	targets, keptTarget []Target
	within              int8
}

// cellPlan is one cell's outcome: its group's plan, and what is its own.
type cellPlan struct {
	*planGroup
	source   *config.Source // in Input.Config.Sources
	si, mi   int            // indexes of source and model in the configuration
	demand   float64
	served   float64
	deadband bool
}

func extract(in Input, n *network, ws *workspace) *solution {
	c := in.Config
	ix := n.ix
	sol := &solution{in: in, ix: ix, ws: ws, capacity: make([]float64, len(c.Clusters))}
	for i, cn := range n.clusters {
		sol.capacity[i] = cn.full
	}
	split := evenSplit(n)
	cells := 0
	for _, cell := range n.cells {
		cells += len(cell.members)
	}
	sol.plans = make([]cellPlan, 0, cells)
	minDemand := c.Controller.MinCellDemand
	for _, cell := range n.cells {
		idx := ix.byModel[cell.model.Name]
		pos := ix.position[cell.model.Name]
		opt := make([]float64, len(idx))
		eligible := make([]bool, len(idx))
		regionX := map[string]float64{}
		pastX0 := map[string]bool{}
		var served float64
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
				opt[pos[cn.index]] += x * split[ra.hub.id][i]
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
		} else {
			opt = fallbackShares(idx, eligible, sol.capacity)
		}
		group := func(prev []float64, lost bool) *planGroup {
			g := &planGroup{
				cell: cell, idx: idx, opt: opt, eligible: eligible, shed: shed, alpha: 1,
				regionX: regionX, pastX0: pastX0, prev: prev, forced: lost, moving: -1,
			}
			sol.groups = append(sol.groups, g)
			return g
		}
		var fresh, held *planGroup // planned without, and from, previous shares
		for _, mb := range cell.members {
			p := cellPlan{source: mb.source, si: mb.si, mi: cell.mi}
			for pr, d := range mb.demand {
				p.demand += d
				if len(cell.regions) > 0 {
					p.served += d * (1 - shed[pr])
				}
			}
			switch pc := ws.previous(ix, in.Previous, mb.si, cell.mi); {
			case !carriedTraffic(pc, minDemand):
				if fresh == nil {
					fresh = group(nil, false)
				}
				p.planGroup = fresh
			default:
				if held == nil {
					held = group(previousShares(ix, pc, cell.model.Name))
				}
				p.planGroup = held
			}
			sol.plans = append(sol.plans, p)
		}
	}
	return sol
}

// evenSplit is how each hub's flow splits over its clusters (indexed by
// hub id): equal utilization, not the solver's arbitrary choice among
// ties. The clusters of a hub sit in one region and serve one model, so
// they are equally far from every source, and every cluster prices its
// utilization on the same convex curve: for a hub's total flow X, with
// the load L_i other hubs put on cluster i, Σ full_i·C((L_i + x_i)/full_i)
// is least when the utilizations are as equal as they can be
// (water-filling: x_i = max(0, λ·full_i − L_i), Σx_i = X). The solver's
// split has the same totals per hub and per band price, so it is no
// cheaper; equal clusters in one region then share load evenly at any
// load. Hubs are levelled in order, each against the others' latest
// split; a hub without flow splits by capacity (where a first request
// would go).
func evenSplit(n *network) [][]float64 {
	load := make([]float64, len(n.clusters)) // by cluster index
	flows := make([][]float64, len(n.hubs))
	for _, h := range n.hubs {
		f := make([]float64, len(h.clusters))
		for i, a := range h.arcs {
			f[i] = float64(n.g.Flow(a))
			load[h.clusters[i].index] += f[i]
		}
		flows[h.id] = f
	}
	split := make([][]float64, len(n.hubs))
	for _, h := range n.hubs {
		f := flows[h.id]
		var total, capTotal float64
		for i, c := range h.clusters {
			total += f[i]
			capTotal += c.full
			load[c.index] -= f[i] // the others' load
		}
		sh := make([]float64, len(h.clusters))
		if total <= 0 {
			for i, c := range h.clusters {
				sh[i] = c.full / capTotal
			}
			split[h.id] = sh
			continue
		}
		other := make([]float64, len(h.clusters))
		full := make([]float64, len(h.clusters))
		for i, c := range h.clusters {
			other[i], full[i] = load[c.index], c.full/n.quantum // in flow units
		}
		x := waterFill(total, full, other)
		for i, c := range h.clusters {
			sh[i] = x[i] / total
			load[c.index] += x[i]
		}
		split[h.id] = sh
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

// fallbackShares are the shares of a class whose whole demand is shed:
// proportional to capacity over its eligible clusters (idx, eligible),
// so that what the fast loop lets through still goes somewhere sensible.
func fallbackShares(idx []int, eligible []bool, capacity []float64) []float64 {
	out := make([]float64, len(idx))
	var total float64
	for j, i := range idx {
		if eligible[j] {
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

// carriedTraffic reports whether a cell is planned from its previous
// shares: it has a previous cell with targets that carried measured
// traffic, more than minDemand (the min_cell_demand floor). A cell
// without, at a cold start or when its source starts sending, has no
// load to herd: its weights go to the optimum at once instead of
// creeping there from the floor's placement by step bounds.
func carriedTraffic(prev *Cell, minDemand float64) bool {
	return prev != nil && len(prev.Targets) > 0 && prev.Demand > minDemand*(1+1e-9)
}

// previousShares is a previous cell's weights as shares over the
// clusters serving model. lost reports a previous target the
// configuration no longer has serving the model (the cluster was
// removed, or serves other models now): the shares then sum to less than
// 1 and the cell must move at once, as one whose cluster lost its
// capacity.
func previousShares(ix *index, prev *Cell, model string) (shares []float64, lost bool) {
	pos := ix.position[model]
	out := make([]float64, len(ix.byModel[model]))
	for _, t := range prev.Targets {
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
