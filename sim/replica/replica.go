package replica

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// ErrInvalidOptions is wrapped by every problem [New] reports.
var ErrInvalidOptions = errors.New("replica: invalid options")

// Options configure a [Replica].
type Options struct {
	// Profile is the performance model; it must be valid (see
	// [Profile.Validate]).
	Profile Profile
	// PrefixCache enables automatic prefix caching (vLLM's
	// --enable-prefix-caching): blocks of [Request.Prefix] already cached
	// are not prefilled again.
	PrefixCache bool
	// Name identifies the replica in logs and errors; free form.
	Name string
	// StartupTime is how long the engine takes from Starting to serving
	// (loading weights, capturing CUDA graphs); >= 0. The replica does not
	// act on it: it is there for the caller that drives the lifecycle.
	StartupTime time.Duration
	// WarmupTime is how long the Warming slowdown lasts; >= 0 (0: none).
	WarmupTime time.Duration
	// WarmupSlowdown is the step time factor on entering Warming, decaying
	// linearly to 1 over WarmupTime; 0 means 1 (no slowdown), else >= 1.
	WarmupSlowdown float64
	// LoRA configures LoRA adapters; the zero value disables them.
	LoRA LoRA
	// OnToken, if not nil, is called during Advance (and the calls that
	// advance time: Submit, SetState, Cancel) for every token produced, in
	// step order, with the request's ID and Tag, the token's index from 0
	// and the end of the step that produced it. It must not call the
	// Replica. Nil costs nothing.
	OnToken func(id uint64, tag any, index int, at time.Duration)
}

func (o *Options) validate() error {
	var errs []error
	if err := o.Profile.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: Profile: %w", ErrInvalidOptions, err))
	}
	if o.StartupTime < 0 {
		errs = append(errs, fmt.Errorf("%w: StartupTime %v: want >= 0", ErrInvalidOptions, o.StartupTime))
	}
	if o.WarmupTime < 0 {
		errs = append(errs, fmt.Errorf("%w: WarmupTime %v: want >= 0", ErrInvalidOptions, o.WarmupTime))
	}
	if s := o.WarmupSlowdown; s != 0 && (s < 1 || math.IsInf(s, 0)) || math.IsNaN(s) {
		errs = append(errs, fmt.Errorf("%w: WarmupSlowdown %v: want 0 or a finite factor >= 1", ErrInvalidOptions, s))
	}
	errs = append(errs, o.LoRA.validate()...)
	return errors.Join(errs...)
}

// Replica is an iteration-level model of one vLLM-like engine replica in
// virtual time; see the package doc for the model and the time semantics.
// It is deterministic: the same calls give the same results. A Replica is
// not safe for concurrent use.
type Replica struct {
	opts  Options
	p     Profile // with defaults
	state State
	// warmSince is when the replica entered Warming.
	warmSince time.Duration

	// now is the time of the last event: the end of the last step, or a
	// later Submit or SetState while idle. The next step starts at now.
	now      time.Duration
	stepping bool
	stepEnd  time.Duration
	nSched   int // the step's sequences are running[:nSched]
	// reported is the waiting count the engine's metrics show: its
	// scheduler's queue at the end of the last step; unadmitted, the
	// queue the step in progress left (see Load.ReportedWaiting).
	reported, unadmitted int
	batchTokens, batchN  int // the step's tokens and sequences, for Load

	running []*seq // admission order; vLLM preempts from the end
	waiting seqQueue
	kv      kvPool
	lora    loraState
	spare   []*seq // recycled sequences

	pending   []Result      // results of Submit, SetState and Cancel, for the next Advance
	pendingAt time.Duration // the latest Done in pending

	pendingTokens int
	preemptions   int
	// promptTokens and generationTokens count as vLLM's counters do: a
	// request's prompt once, when its first token is sampled; every token
	// sampled.
	promptTokens, generationTokens int64
}

// New returns a Ready, empty replica; every problem of o is reported at
// once (errors.Join), each wrapping [ErrInvalidOptions] and naming the
// field.
func New(o Options) (*Replica, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	p := o.Profile.withDefaults()
	r := &Replica{opts: o, p: p, state: Ready, running: make([]*seq, 0, p.MaxSeqs)}
	r.kv.init(p.KVBlocks(), o.PrefixCache)
	r.lora.init(o.LoRA)
	return r, nil
}

// Profile returns the replica's profile, defaults applied.
func (r *Replica) Profile() Profile { return r.p }

// State returns the lifecycle state.
func (r *Replica) State() State { return r.state }

