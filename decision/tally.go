package decision

import "math"

// Tally counts the decision records the log stored after a point, by
// reason, without copying them: what a periodic sampler needs (the
// dashboard's shedding chart), at a cost of one map increment per new
// record, without blocking writers.
type Tally struct {
	// Through is the sequence number of the newest record stored; pass it
	// as after to the next call.
	Through uint64
	// Records is how many records were counted; ByReason splits them by
	// their reason code (RoutedReasons, then shed, overloaded,
	// no_capacity, model_not_found, ...).
	Records  int
	ByReason map[string]int
	// Lost is how many records were stored after the point but evicted
	// before this call (more than the log keeps): not counted.
	Lost int
}

// The reason codes of routed requests; every other reason is a refusal
// or an answer of ILB's own (shed, overloaded, no_capacity, models, ...).
const (
	ReasonWeighted = "weighted" // a random draw over the weights
	ReasonSession  = "session"  // the session key's hash: sticky
	ReasonRedrawn  = "redrawn"  // the drawn cluster is excluded now: drawn again among the rest
	// ReasonBalanced: another cluster would begin the request sooner,
	// round trip included (join the shortest queue).
	ReasonBalanced = "balanced"
	ReasonSteered  = "steered" // moved off a queued cluster by graded steering
	// ReasonWithinTarget: the cluster it was going to could not give its
	// first token within controller.capacity.ttft_target (its queue plus
	// this prompt's prefill there); another could.
	ReasonWithinTarget = "within_target"
)

// RoutedReasons are the reason codes of routed requests.
var RoutedReasons = [...]string{ReasonWeighted, ReasonSession, ReasonRedrawn, ReasonBalanced, ReasonWithinTarget, ReasonSteered}

// Routed is how many of the records counted were routed.
func (t Tally) Routed() int {
	n := 0
	for _, r := range RoutedReasons {
		n += t.ByReason[r]
	}
	return n
}

// TallyStart is the after value that counts nothing and returns where the
// log is: the first call of a sampler.
const TallyStart uint64 = math.MaxUint64

// Tally counts the records stored after sequence number after (0: every
// record kept; TallyStart: none).
func (l *Log) Tally(after uint64) Tally {
	through, oldest := l.added.Load(), l.oldest.Load()
	t := Tally{Through: through, ByReason: map[string]int{}}
	if after >= through {
		return t
	}
	// Records are stored in sequence: those after the point and still kept
	// are the newest ones.
	for seq := through; seq > after && seq >= oldest; seq-- {
		if e := l.load(seq); e != nil {
			t.Records++
			t.ByReason[e.str(strReason, &l.in)]++
		}
	}
	t.Lost = int(through-after) - t.Records
	return t
}
