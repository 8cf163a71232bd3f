package flow

import (
	"math/rand/v2"
	"testing"
)

// TestSmall checks hand-computed optima.
func TestSmall(t *testing.T) {
	tests := []struct {
		name       string
		n          int
		arcs       [][4]int64 // from, to, cap, cost
		limit      int64
		flow, cost int64
		arcFlows   []int64
	}{
		{
			// Two routes 0→1→3 (cost 1+1, cap 4) and 0→2→3 (cost 2+2, cap 5).
			name: "cheap route first", n: 4,
			arcs:  [][4]int64{{0, 1, 4, 1}, {1, 3, 4, 1}, {0, 2, 5, 2}, {2, 3, 5, 2}},
			limit: 6, flow: 6, cost: 4*2 + 2*4, arcFlows: []int64{4, 4, 2, 2},
		},
		{
			// Convex segments: 0→1 then two parallel segments 1→2 (cap 3,
			// cost 1) and (cap inf, cost 10): 5 units cost 3*1 + 2*10.
			name: "convex segments", n: 3,
			arcs:  [][4]int64{{0, 1, Inf, 0}, {1, 2, 3, 1}, {1, 2, Inf, 10}},
			limit: 5, flow: 5, cost: 23, arcFlows: []int64{5, 3, 2},
		},
		{
			// The classic case where the second path must undo the first:
			// 0→1→3 and 0→2→3 with a cross arc 1→2; optimum uses the
			// residual arc 2→1.
			name: "reroute through a residual arc", n: 4,
			arcs:  [][4]int64{{0, 1, 1, 1}, {0, 2, 1, 5}, {1, 2, 1, 1}, {1, 3, 1, 5}, {2, 3, 1, 1}},
			limit: Inf, flow: 2, cost: 1 + 5 + 5 + 1, arcFlows: []int64{1, 1, 0, 1, 1},
		},
		{
			name: "unreachable sink", n: 3,
			arcs:  [][4]int64{{0, 1, 5, 1}},
			limit: Inf, flow: 0, cost: 0, arcFlows: []int64{0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := New(tt.n)
			var ids []int
			for _, a := range tt.arcs {
				ids = append(ids, g.AddArc(int(a[0]), int(a[1]), a[2], a[3]))
			}
			f, c, err := g.Solve(0, tt.n-1, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if f != tt.flow || c != tt.cost {
				t.Errorf("flow %d cost %d; want %d, %d", f, c, tt.flow, tt.cost)
			}
			for i, id := range ids {
				if got := g.Flow(id); got != tt.arcFlows[i] {
					t.Errorf("arc %d flow %d; want %d", i, got, tt.arcFlows[i])
				}
			}
		})
	}
}

func TestErrors(t *testing.T) {
	g := New(2)
	g.AddArc(0, 1, 1, -1)
	if _, _, err := g.Solve(0, 1, Inf); err == nil {
		t.Error("negative cost accepted")
	}
	g = New(2)
	g.AddArc(0, 5, 1, 1)
	if _, _, err := g.Solve(0, 1, Inf); err == nil {
		t.Error("arc to a missing node accepted")
	}
}

// reference is the textbook algorithm: augment one unit-bottleneck path at
// a time along a Bellman-Ford shortest path. Slow and obviously right.
func reference(n int, arcs [][4]int64, s, t int, limit int64) (int64, int64) {
	type arc struct {
		to       int
		cap, cst int64
	}
	var as []arc
	adj := make([][]int, n)
	for _, a := range arcs {
		adj[a[0]] = append(adj[a[0]], len(as))
		as = append(as, arc{int(a[1]), a[2], a[3]})
		adj[a[1]] = append(adj[a[1]], len(as))
		as = append(as, arc{int(a[0]), 0, -a[3]})
	}
	var flow, cost int64
	for flow < limit {
		dist := make([]int64, n)
		prev := make([]int, n)
		for i := range dist {
			dist[i], prev[i] = Inf, -1
		}
		dist[s] = 0
		for range n {
			for v := range n {
				if dist[v] == Inf {
					continue
				}
				for _, i := range adj[v] {
					if as[i].cap > 0 && dist[v]+as[i].cst < dist[as[i].to] {
						dist[as[i].to] = dist[v] + as[i].cst
						prev[as[i].to] = i
					}
				}
			}
		}
		if dist[t] == Inf {
			break
		}
		push := limit - flow
		for v := t; v != s; v = as[prev[v]^1].to {
			push = min(push, as[prev[v]].cap)
		}
		for v := t; v != s; v = as[prev[v]^1].to {
			as[prev[v]].cap -= push
			as[prev[v]^1].cap += push
		}
		flow += push
		cost += push * dist[t]
	}
	return flow, cost
}

// TestMatchesReference compares flow and cost with the textbook algorithm
// on random graphs, and checks flow conservation and capacities.
func TestMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		n := 2 + r.IntN(12)
		var arcs [][4]int64
		for range r.IntN(40) {
			arcs = append(arcs, [4]int64{int64(r.IntN(n)), int64(r.IntN(n)), int64(r.IntN(20)), int64(r.IntN(30))})
		}
		limit := Inf
		if r.IntN(2) == 0 {
			limit = int64(r.IntN(50))
		}
		wf, wc := reference(n, arcs, 0, n-1, limit)
		g := New(n)
		ids := make([]int, len(arcs))
		for j, a := range arcs {
			ids[j] = g.AddArc(int(a[0]), int(a[1]), a[2], a[3])
		}
		f, c, err := g.Solve(0, n-1, limit)
		if err != nil {
			t.Fatal(err)
		}
		if f != wf || c != wc {
			t.Fatalf("graph %d: flow %d cost %d; reference %d, %d; arcs %v", i, f, c, wf, wc, arcs)
		}
		net := make([]int64, n)
		for j, a := range arcs {
			fl := g.Flow(ids[j])
			if fl < 0 || fl > a[2] {
				t.Fatalf("graph %d arc %d: flow %d outside [0, %d]", i, j, fl, a[2])
			}
			net[a[0]] -= fl
			net[a[1]] += fl
		}
		for v := range n {
			want := int64(0)
			switch v {
			case 0:
				want = -f
			case n - 1:
				want = f
			}
			if net[v] != want {
				t.Fatalf("graph %d node %d: net inflow %d, want %d", i, v, net[v], want)
			}
		}
	}
}

