package decision

import (
	"sync"
	"sync/atomic"

	"github.com/ilbproject/ilb/internal/bound"
)

// Log keeps the most recent decision records, indexed by request id:
// at most a number of records and an estimated number of bytes, the
// oldest evicted first. Safe for concurrent use. A record is stored when
// ILB decides and completed when the response headers come back; readers
// get copies. Subscribers get each record once, when it completes (see
// Subscribe).
//
// Nothing on the request path waits for a reader. A stored record is
// immutable: its slot in the ring is an atomic pointer to its latest
// version, and an update stores a new version (copy on write). Readers
// (Get, Find, Recent, Tally) load slots and take no lock at all. Writers
// serialise among themselves only for the few instructions of an add
// (sequence number, eviction); an update takes no lock. There is no index
// by request id to maintain: Get scans the records kept, newest first.
type Log struct {
	// ring holds the latest version of record seq in slot seq % len(ring),
	// nil once evicted. The records kept are those with Seq in
	// [oldest, added]; a reader that finds a slot nil or holding another
	// Seq skips it (evicted or reused meanwhile).
	ring     []atomic.Pointer[entry]
	added    atomic.Uint64 // records ever stored: the sequence number of the newest
	oldest   atomic.Uint64 // sequence number of the oldest record kept (added+1: none)
	bytes    atomic.Int64  // estimated size of the records kept
	maxBytes int64
	// in interns the strings that repeat across records (entry).
	in interner

	// wmu serialises adds: sequence numbers and eviction. No reader
	// takes it.
	wmu sync.Mutex

	// subs is the current subscriptions, an immutable slice replaced
	// under subsMu when one comes or goes; publish only loads it.
	subsMu sync.Mutex
	subs   atomic.Pointer[[]*Subscription]
}

// NewLog returns a log of at most size records (>= 1) and maxBytes bytes
// (an estimate of the records' memory; < 1: no byte bound).
func NewLog(size int, maxBytes int64) *Log {
	size = max(size, 1)
	l := &Log{ring: make([]atomic.Pointer[entry], size), maxBytes: maxBytes}
	l.oldest.Store(1)
	return l
}

// slot is the ring slot of sequence number seq.
func (l *Log) slot(seq uint64) *atomic.Pointer[entry] { return &l.ring[seq%uint64(len(l.ring))] }

// load returns the kept record of sequence number seq, nil if it is not
// kept (evicted, or not stored yet).
func (l *Log) load(seq uint64) *entry {
	if e := l.slot(seq).Load(); e != nil && e.seq == seq {
		return e
	}
	return nil
}

// Add stores r, evicting the oldest records while the log is full in
// records or in bytes, and sets r.Seq. A record with the id of a kept one
// hides it from Get. A record added complete (ILB answered it
// itself) goes to the subscribers now. The log keeps r compactly (an
// entry), never r itself: r stays its writer's, who changes it with
// Update. r's strings must be bounded by its producer; its Candidates,
// Replica and Generated are shared with the log and readers from now on
// and must not be changed (replace them).
func (l *Log) Add(r *Record) {
	e := encodeHinted(r, &l.in, nil, l.load(l.added.Load())) // the newest record's codes: most values repeat
	l.wmu.Lock()
	seq := l.added.Load() + 1
	r.Seq, e.seq = seq, seq
	for kept := seq - l.oldest.Load(); kept > 0 && (kept == uint64(len(l.ring)) || l.maxBytes > 0 && l.bytes.Load()+int64(e.size) > l.maxBytes); kept-- {
		l.evictOldest()
	}
	l.slot(seq).Store(e)
	l.bytes.Add(int64(e.size))
	l.added.Store(seq)
	l.wmu.Unlock()
	r.stored = e
	if r.Complete {
		l.publish(r)
	}
}

// evictOldest drops the oldest record kept. Called with l.wmu held and
// at least one record kept.
func (l *Log) evictOldest() {
	seq := l.oldest.Load()
	old := l.slot(seq).Swap(nil)
	l.oldest.Store(seq + 1)
	if old != nil {
		// The latest version's size: an update that raced this swap either
		// stored its version first (counted here) or failed (counted
		// nowhere).
		l.bytes.Add(-int64(old.size))
	}
}

// Update applies f to r, a record Add stored, and stores the new version
// in its place if it is still kept (records already evicted are updated
// harmlessly); it returns r. Only the request's own goroutine updates its
// record. f must not change what Add shares (Candidates, Replica,
// Generated: replace them). When f completes the record, it goes to the
// subscribers.
func (l *Log) Update(r *Record, f func(*Record)) *Record {
	was := r.Complete
	f(r)
	old := r.stored
	e := encode(r, &l.in, old)
	r.stored = e
	if old != nil && l.slot(r.Seq).CompareAndSwap(old, e) { // still kept: its size counts
		l.bytes.Add(int64(e.size - old.size))
	}
	if r.Complete && !was {
		l.publish(r)
	}
	return r
}

// Bytes is the estimated size of the records kept.
func (l *Log) Bytes() int64 { return l.bytes.Load() }

// Get returns a copy of the newest record of a request id. The id is
// bounded as ILB bounds the ids it stores, so the id a client got back
// finds its record even when it was cut. It scans the records kept,
// newest first (at most the log's size: about 0.1 ms for 10,000),
// without blocking writers: for the admin API and explain, not for the
// request path.
func (l *Log) Get(id string) (Record, bool) {
	id = bound.String(id, bound.Name)
	for seq, lo := l.added.Load(), l.oldest.Load(); seq >= lo && seq > 0; seq-- {
		if e := l.load(seq); e != nil && e.is(strRequestID, id, &l.in) {
			return e.decode(&l.in), true
		}
	}
	return Record{}, false
}

// Recent returns copies of up to n most recent records, newest first.
func (l *Log) Recent(n int) []Record { return l.Find(Filter{}, n) }

// Find returns copies of up to n most recent records that match f, newest
// first, complete or not (with f.Before, only those stored before that
// sequence number: the next page). It visits at most the records kept
// (the log's size) and copies at most n, without blocking writers:
// records stored or evicted while it runs may or may not be seen.
func (l *Log) Find(f Filter, n int) []Record {
	hi, lo := l.added.Load(), l.oldest.Load()
	if f.Before != 0 {
		hi = min(hi, f.Before-1)
	}
	if n < 1 || hi < lo {
		return nil
	}
	out := make([]Record, 0, min(uint64(n), hi-lo+1, 1024))
	for seq := hi; seq >= lo && len(out) < n; seq-- {
		if e := l.load(seq); e != nil && f.matchEntry(e, &l.in) {
			out = append(out, e.decode(&l.in))
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
