package picker

// cache is what ILB believes one replica's engine holds in its prefix
// cache: the hashes of the prompts ILB sent it, covering at most capacity
// blocks (a dense hash covers one, a sparse one SparseStride: the
// engine's cache holds tokens, not hashes), the least recently sent
// forgotten first.
//
// Eviction is an approximate LRU in O(1): every use of a block appends
// (hash, stamp) to a ring of 2 × capacity entries, and the map keeps each
// block's latest stamp. Popping the ring's oldest entry forgets its block
// only when that entry is the block's latest use; a block used since has
// a later entry. The ring is popped while the hashes held cover more
// than capacity blocks or the ring is full, so memory is bounded by
// capacity × (map entry + 2 ring entries).
//
// A prompt's blocks are recorded last first, so its earlier blocks are
// the more recent and are forgotten after its later ones: what the cache
// holds of a chain stays a prefix of it, as an engine's LRU keeps it
// (an engine frees a sequence's blocks tail first), and [cache.match] may
// binary-search it.
type cache struct {
	blocks map[uint64]uint64 // hash → stamp of its latest use
	stamp  uint64            // the last stamp taken
	ring   []use
	head   int // oldest entry
	n      int // entries in the ring
	cap    int // blocks
	held   int // blocks the hashes in blocks cover
}

// use is one recording of a hash, covering span blocks.
type use struct {
	hash, stamp uint64
	span        int
}

func newCache(capacity int) *cache {
	return &cache{blocks: make(map[uint64]uint64, min(capacity, 1024)), ring: make([]use, 2*capacity), cap: capacity}
}

// match returns how many leading blocks of chain the replica holds.
func (c *cache) match(chain []uint64) int {
	lo, hi := 0, len(chain) // blocks [0, lo) held; [hi, len) not
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if _, ok := c.blocks[chain[mid]]; ok {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// record notes that the replica was sent a prompt with these blocks,
// each taking the next stamp, earlier blocks later. A block used within
// the last capacity/2 stamps is not stamped again: it is far from
// eviction, and most of a conversation's turn is blocks its previous
// turn just sent.
func (c *cache) record(chain []uint64) {
	fresh := uint64(c.cap / 2)
	for i := len(chain) - 1; i >= 0; i-- {
		c.stamp++
		stamp := c.stamp
		h := chain[i]
		if s, ok := c.blocks[h]; ok && s+fresh >= stamp {
			continue
		}
		span := 1
		if i >= DenseBlocks {
			span = SparseStride
		}
		if _, ok := c.blocks[h]; !ok {
			c.held += span
		}
		c.blocks[h] = stamp
		if c.n == len(c.ring) {
			c.pop()
		}
		c.ring[(c.head+c.n)%len(c.ring)] = use{h, stamp, span}
		c.n++
		for c.held > c.cap && c.n > 0 {
			c.pop()
		}
	}
}

// pop drops the ring's oldest entry and forgets its block if that was
// the block's latest use.
func (c *cache) pop() {
	u := c.ring[c.head]
	c.head = (c.head + 1) % len(c.ring)
	c.n--
	if s, ok := c.blocks[u.hash]; ok && s == u.stamp {
		delete(c.blocks, u.hash)
		c.held -= u.span
	}
}

// size is the number of hashes held.
func (c *cache) size() int { return len(c.blocks) }
