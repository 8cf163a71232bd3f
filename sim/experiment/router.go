package experiment

import (
	"slices"

	"github.com/ilbproject/ilb/weights"
)

// outcome is what happened to a request at its source.
type outcome uint8

const (
	routed      outcome = iota
	shedPlanned         // 429: the weights' shed fraction for its priority
	shedSat             // 429: sheddable, every remaining cluster saturated (fast loop)
	noCapacity          // 503: no cluster can serve it
	failed              // the engine failed it (replica failure) or no healthy host
)

// table is one weights version indexed for routing: per (source, model)
// the targets as cluster indexes with cumulative weight ends, as
// extproc's State holds them.
type table struct {
	cells map[cellKey]*routeCell
}

type cellKey struct{ source, model int }

type routeCell struct {
	clusters []int
	weights  []uint64
	shed     weights.ShedFractions
}

// newTable indexes w for the fleet.
func newTable(w *weights.Weights, sources, models, clusters map[string]int) *table {
	t := &table{cells: map[cellKey]*routeCell{}}
	for _, c := range w.Cells() {
		rc := &routeCell{shed: c.Shed}
		for _, tg := range c.Targets {
			rc.clusters = append(rc.clusters, clusters[tg.Cluster])
			rc.weights = append(rc.weights, uint64(tg.Weight))
		}
		t.cells[cellKey{sources[c.Source], models[c.Model]}] = rc
	}
	return t
}

// liveCluster is the fast loop's view of a cluster, refreshed every
// signals interval: excluded when no replica serves, saturated when every
// serving replica is.
type liveCluster struct {
	excluded, saturated bool
}

// route decides one request as ILB's ext_proc does (extproc/decide.go):
// no remaining cluster is a 503 for every priority; then the planned shed
// fraction of its priority (u is a uniform draw in [0, 1)); then, with the
// fast loop, a sheddable request is shed when every remaining cluster is
// saturated; then the weighted draw, as Envoy's weighted_clusters takes
// it (draw modulo the total, cumulative weights in order), drawn again
// among the remaining clusters when the fast loop excludes the one drawn,
// and again among the unsaturated ones when that one is saturated
// (steering). Without the fast loop nothing is excluded: Envoy routes to
// the drawn cluster whatever its state.
func (t *table) route(k cellKey, prio weights.Priority, draw uint64, u float64, live []liveCluster, fast bool) (int, outcome) {
	c := t.cells[k]
	if c == nil || len(c.clusters) == 0 {
		return -1, noCapacity
	}
	remaining := c.clusters
	rweights := c.weights
	if fast {
		remaining, rweights = nil, nil
		for i, cl := range c.clusters {
			if !live[cl].excluded {
				remaining = append(remaining, cl)
				rweights = append(rweights, c.weights[i])
			}
		}
		if len(remaining) == 0 {
			return -1, noCapacity
		}
	}
	if f := c.shed[prio]; f > 0 && u < f {
		return -1, shedPlanned
	}
	if fast && prio == weights.Sheddable && allSaturated(remaining, live) {
		return -1, shedSat
	}
	drawn := pick(c.clusters, c.weights, draw)
	if fast && !slices.Contains(remaining, drawn) {
		drawn = pick(remaining, rweights, draw)
	}
	if fast && live[drawn].saturated {
		var cool []int
		var cw []uint64
		for i, cl := range remaining {
			if !live[cl].saturated && rweights[i] > 0 {
				cool, cw = append(cool, cl), append(cw, rweights[i])
			}
		}
		if len(cool) > 0 {
			return pick(cool, cw, draw), routed
		}
	}
	return drawn, routed
}

func allSaturated(cs []int, live []liveCluster) bool {
	for _, c := range cs {
		if !live[c].saturated {
			return false
		}
	}
	return true
}

// pick is Envoy's weighted draw: the slot draw % total falls in one
// cluster's interval of cumulative weights, in order.
func pick(clusters []int, ws []uint64, draw uint64) int {
	var total uint64
	for _, w := range ws {
		total += w
	}
	slot := draw % total
	var begin uint64
	for i, w := range ws {
		if slot < begin+w {
			return clusters[i]
		}
		begin += w
	}
	return clusters[len(clusters)-1]
}

// regionShares is the share of cell k's weights on each region's clusters.
func (t *table) regionShares(k cellKey, clusters []*simCluster, regions int) []float64 {
	out := make([]float64, regions)
	c := t.cells[k]
	if c == nil {
		return out
	}
	var total float64
	for i, cl := range c.clusters {
		out[clusters[cl].region] += float64(c.weights[i])
		total += float64(c.weights[i])
	}
	for i := range out {
		if total > 0 {
			out[i] /= total
		}
	}
	return out
}
