package extproc

import "math"

// Tally counts the decision records the log stored after a point, by
// reason, without copying them: what a periodic sampler needs (the
// dashboard's shedding chart), at a cost of one map increment per new
// record under the log's lock.
type Tally struct {
	// Through is the sequence number of the newest record stored; pass it
	// as after to the next call.
	Through uint64
	// Records is how many records were counted; ByReason splits them by
	// their reason code (weighted, session, redrawn, steered, shed,
	// overloaded, no_capacity, model_not_found, ...).
	Records  int
	ByReason map[string]int
	// Lost is how many records were stored after the point but evicted
	// before this call (more than the log keeps): not counted.
	Lost int
}

// TallyStart is the after value that counts nothing and returns where the
// log is: the first call of a sampler.
const TallyStart uint64 = math.MaxUint64

// Tally counts the records stored after sequence number after (0: every
// record kept; TallyStart: none).
func (l *Log) Tally(after uint64) Tally {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := Tally{Through: l.added, ByReason: map[string]int{}}
	if after >= l.added {
		return t
	}
	n := l.added - after
	kept := min(n, uint64(l.n)) // records are stored in sequence: the newest l.n are kept
	t.Lost = int(n - kept)
	for i := range int(kept) {
		t.Records++
		t.ByReason[l.at(i).Reason]++
	}
	return t
}
