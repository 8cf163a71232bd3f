// Package flow is a min-cost flow solver: successive shortest paths with
// node potentials (Dijkstra on reduced costs), augmenting along every
// shortest path of a phase at once with a blocking flow (the primal-dual
// method). Capacities, flows and costs are int64, so the solution is exact
// for integer-scaled inputs; costs must be non-negative, which keeps the
// initial potentials at zero. It is the solver of ILB's weights optimizer;
// convex piecewise-linear costs are expressed as one arc per segment.
//
// Every solve starts from zero flow and zero potentials: the result
// depends only on the arcs, in the order they were added, never on what
// a Graph solved before. Reset reuses a Graph's memory for the next
// network (the optimizer's next tick) without changing that.
//
// A Graph is not safe for concurrent use.
package flow

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Inf is an unbounded capacity.
const Inf int64 = math.MaxInt64 / 4

// Graph is a directed network under construction, then solved once (or
// Reset and built again).
type Graph struct {
	n     int
	head  []int32 // tail node of each arc (forward 2k, residual 2k+1)
	to    []int32
	cap   []int64 // residual capacity
	cost  []int64
	pot   []int64
	built bool
	start []int32 // CSR: arcs of node v are order[start[v]:start[v+1]]
	order []int32
	fill  []int32 // scratch of build
	ph    phase   // scratch of Solve
}

// New returns a graph of n nodes, numbered 0..n-1.
func New(n int) *Graph { return &Graph{n: n} }

// Reset empties g to n nodes and no arcs, keeping the memory of its
// arrays for the next network: building and solving a network of the
// same size again allocates nothing. The next Solve is exactly that of a
// new Graph with the same arcs.
func (g *Graph) Reset(n int) {
	g.n = n
	g.head, g.to, g.cap, g.cost = g.head[:0], g.to[:0], g.cap[:0], g.cost[:0]
	g.built = false
}

// Grow reserves room for arcs more arcs.
func (g *Graph) Grow(arcs int) {
	g.head = slices.Grow(g.head, 2*arcs)
	g.to = slices.Grow(g.to, 2*arcs)
	g.cap = slices.Grow(g.cap, 2*arcs)
	g.cost = slices.Grow(g.cost, 2*arcs)
}

// AddNode adds a node and returns its number.
func (g *Graph) AddNode() int {
	g.n++
	return g.n - 1
}

// Nodes is the number of nodes.
func (g *Graph) Nodes() int { return g.n }

// AddArc adds an arc from→to with capacity cp >= 0 and cost c >= 0 per
// unit, and returns its id for Flow.
func (g *Graph) AddArc(from, to int, cp, c int64) int {
	if g.built {
		panic("flow: AddArc after Solve")
	}
	id := len(g.to)
	g.head = append(g.head, int32(from), int32(to))
	g.to = append(g.to, int32(to), int32(from))
	g.cap = append(g.cap, cp, 0)
	g.cost = append(g.cost, c, -c)
	return id
}

// Flow is the flow on arc id after Solve.
func (g *Graph) Flow(id int) int64 { return g.cap[id^1] }

// Potential is the dual value of node v after Solve: the cost of the
// cheapest path from the source to v in the final residual network (the
// marginal cost of one more unit at v). Nodes the source cannot reach
// keep the last finite value.
func (g *Graph) Potential(v int) int64 { return g.pot[v] }

// Errors of Solve.
var (
	ErrNegativeCost = errors.New("flow: negative arc cost")
	ErrBadArc       = errors.New("flow: arc endpoint out of range or negative capacity")
	ErrOverflow     = errors.New("flow: total cost overflows int64")
)

func (g *Graph) build() error {
	if g.built {
		return errors.New("flow: Solve called twice")
	}
	g.built = true
	for i := 0; i < len(g.to); i += 2 {
		if g.cost[i] < 0 {
			return fmt.Errorf("%w: arc %d costs %d", ErrNegativeCost, i, g.cost[i])
		}
		if g.cap[i] < 0 || int(g.head[i]) >= g.n || int(g.to[i]) >= g.n || g.head[i] < 0 || g.to[i] < 0 {
			return fmt.Errorf("%w: arc %d", ErrBadArc, i)
		}
	}
	g.start = zeroed(g.start, g.n+1)
	for _, h := range g.head {
		g.start[h+1]++
	}
	for v := range g.n {
		g.start[v+1] += g.start[v]
	}
	g.order = resized(g.order, len(g.head))
	g.fill = append(g.fill[:0], g.start[:g.n]...)
	for a, h := range g.head {
		g.order[g.fill[h]] = int32(a)
		g.fill[h]++
	}
	g.pot = zeroed(g.pot, g.n)
	return nil
}

// resized returns s with length n, reusing its memory when it can; the
// contents are unspecified.
func resized[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// zeroed returns s with length n, every element zero.
func zeroed[T any](s []T, n int) []T {
	s = resized(s, n)
	clear(s)
	return s
}

// Solve sends up to limit units from s to t at minimum total cost and
// returns the flow sent and its cost. It sends the maximum flow when
// limit is Inf.
func (g *Graph) Solve(s, t int, limit int64) (flow, cost int64, err error) {
	if err := g.build(); err != nil {
		return 0, 0, err
	}
	if s == t || s < 0 || t < 0 || s >= g.n || t >= g.n {
		return 0, 0, fmt.Errorf("flow: bad source %d or sink %d of %d nodes", s, t, g.n)
	}
	ph := &g.ph
	ph.reset(g)
	for flow < limit {
		if !ph.dijkstra(s, t) {
			break
		}
		pushed := ph.blockingFlow(s, t, limit-flow)
		if pushed == 0 {
			break // cannot happen with exact potentials; guards a loop
		}
		d := g.pot[t] - g.pot[s]
		if d > 0 && pushed > math.MaxInt64/d {
			return flow, cost, ErrOverflow
		}
		flow += pushed
		cost += pushed * d
		if cost < 0 {
			return flow, cost, ErrOverflow
		}
	}
	return flow, cost, nil
}
