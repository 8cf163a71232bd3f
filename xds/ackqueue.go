package xds

import "sync"

// ackQueue hands ACKs from the streams to the rollout loop without ever
// dropping one and without blocking a stream: it keeps at most one
// pending event per node, the latest. That loses nothing: what the loop
// does with an ACK (acked) reads the node's acknowledged versions from
// the tracker, not from the event, so the latest event of a node stands
// for all of them. Its memory is bounded by the number of nodes. Safe for
// concurrent use.
type ackQueue struct {
	mu      sync.Mutex
	pending []event
	index   map[nodeRef]int // node -> its event's position in pending
	spare   []event         // the previous batch's array, reused
	// wake has a token whenever pending is not empty (capacity 1).
	wake chan struct{}
}

func newACKQueue() *ackQueue {
	return &ackQueue{index: map[nodeRef]int{}, wake: make(chan struct{}, 1)}
}

// push queues e, replacing the node's pending event if it has one. O(1).
func (q *ackQueue) push(e event) {
	q.mu.Lock()
	if i, ok := q.index[e.ref]; ok {
		q.pending[i] = e
	} else {
		q.index[e.ref] = len(q.pending)
		q.pending = append(q.pending, e)
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default: // a token is already there
	}
}

// take returns every pending event, oldest node first, and empties the
// queue. The slice is valid until the next take.
func (q *ackQueue) take() []event {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.pending
	q.pending = q.spare[:0]
	q.spare = out
	clear(q.index)
	return out
}

// len is how many nodes have an event pending.
func (q *ackQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}
