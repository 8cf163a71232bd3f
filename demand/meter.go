package demand

import (
	"sync"
	"time"
)

// Meter counts demand on the request path. Safe for concurrent use; Add
// and AddCost cost one short critical section.
type Meter struct {
	mu     sync.Mutex
	counts map[Key]Counts
	since  time.Time
}

// NewMeter starts counting at now.
func NewMeter(now time.Time) *Meter { return &Meter{counts: map[Key]Counts{}, since: now} }

// Add counts one request of key with estimated token cost (finite, >= 0:
// the caller caps its estimate by the model's limits); shed says ILB
// answered it itself (429/503) instead of routing it. Shed requests are
// demand too: planning on admitted requests only would stop shedding and
// start again in a loop.
func (m *Meter) Add(key Key, cost float64, shed bool) {
	c := Counts{Requests: 1, TokenCost: cost}
	if shed {
		c.Shed, c.ShedCost = 1, cost
	}
	m.add(key, c)
}

// AddCost adds token cost (finite, >= 0) to key's stream without
// counting a request: the confirmed remainder of a request that Add
// counted earlier with its provisional cost — possibly in an earlier
// interval, so a report may carry more cost than its own requests
// explain (the aggregator bounds cost by rate, not per request). It is
// just more TokenCost of that stream in the current interval.
func (m *Meter) AddCost(key Key, cost float64) {
	m.add(key, Counts{TokenCost: cost})
}

func (m *Meter) add(key Key, c Counts) {
	m.mu.Lock()
	sum := m.counts[key]
	sum.add(c)
	m.counts[key] = sum
	m.mu.Unlock()
}

// Flush returns the counts since the last flush and the interval they
// cover, and starts a new interval at now.
func (m *Meter) Flush(now time.Time) (map[Key]Counts, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out, d := m.counts, now.Sub(m.since)
	m.counts, m.since = make(map[Key]Counts, len(out)), now
	return out, d
}
