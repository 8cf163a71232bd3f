package replica

// blockTable maps block hashes to indices (> 0) of cached blocks: an
// open-addressing hash table with linear probing and backward-shift
// deletion (no tombstones), at most half full. It replaces a Go map on the
// prefix cache's hot path, where every prompt block is looked up,
// inserted and evicted once: lookups probe one or two adjacent slots and
// the table holds no pointers for the garbage collector to scan. It never
// iterates, so nothing depends on its order.
type blockTable struct {
	slots []tableSlot // len is 0 or a power of two
	shift uint        // 64 - log2(len(slots))
	n     int         // occupied slots
}

// tableSlot is one slot; idx == 0 means empty.
type tableSlot struct {
	hash uint64
	idx  int32
}

// home is the preferred slot of hash h (Fibonacci hashing: the caller's
// hashes need not be well mixed).
func (t *blockTable) home(h uint64) int {
	return int((h * 0x9e3779b97f4a7c15) >> t.shift)
}

// find returns the index stored for h, or 0.
func (t *blockTable) find(h uint64) int32 {
	if t.n == 0 {
		return 0
	}
	mask := len(t.slots) - 1
	for i := t.home(h); ; i = (i + 1) & mask {
		s := t.slots[i]
		if s.idx == 0 || s.hash == h {
			return s.idx
		}
	}
}

// findOrInsert returns the index stored for h, storing idx (> 0) first if
// there is none.
func (t *blockTable) findOrInsert(h uint64, idx int32) int32 {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	mask := len(t.slots) - 1
	for i := t.home(h); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.idx == 0 {
			*s = tableSlot{hash: h, idx: idx}
			t.n++
			return idx
		}
		if s.hash == h {
			return s.idx
		}
	}
}

// remove deletes h, which must be present, shifting back the entries of
// its probe run so that every entry stays reachable from its home.
func (t *blockTable) remove(h uint64) {
	mask := len(t.slots) - 1
	i := t.home(h)
	for t.slots[i].hash != h || t.slots[i].idx == 0 {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; t.slots[j].idx != 0; j = (j + 1) & mask {
		// The entry at j may fill the hole at i unless its home lies
		// cyclically in (i, j].
		if (j-t.home(t.slots[j].hash))&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = tableSlot{}
	t.n--
}

// clear empties the table, keeping its slots.
func (t *blockTable) clear() {
	clear(t.slots)
	t.n = 0
}

// grow doubles the table (to 1024 slots at first) and reinserts.
func (t *blockTable) grow() {
	old := t.slots
	size := max(1024, 2*len(old))
	t.slots = make([]tableSlot, size)
	t.shift = 64
	for s := size; s > 1; s >>= 1 {
		t.shift--
	}
	t.n = 0
	for _, s := range old {
		if s.idx != 0 {
			t.findOrInsert(s.hash, s.idx)
		}
	}
}
