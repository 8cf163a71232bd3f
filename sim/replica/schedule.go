package replica

import "time"

// startStep decides the composition of a step starting at r.now and
// reports whether there is one. It follows vLLM v1's
// Scheduler.schedule (vllm/v1/core/sched/scheduler.py), FCFS policy:
//
//  1. Running requests first, in admission order, while the token budget
//     lasts: each gets what it lacks to catch up (1 token when decoding,
//     the rest of its prompt, capped by the budget, when prefilling). If
//     the KV blocks for those tokens cannot be allocated, the last admitted
//     running request is preempted (self.running.pop(), then
//     _preempt_request: blocks freed, num_computed_tokens = 0, prepended to
//     the waiting queue), until the allocation fits or the request itself
//     was the one preempted.
//  2. Then, only if nobody was preempted in this step, waiting requests in
//     FIFO order while the budget lasts and fewer than MaxSeqs run: each
//     is given its prefix-cache hits (at most num_tokens-1 tokens, so that
//     at least one is computed) and a first chunk; it is admitted only if
//     the blocks for that chunk can be allocated, else admission stops
//     (head-of-line, as vLLM's FCFS). A request whose LoRA adapter would
//     make the batch hold more than MaxLoras adapters is skipped instead
//     and keeps its place (skipped_waiting_requests; see [LoRA]).
//  3. The adapters of the batch not in a GPU slot are loaded, which adds
//     to the step's time (see [LoRA]).
//
// The scheduled sequences end up as running[:nSched].
func (r *Replica) startStep() bool {
	budget, bs := r.p.MaxBatchedTokens, r.p.BlockSize
	tokens, context, n := 0, 0, 0
	preempted := false
	lora := r.lora.enabled()
	if lora {
		r.lora.beginStep()
	}
	for n < len(r.running) && budget > 0 {
		s := r.running[n]
		k := min(s.numTokens()-s.computed, budget)
		need := 0 // blocksFor(s.computed+k) - s.blocks, without dividing for a decode
		if room := s.blocks*bs - s.computed; k > room {
			need = (k - room + bs - 1) / bs
		}
		self := false
		for need > r.kv.free() {
			v := r.running[len(r.running)-1]
			r.running[len(r.running)-1] = nil
			r.running = r.running[:len(r.running)-1]
			r.preempt(v)
			preempted = true
			if self = v == s; self {
				break
			}
		}
		if self {
			break
		}
		r.kv.alloc(need)
		s.blocks += need
		if lora {
			r.lora.join(s.adapter)
		}
		if s.generated > 0 && s.computed+1 == s.numTokens() {
			context += s.numTokens() // a decoding sequence attends to all of it
		}
		s.sched = k
		budget -= k
		tokens += k
		n++
	}
	for i := 0; !preempted && r.state.serving() && i < r.waiting.len() && budget > 0 && len(r.running) < r.p.MaxSeqs; {
		s := r.waiting.at(i)
		if lora && !r.lora.admits(s.adapter) {
			r.lora.skipped = append(r.lora.skipped, s)
			i++
			continue
		}
		hits, idle := r.kv.lookup(s.req.Prefix, (s.numTokens()-1)/bs)
		computed := hits * bs
		k := min(s.numTokens()-computed, budget)
		need := r.blocksFor(computed+k) - hits
		if need+idle > r.kv.free() {
			break
		}
		r.waiting.remove(i)
		if lora {
			r.lora.join(s.adapter)
			r.lora.count(s.adapter, 1, -1)
		}
		for _, h := range s.req.Prefix[:hits] {
			s.shared = append(s.shared, r.kv.acquire(h))
		}
		r.kv.alloc(need)
		s.blocks = hits + need
		s.computed, s.cached = computed, min(computed, s.req.Prompt)
		r.pendingTokens -= computed
		if s.generated > 0 && s.computed+1 == s.numTokens() {
			context += s.numTokens()
		}
		s.sched = k
		budget -= k
		tokens += k
		n++
		r.running = append(r.running, s)
	}
	if n == 0 {
		return false
	}
	r.unadmitted = r.waiting.len()
	d := r.p.StepTime(tokens, context)
	if f := r.slowdown(r.now); f > 1 {
		d = time.Duration(float64(d) * f)
	}
	if lora && len(r.lora.batch) > 0 {
		if cost := r.lora.load(); cost > 0 {
			d += cost
			for _, s := range r.running[:n] {
				s.adapterCost += r.lora.ad[s.adapter].stepCost
			}
		}
	}
	if lora && len(r.lora.skipped) > 0 {
		for _, s := range r.lora.skipped {
			s.adapterWait += d
		}
		clear(r.lora.skipped)
		r.lora.skipped = r.lora.skipped[:0]
	}
	r.nSched, r.batchTokens, r.batchN = n, tokens, n
	r.stepping, r.stepEnd = true, r.now+d
	return true
}

