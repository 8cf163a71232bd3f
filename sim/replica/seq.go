package replica

import "time"

// seq is a request inside the replica, vLLM's Request in v1 terms: it
// needs numTokens() tokens of KV and has computed of them; every step it is
// scheduled some more, and when computed catches up with numTokens the
// step samples its next output token.
type seq struct {
	req       Request
	arrival   time.Duration
	first     time.Duration // end of the step of the first token; 0 before
	computed  int           // tokens whose KV is in the cache (num_computed_tokens)
	generated int           // output tokens produced so far
	blocks    int           // KV blocks referenced: owned + len(shared)
	shared    []int32       // referenced prefix-cache blocks (kvPool.cached): Prefix[0:len(shared)]
	cached    int           // prompt tokens hit in the prefix cache at the last admission
	preempts  int
	sched     int   // tokens scheduled in the step in progress, 0 if none
	adapter   int32 // loraState id of req.Adapter; 0: the base model
	// adapterCost and adapterWait are Result.AdapterCost and AdapterWait.
	adapterCost, adapterWait time.Duration
}

// numTokens is the length of the sequence: prompt plus generated tokens.
func (s *seq) numTokens() int { return s.req.Prompt + s.generated }

// pending is the work left in scheduled tokens: what remains to compute
// to catch up (sampling the next token) plus one per further output token.
// It is Prompt + Output - 1 - computed whatever was generated.
func (s *seq) pending() int { return s.req.Prompt + s.req.Output - 1 - s.computed }

// result describes s as ending at done.
func (s *seq) result(done time.Duration, failed bool) Result {
	return Result{
		ID: s.req.ID, Tag: s.req.Tag, Adapter: s.req.Adapter,
		Arrival: s.arrival, FirstToken: s.first, Done: done,
		Prompt: s.req.Prompt, Output: s.generated, CachedPrompt: s.cached,
		Preemptions: s.preempts, AdapterCost: s.adapterCost, AdapterWait: s.adapterWait,
		Failed: failed,
	}
}

// seqQueue is the waiting queue: a FIFO ring of sequences that can also
// take one back at the front (a preempted sequence resumes first).
type seqQueue struct {
	buf  []*seq // len(buf) is a power of two or 0
	head int
	n    int
}

// len is the number of queued sequences.
func (q *seqQueue) len() int { return q.n }

// at returns the i-th sequence from the front, 0 <= i < len().
func (q *seqQueue) at(i int) *seq { return q.buf[(q.head+i)&(len(q.buf)-1)] }

// pushBack queues s last.
func (q *seqQueue) pushBack(s *seq) {
	q.grow()
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = s
	q.n++
}

// pushFront queues s first.
func (q *seqQueue) pushFront(s *seq) {
	q.grow()
	q.head = (q.head - 1) & (len(q.buf) - 1)
	q.buf[q.head] = s
	q.n++
}

// popFront removes and returns the first sequence; len() must be > 0.
func (q *seqQueue) popFront() *seq {
	s := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	return s
}

// remove deletes the i-th sequence from the front, keeping the order; it
// moves the fewer of the sequences before and after it.
func (q *seqQueue) remove(i int) {
	mask := len(q.buf) - 1
	if i < q.n/2 {
		for ; i > 0; i-- {
			q.buf[(q.head+i)&mask] = q.at(i - 1)
		}
		q.buf[q.head] = nil
		q.head = (q.head + 1) & mask
		q.n--
		return
	}
	for ; i+1 < q.n; i++ {
		q.buf[(q.head+i)&mask] = q.at(i + 1)
	}
	q.buf[(q.head+q.n-1)&mask] = nil
	q.n--
}

// grow makes room for one more sequence.
func (q *seqQueue) grow() {
	if q.n < len(q.buf) {
		return
	}
	buf := make([]*seq, max(16, 2*len(q.buf)))
	for i := range q.n {
		buf[i] = q.at(i)
	}
	q.buf, q.head = buf, 0
}
