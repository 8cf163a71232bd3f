package replica

// kvPool accounts for the KV cache blocks of a replica, like vLLM v1's
// BlockPool (vllm/v1/core/block_pool.py) reduced to what timing needs:
// counts of blocks, plus identity only for the blocks that can be shared
// through the prefix cache.
//
// Every block is in exactly one of three sets:
//
//   - used: referenced by at least one running sequence (used counts them);
//   - idle cached: free, but still holding the content of a prefix block,
//     findable by its hash until evicted (the lru list, idle counts them);
//   - empty: free, holding nothing reusable (total - used - idle).
//
// Allocation takes empty blocks first, then evicts idle cached blocks in
// least-recently-freed order. (vLLM keeps one free queue for both kinds and
// evicts by free time alone; preferring empty blocks keeps cached prefixes a
// little longer. Only blocks with a [Request.Prefix] hash are cacheable
// here, where vLLM hashes every full block.)
//
// A sequence holds blocks it owns alone (anonymous, counted) and
// references to shared cached blocks: indices into cached, ref counted.
// Index 0 of cached is the sentinel of the lru list. kvPool is not safe for
// concurrent use.
type kvPool struct {
	total, used, idle int
	prefix            bool
	cached            []cblock   // cached blocks; [0] is the lru sentinel
	spare             []int32    // indices of unused entries of cached
	index             blockTable // hash -> index into cached
}

// cblock is a cached block: content known by hash, shared by ref
// sequences; ref == 0 means idle, on the lru list (prev, next: indices).
type cblock struct {
	hash       uint64
	ref        int32
	prev, next int32
}

// init makes p a pool of total blocks, with a prefix cache if prefix.
func (p *kvPool) init(total int, prefix bool) {
	*p = kvPool{total: total, prefix: prefix, cached: make([]cblock, 1)}
}

// reset frees every block and forgets every cached prefix.
func (p *kvPool) reset() {
	p.cached = p.cached[:1]
	p.cached[0] = cblock{}
	p.spare = p.spare[:0]
	p.index.clear()
	p.used, p.idle = 0, 0
}

// free is the number of allocatable blocks (empty and idle cached).
func (p *kvPool) free() int { return p.total - p.used }

// alloc takes n <= free() blocks for a sequence to own, evicting idle
// cached blocks when there are not enough empty ones.
func (p *kvPool) alloc(n int) {
	for empty := p.total - p.used - p.idle; n > empty; empty++ {
		p.evict()
	}
	p.used += n
}

// evict drops the least recently freed idle cached block.
func (p *kvPool) evict() {
	i := p.cached[0].next
	p.unlink(i)
	p.idle--
	p.index.remove(p.cached[i].hash)
	p.spare = append(p.spare, i)
}

// lookup counts the leading blocks of hashes (at most limit) found in the
// cache, and how many of those are idle (they leave the free count when
// acquired). It changes nothing.
func (p *kvPool) lookup(hashes []uint64, limit int) (hits, idle int) {
	if !p.prefix {
		return 0, 0
	}
	for _, h := range hashes[:min(limit, len(hashes))] {
		i := p.index.find(h)
		if i == 0 {
			break
		}
		hits++
		if p.cached[i].ref == 0 {
			idle++
		}
	}
	return hits, idle
}

// acquire references the cached block of hash h (which must exist).
func (p *kvPool) acquire(h uint64) int32 {
	i := p.index.find(h)
	p.ref(i)
	return i
}

// ref adds a reference to cached block i.
func (p *kvPool) ref(i int32) {
	b := &p.cached[i]
	if b.ref == 0 {
		p.unlink(i)
		p.idle--
		p.used++
	}
	b.ref++
}

// publish turns a block the sequence owns, just filled with the content of
// hash h, into a cached block and returns the sequence's reference to it.
// If another block already caches h, the sequence shares that one instead
// and its own block is freed.
func (p *kvPool) publish(h uint64) int32 {
	var i int32
	if n := len(p.spare); n > 0 {
		i = p.spare[n-1]
	} else {
		i = int32(len(p.cached))
	}
	if got := p.index.findOrInsert(h, i); got != i {
		p.used-- // our copy goes back empty
		p.ref(got)
		return got
	}
	if n := len(p.spare); n > 0 {
		p.spare = p.spare[:n-1]
		p.cached[i] = cblock{hash: h, ref: 1}
	} else {
		p.cached = append(p.cached, cblock{hash: h, ref: 1})
	}
	return i
}

// release drops one reference to cached block i; an unreferenced block
// becomes idle, the most recently freed.
func (p *kvPool) release(i int32) {
	b := &p.cached[i]
	b.ref--
	if b.ref > 0 {
		return
	}
	p.used--
	p.idle++
	last := p.cached[0].prev
	b.prev, b.next = last, 0
	p.cached[last].next = i
	p.cached[0].prev = i
}

// unlink removes cached block i from the lru list.
func (p *kvPool) unlink(i int32) {
	b := &p.cached[i]
	p.cached[b.prev].next = b.next
	p.cached[b.next].prev = b.prev
	b.prev, b.next = 0, 0
}
