package weights

import (
	"fmt"
	"math"
	"strconv"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights/flow"
)

// The flow network of one optimizer tick (docs/controller.md):
//
//	S ──ΣD[s,m,·]──► cell(s,m) ──RTT+egress (+2μ past x0)──► hub(m,r) ──► cluster e ──bands──► T
//	                    └── one arc per priority p: capacity D[s,m,p], shed cost of p ───────────────► T
//
// Shedding from the cell with one arc per priority sheds the cheapest
// priority first, as a node per priority would, with fewer nodes.
//
// A hub gathers the clusters of one region serving one model: they are
// equally far from every source, so cells need one arc per region, not
// per cluster. Cluster arcs to T are the utilization bands (one arc per
// band, convex costs), plus an overflow arc when some demand may not be
// shed.

// Fixed-point scales: costs are ms-equivalents × costScale; flows are
// token-cost units/s ÷ quantum, with the quantum chosen so that the total
// demand is flowUnits units (a resolution of 2^-34 of the total demand).
// Validation keeps every shed cost at most config.MaxShedCost and below
// the overflow cost, so the dearest path (a link and the overflow arc, or
// a shed arc: below 2e6, 2e8 after scaling) times the total flow stays
// below 2^63.
const (
	costScale = 100
	flowUnits = 1 << 34
	// overflowCost is charged per unit served above a cluster's capacity,
	// which only demand that may not be shed does: the overflow arc is
	// open to every priority, but standard and sheddable demand is
	// cheaper to shed (config.Config.Validate).
	overflowCost = config.OverflowCost
)

type network struct {
	ix       *index
	g        *flow.Graph // the workspace's: valid until the tick ends
	s, t     int
	quantum  float64 // token-cost units per second per flow unit
	cells    []*cellNode
	hubs     []*hubNode
	clusters []*clusterNode
}

// cellNode is a class of cells: the cells of one model whose sources sit
// in the same region under the same residency and had the same previous
// weights. Every arc cost and every movement bound of such cells is the
// same per unit, so one node carrying their summed demand has the same
// optimum, split back in proportion to each cell's demand — and their
// weights stay equal, so they stay one class. It shrinks the network by
// the number of sources per region.
type cellNode struct {
	model   config.Model
	mi      int // index of model in Config.Models
	members []member
	node    int
	supply  int                    // arc id S -> cell, -1 without demand
	units   int64                  // demand routed through the network
	demand  [numPriorities]float64 // token-cost/s, with the floor, summed
	prio    [numPriorities]prioArcs
	regions []*regionArc
	// ttftRelaxed: no region within the model's TTFT budget could serve.
	ttftRelaxed bool
}

// member is one cell of a class.
type member struct {
	source *config.Source // in Input.Config.Sources
	si     int            // its index there
	demand [numPriorities]float64
}

type prioArcs struct {
	shed  int // arc id, -1 if absent
	units int64
}

type regionArc struct {
	region string
	hub    *hubNode
	base   float64 // RTT + egress, ms-equivalent
	egress float64
	rtt    float64
	x0     float64 // previous amount here, units
	arcs   [2]int  // up to x0 at base; beyond at base + 2μ
}

type hubNode struct {
	model, region string
	id            int // index in network.hubs
	node          int
	clusters      []*clusterNode
	arcs          []int // hub -> clusters[i]
}

type clusterNode struct {
	cfg      config.EngineCluster
	index    int // in Config.Clusters
	node     int
	full     float64 // capacity at 100%, token-cost/s
	bands    []bandArc
	overflow int // arc id, -1 if absent
}

type bandArc struct {
	arc      int
	from, to float64 // utilization
	cost     float64
}

func (n *network) units(x float64) int64 {
	u := math.Round(x / n.quantum)
	if u > float64(flow.Inf) {
		return flow.Inf
	}
	return int64(u)
}

func costUnits(ms float64) int64 { return int64(math.Round(ms * costScale)) }

