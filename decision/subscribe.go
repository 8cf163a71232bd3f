package decision

import (
	"context"
	"slices"
	"sync"
)

// DefaultSubscriptionBuffer is the buffer of a subscription when
// Subscribe is given size < 1.
const DefaultSubscriptionBuffer = 256

// Subscription receives copies of the records that complete after
// Subscribe and match its filter, in completion order. Its buffer is
// bounded: when the reader falls behind, new records are dropped (never
// the request path blocked) and counted.
type Subscription struct {
	f Filter
	c chan Delivery

	// mu guards dropped and closed, and orders every send on c before
	// its close. Writers hold it for one non-blocking send.
	mu      sync.Mutex
	dropped uint64 // dropped since the last delivery
	closed  bool
}

// Delivery is one record of a subscription, and how many matching records
// were dropped just before it because the buffer was full.
type Delivery struct {
	Record        Record
	DroppedBefore uint64
}

// Subscribe returns a subscription to the records that complete from now
// on and match f, with a buffer of size records (< 1: the default). A
// record completes when Envoy's response headers come back, or at once
// when ILB answers the request itself (a rejection); a record whose
// response never comes (the client went away first) is kept by Find but
// never sent. When ctx is done the subscription ends: Records is closed
// and the log forgets it. No goroutine is started.
func (l *Log) Subscribe(ctx context.Context, f Filter, size int) *Subscription {
	if size < 1 {
		size = DefaultSubscriptionBuffer
	}
	s := &Subscription{f: f, c: make(chan Delivery, size)}
	l.setSubs(func(subs []*Subscription) []*Subscription { return append(subs, s) })
	context.AfterFunc(ctx, func() {
		l.setSubs(func(subs []*Subscription) []*Subscription {
			return slices.DeleteFunc(subs, func(o *Subscription) bool { return o == s })
		})
		s.mu.Lock()
		defer s.mu.Unlock()
		s.closed = true
		close(s.c)
	})
	return s
}

// setSubs replaces the subscriptions with edit applied to a copy of them.
func (l *Log) setSubs(edit func([]*Subscription) []*Subscription) {
	l.subsMu.Lock()
	defer l.subsMu.Unlock()
	var cur []*Subscription
	if p := l.subs.Load(); p != nil {
		cur = slices.Clone(*p)
	}
	next := edit(cur)
	l.subs.Store(&next)
}

// subscriptions returns the current subscriptions; the slice is shared
// and must not be changed.
func (l *Log) subscriptions() []*Subscription {
	if p := l.subs.Load(); p != nil {
		return *p
	}
	return nil
}

// Records delivers the records; it is closed when the subscription's
// context is done.
func (s *Subscription) Records() <-chan Delivery { return s.c }

// Dropped returns how many records were dropped, because the buffer was
// full, after the last one delivered (the next delivery would carry them
// as DroppedBefore), and resets the count. A reader that has emptied the
// buffer can report them at once.
func (s *Subscription) Dropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.dropped
	s.dropped = 0
	return n
}

// publish sends a copy of the completed record r to every matching
// subscriber without blocking.
func (l *Log) publish(r *Record) {
	for _, s := range l.subscriptions() {
		if s.f.Match(r) {
			s.deliver(r)
		}
	}
}

// deliver sends a copy of r unless the buffer is full (then it counts a
// drop) or the subscription has ended.
func (s *Subscription) deliver(r *Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	select {
	case s.c <- Delivery{Record: r.copy(), DroppedBefore: s.dropped}:
		s.dropped = 0
	default:
		s.dropped++
	}
}
