package experiment

import (
	"container/heap"
	"time"
)

// kind orders simultaneous events: scenario changes, then signals, then
// controller ticks, then replica steps, then deliveries, then arrivals.
type kind uint8

const (
	evScenario  kind = iota
	evLifecycle      // a replica's startup or warm-up ends, or Envoy notices its crash
	evSignals
	evTick
	evStep
	evDeliver
	evArrival
	evWindow
)

type event struct {
	at   time.Duration
	kind kind
	seq  uint64 // FIFO among equals: deterministic
	i    int    // replica, pending delivery or scenario event index
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(a, b int) bool {
	if q[a].at != q[b].at {
		return q[a].at < q[b].at
	}
	if q[a].kind != q[b].kind {
		return q[a].kind < q[b].kind
	}
	return q[a].seq < q[b].seq
}
func (q eventQueue) Swap(a, b int) { q[a], q[b] = q[b], q[a] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// clock is the event queue and the current virtual time.
type clock struct {
	now time.Duration
	q   eventQueue
	seq uint64
}

func (c *clock) at(t time.Duration, k kind, i int) {
	c.seq++
	heap.Push(&c.q, event{at: t, kind: k, seq: c.seq, i: i})
}

func (c *clock) next() (event, bool) {
	if len(c.q) == 0 {
		return event{}, false
	}
	e := heap.Pop(&c.q).(event)
	c.now = e.at
	return e, true
}