// Submit queues req, arriving at now; it may start at the next step (a
// step in progress is not changed). now must not be before the now of an
// earlier call. A request the replica refuses (see [Result.Failed]) comes
// back Failed from the next Advance, with Done = now.
func (r *Replica) Submit(now time.Duration, req Request) {
	r.catchUp(now)
	req.Prompt, req.Output = max(1, req.Prompt), max(1, req.Output)
	if !r.opts.PrefixCache {
		req.Prefix = nil
	} else if n := req.Prompt / r.p.BlockSize; len(req.Prefix) > n {
		req.Prefix = req.Prefix[:n]
	}
	s := r.newSeq(req, now)
	if !r.state.accepting() || r.blocksFor(req.Prompt+req.Output) > r.kv.total ||
		req.Adapter != "" && !r.lora.enabled() {
		r.addPending(s.result(now, true))
		r.recycle(s)
		return
	}
	if req.Adapter != "" {
		s.adapter = r.lora.id(req.Adapter)
		r.lora.count(s.adapter, 0, 1)
	}
	r.waiting.pushBack(s)
	r.pendingTokens += s.pending()
}

// Next returns when the step in progress ends, starting one at the
// current time if the replica is idle and has work it may schedule;
// busy is false when there is no such step (at is then the current time).
// Results waiting to be collected (see Submit) count as an event at the
// time they happened.
func (r *Replica) Next() (at time.Duration, busy bool) {
	if len(r.pending) > 0 {
		return r.pendingAt, true
	}
	if !r.stepping && !r.startStep() {
		return r.now, false
	}
	return r.stepEnd, true
}

// Advance runs every step that ends at or before until, starting steps as
// the scheduler would, and appends to out the requests that completed
// (and those that failed or were refused since the last Advance), in the
// order they ended. It does not allocate when out has room.
func (r *Replica) Advance(until time.Duration, out []Result) []Result {
	if len(r.pending) > 0 {
		out = append(out, r.pending...)
		clear(r.pending)
		r.pending = r.pending[:0]
	}
	return r.run(until, out)
}

// Load returns the replica's state in O(1).
func (r *Replica) Load() Load {
	return Load{
		State:           r.state,
		Waiting:         r.waiting.len(),
		ReportedWaiting: min(r.reported, r.waiting.len()),
		Running:         len(r.running),
		KVUsage:         float64(r.kv.used) / float64(r.kv.total),
		KVBlocksUsed:    r.kv.used,
		KVBlocks:        r.kv.total,
		PendingTokens:   r.pendingTokens,
		Preemptions:     r.preemptions,
		PromptTokens:    r.promptTokens, GenerationTokens: r.generationTokens,
		BatchTokens: r.batchTokens,
		BatchSeqs:   r.batchN,
	}
}

// SetState moves the replica to state s at now, after running the steps
// that end by then. Entering Failed aborts the step in progress and
// returns every request inside as a Failed result (Done = now); otherwise
// it returns nil. Values other than the State constants are ignored.
func (r *Replica) SetState(now time.Duration, s State) []Result {
	if s < Starting || s > Failed {
		return nil
	}
	r.catchUp(now)
	if s == Warming && r.state != Warming {
		r.warmSince = now
	}
	r.state = s
	if s != Failed {
		return nil
	}
	return r.failAll(now)
}

// Cancel removes the request with id (the client went away) at now,
// after running the steps that end by then: its KV blocks and its slot are
// free at once; a step in progress keeps its duration. No result is
// produced for it. It reports whether the request was found.
func (r *Replica) Cancel(now time.Duration, id uint64) bool {
	r.catchUp(now)
	for i, s := range r.running {
		if s.req.ID != id {
			continue
		}
		r.releaseKV(s)
		r.pendingTokens -= s.pending()
		r.lora.count(s.adapter, -1, 0)
		r.running = slices.Delete(r.running, i, i+1)
		if i < r.nSched {
			r.nSched--
		}
		r.recycle(s)
		return true
	}
	for i := range r.waiting.len() {
		if s := r.waiting.at(i); s.req.ID == id {
			r.pendingTokens -= s.pending()
			r.lora.count(s.adapter, 0, -1)
			r.waiting.remove(i)
			r.recycle(s)
			return true
		}
	}
	return false
}

// catchUp runs the steps that end by now, keeping their results for the
// next Advance, and moves an idle replica's clock to now.
func (r *Replica) catchUp(now time.Duration) {
	r.pending = r.run(now, r.pending)
	if n := len(r.pending); n > 0 {
		r.pendingAt = max(r.pendingAt, r.pending[n-1].Done)
	}
	if !r.stepping && now > r.now {
		r.now = now
	}
}

// addPending keeps res for the next Advance.
func (r *Replica) addPending(res Result) {
	r.pending = append(r.pending, res)
	r.pendingAt = max(r.pendingAt, res.Done)
}

// run runs the steps that end by until, appending results to out. A step
// is started here only if it starts before until (one starting at until
// is left for Next, so that requests submitted at until can join it).
func (r *Replica) run(until time.Duration, out []Result) []Result {
	for {
		if !r.stepping && (r.now >= until || !r.startStep()) {
			return out
		}
		if r.stepEnd > until {
			return out
		}
		out = r.finishStep(out)
	}
}