// buildNetwork lays out the network of in in ws's graph, with the
// floored demand in ws (floorDemand) and the previous cells indexed
// (indexPrevious). Nodes and arcs are numbered in a fixed order —
// clusters and their bands, hubs, then classes in the order of their
// first cell (sources, then models, in configuration order) — which
// fixes the solver's choice among equal-cost optima.
func buildNetwork(in Input, ix *index, ws *workspace) *network {
	c := in.Config
	ct := c.Controller
	total, critical := ws.floorDemand(ix, in.Demand)
	neverShed := critical && !ct.Shedding.ShedCritical
	g := &ws.g
	g.Reset(2)
	n := &network{ix: ix, g: g, s: 0, t: 1, quantum: max(total, 1e-9) / flowUnits}
	arcs := 0
	for _, e := range c.Clusters {
		arcs += len(ix.curve) + 1 + len(e.Models) // bands, overflow, one arc from each hub
	}
	g.Grow(arcs)

	shedCost := [numPriorities]float64{ct.Shedding.CriticalCost, ct.Shedding.StandardCost, ct.Shedding.SheddableCost}

	// Clusters and their bands.
	for i, e := range c.Clusters {
		cn := &clusterNode{cfg: e, index: i, node: g.AddNode(), full: in.Clusters[e.Name].Capacity, overflow: -1}
		if cn.full > 0 {
			from := 0.0
			cn.bands = make([]bandArc, 0, len(ix.curve))
			for _, b := range ix.clusterCurve(in.Clusters[e.Name]) {
				arc := g.AddArc(cn.node, n.t, n.units((b.UpTo-from)*cn.full), costUnits(b.Cost))
				cn.bands = append(cn.bands, bandArc{arc: arc, from: from, to: b.UpTo, cost: b.Cost})
				from = b.UpTo
			}
			if neverShed {
				cn.overflow = g.AddArc(cn.node, n.t, flow.Inf, costUnits(overflowCost))
			}
		}
		n.clusters = append(n.clusters, cn)
	}
	// Hubs: (model, region) with at least one cluster that has capacity.
	hubs := make([][]*hubNode, len(c.Models)) // [model][region]
	for mi, m := range c.Models {
		hubs[mi] = make([]*hubNode, len(c.Regions))
		for _, i := range ix.byModel[m.Name] {
			cn := n.clusters[i]
			if cn.full <= 0 {
				continue
			}
			r := ix.clusterRegion[i]
			h := hubs[mi][r]
			if h == nil {
				h = &hubNode{model: m.Name, region: cn.cfg.Region, id: len(n.hubs), node: g.AddNode()}
				hubs[mi][r] = h
				n.hubs = append(n.hubs, h)
			}
			h.clusters = append(h.clusters, cn)
			h.arcs = append(h.arcs, g.AddArc(h.node, cn.node, flow.Inf, 0))
		}
	}
	// Cells, grouped in classes.
	prevShare := make([]float64, len(c.Regions))
	if ws.classes == nil {
		ws.classes = map[string]*cellNode{}
	}
	arcs = 0
	for si := range c.Sources {
		s := &c.Sources[si]
		for mi, m := range c.Models {
			mb := member{source: s, si: si, demand: ws.cellDemand(ix, si, mi)}
			prev := ws.previous(ix, in.Previous, si, mi)
			ws.key = classKey(ws.key[:0], m.Name, s.Region, ix.residency[si], prev)
			cell := ws.classes[string(ws.key)]
			if cell == nil {
				cell = &cellNode{model: m, mi: mi, node: g.AddNode(), supply: -1}
				ws.classes[string(ws.key)] = cell
				n.cells = append(n.cells, cell)
				previousRegionShares(ix, prev, prevShare)
				regions, relaxed := cellRegions(ix, *s, m, hubs[mi])
				cell.ttftRelaxed = relaxed
				arcsOf := make([]regionArc, len(regions))
				cell.regions = make([]*regionArc, len(regions))
				for k, r := range regions {
					link := ix.links[ix.region[s.Region]][r]
					ra := &arcsOf[k]
					*ra = regionArc{
						region: c.Regions[r].Name, hub: hubs[mi][r], rtt: link.RTTMs,
						egress: link.EgressUSDPerGB * ct.EgressMsPerUSDPerGB, x0: prevShare[r],
					}
					ra.base = ra.rtt + ra.egress
					cell.regions[k] = ra
				}
				arcs += 2*len(regions) + int(numPriorities) + 1
			}
			cell.members = append(cell.members, mb)
			for _, p := range Priorities {
				cell.demand[p] += mb.demand[p]
			}
		}
	}
	g.Grow(arcs)
	for _, cell := range n.cells {
		var served float64
		for _, d := range cell.demand {
			served += d
		}
		for _, ra := range cell.regions {
			ra.x0 *= served / n.quantum // previous share × today's demand, in units
			ra.arcs[0] = -1
			if x0 := int64(math.Round(ra.x0)); x0 > 0 {
				ra.arcs[0] = g.AddArc(cell.node, ra.hub.node, x0, costUnits(ra.base))
			}
			ra.arcs[1] = g.AddArc(cell.node, ra.hub.node, flow.Inf, costUnits(ra.base+2*ct.MovementCost))
		}
		for _, p := range Priorities {
			pa := prioArcs{shed: -1}
			mayShed := p != Critical || ct.Shedding.ShedCritical
			// A cell no cluster can serve stays out of the network: its
			// requests get 503 (no capacity), which is not shedding.
			if u := n.units(cell.demand[p]); u > 0 && len(cell.regions) > 0 {
				pa.units = u
				cell.units += u
				if mayShed {
					pa.shed = g.AddArc(cell.node, n.t, u, costUnits(shedCost[p]))
				}
			}
			cell.prio[p] = pa
		}
		if cell.units > 0 {
			cell.supply = g.AddArc(n.s, cell.node, cell.units, 0)
		}
	}
	return n
}

