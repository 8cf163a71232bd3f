package weights

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/ilbproject/ilb/config"
)

// Waterfall is the locality-first baseline (Google's
// WATERFALL_BY_REGION): each cell fills the clusters of its nearest
// eligible region up to the target utilization, then spills to the next
// nearest, and so on; demand left when every eligible cluster is at its
// target spreads over them by capacity (overloading them: the baseline
// never sheds). Cells fill in rounds — every cell's nearest region first,
// then every cell's second — in configuration order.
type Waterfall struct{}

var _ Policy = Waterfall{}

// Name returns "waterfall".
func (Waterfall) Name() string { return string(config.PolicyWaterfall) }

// Compute fills the regions.
func (wf Waterfall) Compute(in Input) (*Weights, error) {
	if err := in.check(); err != nil {
		return nil, fmt.Errorf("waterfall: %w", err)
	}
	c := in.Config
	demand := floorDemand(c, in.Demand)
	target := c.Controller.TargetUtilization
	room := make([]float64, len(c.Clusters))
	for i, e := range c.Clusters {
		room[i] = target * in.Clusters[e.Name].Capacity
	}
	type cellFill struct {
		s       config.Source
		m       string
		left    float64
		total   float64
		regions [][]int // eligible cluster indexes per region, nearest first
		load    []float64
	}
	var fills []*cellFill
	rounds := 0
	for _, s := range c.Sources {
		for _, m := range c.Models {
			f := &cellFill{s: s, m: m.Name, load: make([]float64, len(c.Clusters))}
			for _, p := range Priorities {
				f.total += demand[DemandKey{s.Name, m.Name, p}].CostPerSecond
			}
			f.left = f.total
			f.regions = nearestRegions(c, in.Clusters, s, m.Name)
			rounds = max(rounds, len(f.regions))
			fills = append(fills, f)
		}
	}
	for k := range rounds {
		for _, f := range fills {
			if k >= len(f.regions) || f.left <= 0 {
				continue
			}
			var avail float64
			for _, i := range f.regions[k] {
				avail += max(room[i], 0)
			}
			take := min(f.left, avail)
			for _, i := range f.regions[k] {
				if avail > 0 {
					x := take * max(room[i], 0) / avail
					f.load[i] += x
					room[i] -= x
				}
			}
			f.left -= take
		}
	}
	var rows []baselineRow
	for _, f := range fills {
		var all []int
		for _, r := range f.regions {
			all = append(all, r...)
		}
		if f.left > 0 || f.total == 0 { // everything is at target: spread the rest by capacity
			var capTotal float64
			for _, i := range all {
				capTotal += in.Clusters[c.Clusters[i].Name].Capacity
			}
			rest := f.left
			if f.total == 0 {
				rest = 1
			}
			for _, i := range all {
				f.load[i] += rest * in.Clusters[c.Clusters[i].Name].Capacity / capTotal
			}
		}
		shares := make([]float64, len(c.Clusters))
		var sum float64
		for _, x := range f.load {
			sum += x
		}
		for i, x := range f.load {
			if sum > 0 {
				shares[i] = x / sum
			}
		}
		rows = append(rows, baselineRow{
			source: f.s, model: f.m, demand: f.total, shares: shares,
			summary: "waterfall: nearest eligible region up to the target utilization, then the next nearest",
		})
	}
	cells := finishBaseline(in, wf.Name(), rows)
	w, err := New(wf.Name(), in.Now, cells)
	if err != nil {
		return nil, fmt.Errorf("waterfall: %w", err)
	}
	return w, nil
}

// nearestRegions groups the clusters a cell may use (residency, capacity,
// serving the model) by region, nearest region first (ties in
// configuration order).
func nearestRegions(c *config.Config, states map[string]ClusterState, s config.Source, model string) [][]int {
	type reg struct {
		name     string
		rtt      float64
		order    int
		clusters []int
	}
	var regs []*reg
	for ri, r := range c.Regions {
		if !s.Allows(r.Name) {
			continue
		}
		l, _ := c.Link(s.Region, r.Name)
		g := &reg{name: r.Name, rtt: l.RTTMs, order: ri}
		for i, e := range c.Clusters {
			if e.Region == r.Name && e.Serves(model) && states[e.Name].Capacity > 0 {
				g.clusters = append(g.clusters, i)
			}
		}
		if len(g.clusters) > 0 {
			regs = append(regs, g)
		}
	}
	slices.SortStableFunc(regs, func(a, b *reg) int { return cmp.Or(cmp.Compare(a.rtt, b.rtt), cmp.Compare(a.order, b.order)) })
	out := make([][]int, len(regs))
	for i, g := range regs {
		out[i] = g.clusters
	}
	return out
}
