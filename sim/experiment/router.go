package experiment

import (
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/route"
	"github.com/ilbproject/ilb/tenant"
	"github.com/ilbproject/ilb/weights"
)

// outcome is what happened to a request at its source.
type outcome uint8

const (
	routed      outcome = iota
	shedPlanned         // 429: the weights' shed fraction for its priority, confirmed by saturation
	shedSat             // 429: sheddable, every remaining cluster saturated (fast loop)
	noCapacity          // 503: no cluster can serve it
	failed              // the engine failed it (replica failure) or no healthy host
)

// table is one weights version indexed for routing: per (source, model)
// the route decision's cell and its targets as cluster indexes, as
// extproc's State holds them.
type table struct {
	cells map[cellKey]*routeCell
	sig   []route.Signal // scratch for one decision
}

type cellKey struct{ source, model int }

type routeCell struct {
	clusters []int
	weights  []uint64
	rc       *route.Cell
}

// newTable indexes w for the fleet with the targets ext_proc's State
// builds (route.Targets: weighted, then spill targets).
func newTable(cfg *config.Config, w *weights.Weights, sources, models, clusters map[string]int) *table {
	t := &table{cells: map[cellKey]*routeCell{}}
	for _, c := range w.Cells() {
		src, _ := cfg.Source(c.Source)
		ts := route.Targets(cfg, src, c)
		rc := &routeCell{rc: route.NewCell(ts, c.Shed)}
		for _, tg := range ts {
			rc.clusters = append(rc.clusters, clusters[tg.Cluster])
			rc.weights = append(rc.weights, tg.Weight)
		}
		t.cells[cellKey{sources[c.Source], models[c.Model]}] = rc
	}
	return t
}

// route decides one request with ILB's decision (package route, as
// ext_proc calls it): the live state of the cell's clusters when the fast
// loop is on, none otherwise (then Envoy routes to the drawn cluster
// whatever its state, and no planned shed is confirmed). With a tenant
// table tt, the request of tenant at now gets its tenant's share of the
// planned shedding, as ext_proc books it (tenant.Table.Route).
func (t *table) route(k cellKey, req route.Request, ls []live.Cluster, awaiting []int, work, prompts, scales []float64, fast bool, tt *tenant.Table, tenantName string, now time.Time) (int, outcome, route.Decision, *routeCell) {
	c := t.cells[k]
	if c == nil {
		return -1, noCapacity, route.Decision{}, nil
	}
	if tt != nil {
		tt.Route(now, tenantName, c.rc, &req)
	}
	var sig []route.Signal
	if fast {
		sig = t.sig[:0]
		for _, cl := range c.clusters {
			sg := ls[cl].Signal(int64(awaiting[cl]), work[cl], prompts[cl])
			sg.FirstTokenScale = scales[cl]
			sig = append(sig, sg)
		}
		t.sig = sig
	}
	d := route.Decide(c.rc, sig, req)
	switch d.Outcome {
	case route.NoCapacity:
		return -1, noCapacity, d, c
	case route.Shed:
		return -1, shedPlanned, d, c
	case route.Overloaded:
		return -1, shedSat, d, c
	}
	return c.clusters[d.Chosen], routed, d, c
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