// TestResetSolvesAsNew solves random networks of changing sizes (a large
// one, then smaller and larger ones) on one Graph, Reset between them,
// and on a new Graph each: every flow on every arc, the flow, the cost
// and every potential are the same. Reuse keeps memory, never state.
func TestResetSolvesAsNew(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	reused := New(0)
	for i := range 300 {
		n := 2 + r.IntN(40)
		if i%7 == 0 {
			n = 2 + r.IntN(3) // much smaller than the one before
		}
		var arcs [][4]int64
		for range r.IntN(8 * n) {
			arcs = append(arcs, [4]int64{int64(r.IntN(n)), int64(r.IntN(n)), int64(r.IntN(20)), int64(r.IntN(30))})
		}
		limit := Inf
		if r.IntN(2) == 0 {
			limit = int64(r.IntN(80))
		}
		fresh := New(n)
		reused.Reset(n)
		for _, a := range arcs {
			fresh.AddArc(int(a[0]), int(a[1]), a[2], a[3])
			reused.AddArc(int(a[0]), int(a[1]), a[2], a[3])
		}
		f1, c1, err1 := fresh.Solve(0, n-1, limit)
		f2, c2, err2 := reused.Solve(0, n-1, limit)
		if err1 != nil || err2 != nil {
			t.Fatalf("graph %d: %v, %v", i, err1, err2)
		}
		if f1 != f2 || c1 != c2 {
			t.Fatalf("graph %d: reused graph sends %d at %d, a new one %d at %d", i, f2, c2, f1, c1)
		}
		for a := range arcs {
			if fresh.Flow(2*a) != reused.Flow(2*a) {
				t.Fatalf("graph %d arc %d: flow %d reused, %d new", i, a, reused.Flow(2*a), fresh.Flow(2*a))
			}
		}
		for v := range n {
			if fresh.Potential(v) != reused.Potential(v) {
				t.Fatalf("graph %d node %d: potential %d reused, %d new", i, v, reused.Potential(v), fresh.Potential(v))
			}
		}
	}
	if _, _, err := reused.Solve(0, 1, Inf); err == nil {
		t.Error("a second Solve without Reset accepted")
	}
}

// TestResetSolveAllocatesNothing: once a Graph has solved a network,
// building and solving one of the same size again allocates nothing.
func TestResetSolveAllocatesNothing(t *testing.T) {
	g := New(0)
	build := func() {
		g.Reset(50)
		for v := range 49 {
			g.AddArc(v, v+1, int64(10+v%7), int64(v%5))
			g.AddArc(0, v+1, 3, int64(20+v))
		}
		if _, _, err := g.Solve(0, 49, Inf); err != nil {
			t.Fatal(err)
		}
	}
	build()
	if n := testing.AllocsPerRun(20, build); n != 0 {
		t.Errorf("%v allocations per rebuild and solve; want 0", n)
	}
}
