package weights

import (
	"sync"

	"github.com/ilbproject/ilb/weights/flow"
)

// workspace is the optimizer's working memory for one tick: the flow
// network's arrays, the dense demand, the previous cell of every
// (source, model) and the class table. An Optimizer made by NewOptimizer
// keeps one between ticks, so a tick of a fleet the size of the last
// allocates none of it again. Nothing a published Weights holds lives
// here, and nothing here depends on an earlier tick: every table is
// rebuilt from the Input, and the flow graph solves from zero flow and
// zero potentials (flow.Graph.Reset), so a reused workspace computes
// exactly what a new one does.
type workspace struct {
	mu sync.Mutex // held by the tick using it
	g  flow.Graph
	// demand is the floored demand, token-cost/s, at
	// (source·models + model)·numPriorities + priority (configuration
	// order).
	demand []float64
	// prev is the index of the previous cell of each (source, model) in
	// Input.Previous.cells, -1 without one; same layout without priority.
	prev []int32
	// classes and key group the cells into classes (buildNetwork).
	classes map[string]*cellNode
	key     []byte
}

// workspace returns the optimizer's own workspace, locked, when it has
// one that is free, else a new one: concurrent Computes on one Optimizer
// never wait for each other and never share memory. release gives it
// back.
func (o Optimizer) workspace() *workspace {
	if o.ws != nil && o.ws.mu.TryLock() {
		return o.ws
	}
	return &workspace{}
}

func (o Optimizer) release(ws *workspace) {
	clear(ws.classes) // its cells belong to the published version now
	if ws == o.ws {
		ws.mu.Unlock()
	}
}

// floorDemand fills ws.demand from d, planning every cell for at least
// MinCellDemand (as the package's floorDemand does), and returns the
// total in the order of Demand.Keys — the same float sum as
// Demand.Total of the floored map — and whether any critical demand is
// positive. d must have passed CheckDemand against ix's configuration.
func (ws *workspace) floorDemand(ix *index, d Demand) (total float64, critical bool) {
	c := ix.c
	ns, nm := len(c.Sources), len(c.Models)
	ws.demand = resize(ws.demand, ns*nm*int(numPriorities))
	clear(ws.demand)
	dem := ws.demand
	for k, r := range d {
		dem[(ix.source[k.Source]*nm+ix.model[k.Model])*int(numPriorities)+int(k.Priority)] = r.CostPerSecond
	}
	floor := c.Controller.MinCellDemand
	for cell := range ns * nm {
		ds := dem[cell*int(numPriorities) : (cell+1)*int(numPriorities)]
		var sum float64
		for _, v := range ds {
			sum += v
		}
		if sum < floor {
			ds[Standard] += floor - sum
		}
		critical = critical || ds[Critical] > 0
	}
	// Absent keys are zeros here: adding +0 to a sum of non-negative
	// numbers changes no bit, so this is Demand.Total of the floored map.
	for _, s := range ix.sourcesByName {
		for _, m := range ix.modelsByName {
			for _, v := range dem[(s*nm+m)*int(numPriorities) : (s*nm+m+1)*int(numPriorities)] {
				total += v
			}
		}
	}
	return total, critical
}

// cellDemand is the floored demand of (source s, model m) per priority.
func (ws *workspace) cellDemand(ix *index, s, m int) (out [numPriorities]float64) {
	i := (s*len(ix.c.Models) + m) * int(numPriorities)
	copy(out[:], ws.demand[i:i+int(numPriorities)])
	return out
}

// indexPrevious fills ws.prev from prev (nil: no previous cell).
func (ws *workspace) indexPrevious(ix *index, prev *Weights) {
	nm := len(ix.c.Models)
	ws.prev = resize(ws.prev, len(ix.c.Sources)*nm)
	for i := range ws.prev {
		ws.prev[i] = -1
	}
	if prev == nil {
		return
	}
	for i, c := range prev.cells {
		s, okS := ix.source[c.Source]
		m, okM := ix.model[c.Model]
		if okS && okM {
			ws.prev[s*nm+m] = int32(i)
		}
	}
}

// previous is the previous cell of (source s, model m), nil when none:
// what prev.Cell(name of s, name of m) finds, without the search.
func (ws *workspace) previous(ix *index, prev *Weights, s, m int) *Cell {
	i := ws.prev[s*len(ix.c.Models)+m]
	if i < 0 {
		return nil
	}
	return &prev.cells[i]
}

// resize returns s with length n, reusing its memory when it can; the
// contents are unspecified.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