// finishStep applies the step in progress at its end: every scheduled
// sequence has computed its tokens; one that caught up samples a token;
// one with all its output completes and is appended to out.
func (r *Replica) finishStep(out []Result) []Result {
	end := r.stepEnd
	r.now = end
	keep := 0
	for i, s := range r.running {
		if i < r.nSched {
			s.computed += s.sched
			r.pendingTokens -= s.sched
			s.sched = 0
			if len(s.shared) < len(s.req.Prefix) {
				r.publish(s)
			}
			if s.computed == s.numTokens() {
				if s.generated == 0 {
					s.first = end
					r.promptTokens += int64(s.req.Prompt)
				}
				r.generationTokens++
				if r.opts.OnToken != nil {
					r.opts.OnToken(s.req.ID, s.req.Tag, s.generated, end)
				}
				s.generated++
				if s.generated == s.req.Output {
					out = append(out, s.result(end, false))
					r.lora.count(s.adapter, -1, 0)
					r.releaseKV(s)
					r.recycle(s)
					continue
				}
			}
		}
		r.running[keep] = s
		keep++
	}
	clear(r.running[keep:])
	r.running = r.running[:keep]
	r.stepping, r.nSched, r.batchTokens, r.batchN = false, 0, 0, 0
	r.reported = r.unadmitted
	return out
}

// publish puts the prefix blocks s has just filled into the prefix cache.
func (r *Replica) publish(s *seq) {
	bs := r.p.BlockSize
	for j := len(s.shared); j < len(s.req.Prefix) && (j+1)*bs <= s.computed; j++ {
		s.shared = append(s.shared, r.kv.publish(s.req.Prefix[j]))
	}
}

// preempt frees s's blocks and puts it back at the front of the waiting
// queue, to be recomputed (prompt and generated tokens) when readmitted.
func (r *Replica) preempt(s *seq) {
	r.releaseKV(s)
	r.pendingTokens += s.computed
	s.computed, s.sched = 0, 0
	s.preempts++
	r.preemptions++
	r.lora.count(s.adapter, -1, 1)
	r.waiting.pushFront(s)
}

// releaseKV frees the blocks s owns and drops its references to cached
// ones, last block first (vLLM frees in reverse order so that the tail of
// a prefix is evicted before its head).
func (r *Replica) releaseKV(s *seq) {
	r.kv.used -= s.blocks - len(s.shared)
	for j := len(s.shared) - 1; j >= 0; j-- {
		r.kv.release(s.shared[j])
	}
	s.shared = s.shared[:0]
	s.blocks = 0
}

// failAll ends every request inside as Failed at now, aborting the step in
// progress, and empties the replica: KV cache and prefix cache included.
func (r *Replica) failAll(now time.Duration) []Result {
	var out []Result
	for _, s := range r.running {
		out = append(out, s.result(now, true))
		r.recycle(s)
	}
	for r.waiting.len() > 0 {
		s := r.waiting.popFront()
		out = append(out, s.result(now, true))
		r.recycle(s)
	}
	clear(r.running)
	r.running = r.running[:0]
	r.kv.reset()
	r.lora.reset()
	r.pendingTokens = 0
	r.stepping, r.nSched, r.batchTokens, r.batchN = false, 0, 0, 0
	r.reported, r.unadmitted = 0, 0
	r.now = max(r.now, now)
	return out
}

// slowdown is the step time factor of a step starting at t: above 1 only
// while Warming, decaying linearly over WarmupTime.
func (r *Replica) slowdown(t time.Duration) float64 {
	o := &r.opts
	if r.state != Warming || o.WarmupTime <= 0 || o.WarmupSlowdown <= 1 {
		return 1
	}
	left := 1 - float64(t-r.warmSince)/float64(o.WarmupTime)
	if left <= 0 {
		return 1
	}
	return 1 + (o.WarmupSlowdown-1)*min(left, 1)
}

// blocksFor is the number of blocks that hold tokens tokens.
func (r *Replica) blocksFor(tokens int) int { return (tokens + r.p.BlockSize - 1) / r.p.BlockSize }

// newSeq returns a fresh sequence for req arriving at now, recycled if
// possible.
func (r *Replica) newSeq(req Request, now time.Duration) *seq {
	var s *seq
	if n := len(r.spare); n > 0 {
		s, r.spare = r.spare[n-1], r.spare[:n-1]
	} else {
		s = new(seq)
	}
	s.req, s.arrival = req, now
	return s
}

// recycle keeps s, which holds no blocks, for a later request.
func (r *Replica) recycle(s *seq) {
	*s = seq{shared: s.shared[:0]}
	r.spare = append(r.spare, s)
}
