package demand

import (
	"math"
	"sync"
	"sync/atomic"
)

// Typical learns, per demand stream (source, model, priority), what a
// request the engines served cost: the running mean of the demand its
// requests finally counted (their provisional share and what their
// engines confirmed), over about the last TypicalWindow of them. It is
// evidence the engines gave, not a client's claim: a client can raise it
// only by sending requests the engines serve. Safe for concurrent use;
// Of is lock-free.
type Typical struct {
	mu      sync.Mutex
	streams sync.Map // Key → *typicalMean
	n       int      // streams held, under mu
}

// TypicalWindow is how many recent served requests the mean follows.
const TypicalWindow = 64

// maxTypicalStreams bounds the streams learned: sources × models ×
// priorities of a configuration; keys past it are not learned.
const maxTypicalStreams = 4096

type typicalMean struct {
	mu   sync.Mutex
	n    int
	mean float64
	bits atomic.Uint64 // mean, for lock-free reads
}

// NewTypical learns nothing yet.
func NewTypical() *Typical { return &Typical{} }

// Observe counts one served request of k that counted cost (finite,
// >= 0; others are ignored).
func (t *Typical) Observe(k Key, cost float64) {
	if !(cost >= 0) || math.IsInf(cost, 0) {
		return
	}
	v, ok := t.streams.Load(k)
	if !ok {
		t.mu.Lock()
		if v, ok = t.streams.Load(k); !ok {
			if t.n >= maxTypicalStreams {
				t.mu.Unlock()
				return
			}
			v, _ = t.streams.LoadOrStore(k, &typicalMean{})
			t.n++
		}
		t.mu.Unlock()
	}
	m := v.(*typicalMean)
	m.mu.Lock()
	m.n = min(m.n+1, TypicalWindow)
	m.mean += (cost - m.mean) / float64(m.n)
	m.bits.Store(math.Float64bits(m.mean))
	m.mu.Unlock()
}

// Of is the typical cost of a served request of k; 0 before any.
func (t *Typical) Of(k Key) float64 {
	if t == nil {
		return 0
	}
	v, ok := t.streams.Load(k)
	if !ok {
		return 0
	}
	return math.Float64frombits(v.(*typicalMean).bits.Load())
}
