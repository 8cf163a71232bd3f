package flow

// phase holds the scratch space of one Dijkstra and one blocking flow,
// reused across phases.
type phase struct {
	g     *Graph
	dist  []int64
	done  []bool
	level []int32
	iter  []int32
	queue []int32
	pq    nodeHeap
	stack []frame
	arcs  []int32
}

type frame struct {
	v    int32
	push int64
}

// reset sizes the scratch for g, keeping its memory. dijkstra and
// blockingFlow initialise every entry they read, so old contents do not
// matter.
func (p *phase) reset(g *Graph) {
	p.g = g
	p.dist = resized(p.dist, g.n)
	p.done = resized(p.done, g.n)
	p.level = resized(p.level, g.n)
	p.iter = resized(p.iter, g.n)
	p.queue, p.pq, p.stack, p.arcs = p.queue[:0], p.pq[:0], p.stack[:0], p.arcs[:0]
}

// dijkstra computes shortest distances from s on reduced costs over
// residual arcs and adds them to the potentials, so that every arc on a
// shortest path has reduced cost 0. Nodes not reached get the distance of
// t, which keeps every reduced cost non-negative. It reports whether t is
// reachable.
func (p *phase) dijkstra(s, t int) bool {
	g := p.g
	const unseen = Inf
	for v := range p.dist {
		p.dist[v] = unseen
		p.done[v] = false
	}
	p.dist[s] = 0
	p.pq = p.pq[:0]
	p.pq.push(item{0, int32(s)})
	for len(p.pq) > 0 {
		it := p.pq.pop()
		v := it.v
		if p.done[v] || it.d != p.dist[v] {
			continue
		}
		p.done[v] = true
		if int(v) == t {
			break // nodes farther than t keep their bound; see below
		}
		for _, a := range g.order[g.start[v]:g.start[v+1]] {
			if g.cap[a] <= 0 {
				continue
			}
			w := g.to[a]
			nd := it.d + g.cost[a] + g.pot[v] - g.pot[w]
			if nd < p.dist[w] {
				p.dist[w] = nd
				p.pq.push(item{nd, w})
			}
		}
	}
	if !p.done[t] {
		return false
	}
	dt := p.dist[t]
	for v := range p.dist {
		// Settled nodes move by their distance; the others by dist(t),
		// their distance is at least that: reduced costs stay >= 0.
		if p.done[v] {
			g.pot[v] += p.dist[v]
		} else {
			g.pot[v] += dt
		}
	}
	return true
}

// blockingFlow pushes up to limit units along admissible arcs (residual,
// reduced cost 0) by Dinic's method: BFS levels, then depth-first
// augmentation with current-arc pointers, until t is cut off.
func (p *phase) blockingFlow(s, t int, limit int64) int64 {
	var total int64
	for total < limit && p.levels(s, t) {
		for v := range p.iter {
			p.iter[v] = p.g.start[v]
		}
		for total < limit {
			f := p.augment(s, t, limit-total)
			if f == 0 {
				break
			}
			total += f
		}
	}
	return total
}

func (p *phase) admissible(a int32) bool {
	g := p.g
	return g.cap[a] > 0 && g.cost[a]+g.pot[g.head[a]]-g.pot[g.to[a]] == 0
}

// levels labels nodes by BFS depth over admissible arcs from s, up to
// the depth of t: nodes deeper than t cannot be on a shortest s→t path of
// the level graph.
func (p *phase) levels(s, t int) bool {
	g := p.g
	level, cp, cost, pot, to := p.level, g.cap, g.cost, g.pot, g.to
	for v := range level {
		level[v] = -1
	}
	level[s] = 0
	p.queue = append(p.queue[:0], int32(s))
	for i := 0; i < len(p.queue); i++ {
		v := p.queue[i]
		if level[t] >= 0 && level[v] >= level[t] {
			break
		}
		pv := pot[v]
		for _, a := range g.order[g.start[v]:g.start[v+1]] {
			w := to[a]
			if level[w] < 0 && cp[a] > 0 && cost[a]+pv-pot[w] == 0 {
				level[w] = level[v] + 1
				p.queue = append(p.queue, w)
			}
		}
	}
	return level[t] >= 0
}

// augment finds one path s→t in the level graph (iteratively, no
// recursion depth limit) and pushes its bottleneck, at most limit.
func (p *phase) augment(s, t int, limit int64) int64 {
	g := p.g
	path := p.stack[:0]
	path = append(path, frame{int32(s), limit})
	arcs := p.arcs[:0]
	defer func() { p.arcs = arcs[:0] }()
	for len(path) > 0 {
		top := path[len(path)-1]
		v := top.v
		if int(v) == t {
			f := top.push
			for _, a := range arcs {
				g.cap[a] -= f
				g.cap[a^1] += f
			}
			p.stack = path
			return f
		}
		advanced := false
		for ; p.iter[v] < g.start[v+1]; p.iter[v]++ {
			a := g.order[p.iter[v]]
			w := g.to[a]
			if p.level[w] == p.level[v]+1 && p.admissible(a) {
				path = append(path, frame{w, min(top.push, g.cap[a])})
				arcs = append(arcs, a)
				advanced = true
				break
			}
		}
		if !advanced { // dead end: retreat and skip the arc that led here
			path = path[:len(path)-1]
			if len(arcs) > 0 {
				arcs = arcs[:len(arcs)-1]
				p.iter[path[len(path)-1].v]++
			}
		}
	}
	p.stack = path
	return 0
}

type item struct {
	d int64
	v int32
}

// nodeHeap is a binary min-heap of (distance, node), ties by node for
// determinism; typed, so pushes do not allocate.
type nodeHeap []item

func (h nodeHeap) less(i, j int) bool {
	if h[i].d != h[j].d {
		return h[i].d < h[j].d
	}
	return h[i].v < h[j].v
}

func (h *nodeHeap) push(x item) {
	*h = append(*h, x)
	a := *h
	for i := len(a) - 1; i > 0; {
		parent := (i - 1) / 2
		if !a.less(i, parent) {
			break
		}
		a[i], a[parent] = a[parent], a[i]
		i = parent
	}
}

func (h *nodeHeap) pop() item {
	a := *h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(a) && a.less(l, m) {
			m = l
		}
		if r < len(a) && a.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return top
}