// cellRegions lists, in configuration order, the indexes of the regions
// a cell may be served in: allowed by residency, with capacity for the
// model (a hub), and within the model's TTFT budget — unless none within
// it can serve, then all.
func cellRegions(ix *index, s config.Source, m config.Model, hubs []*hubNode) (regions []int, relaxed bool) {
	from := ix.region[s.Region]
	var all []int
	for r, h := range hubs {
		if h != nil && s.Allows(ix.c.Regions[r].Name) {
			all = append(all, r)
		}
	}
	if m.TTFTBudgetMs <= 0 {
		return all, false
	}
	for _, r := range all {
		if ix.links[from][r].RTTMs <= m.TTFTBudgetMs {
			regions = append(regions, r)
		}
	}
	if len(regions) == 0 {
		return all, len(all) > 0
	}
	return regions, false
}

// previousRegionShares fills out (one entry per region) with the share of
// a cell's traffic each region had in its previous cell (nil: none).
func previousRegionShares(ix *index, prev *Cell, out []float64) {
	clear(out)
	if prev == nil {
		return
	}
	for _, t := range prev.Targets {
		if i, ok := ix.cluster[t.Cluster]; ok {
			out[ix.clusterRegion[i]] += float64(t.Weight) / Total
		}
	}
}

// solve runs the min-cost flow and checks that every unit of demand was
// either routed or shed: shed arcs, and overflow arcs for demand that may
// not be shed, make that always possible, so anything else is a solver
// fault.
func (n *network) solve() error {
	if _, _, err := n.g.Solve(n.s, n.t, flow.Inf); err != nil {
		return fmt.Errorf("min-cost flow: %w", err)
	}
	for _, cell := range n.cells {
		if cell.supply >= 0 && n.g.Flow(cell.supply) != cell.units {
			return fmt.Errorf("min-cost flow: (%s, %s): %d of %d units placed",
				cell.members[0].source.Name, cell.model.Name, n.g.Flow(cell.supply), cell.units)
		}
	}
	return nil
}

// classKey appends to b the key that groups cells the network cannot
// tell apart: same model, source region and residency (the sorted allowed
// regions, "*" for all), and the same previous weights (prev, nil when
// none).
func classKey(b []byte, model, region, residency string, prev *Cell) []byte {
	b = append(b, model...)
	b = append(b, 0)
	b = append(b, region...)
	b = append(b, 0)
	b = append(b, residency...)
	if prev != nil {
		for _, t := range prev.Targets {
			b = append(b, 0)
			b = append(b, t.Cluster...)
			b = append(b, '=')
			b = strconv.AppendUint(b, uint64(t.Weight), 10)
		}
	}
	return b
}
