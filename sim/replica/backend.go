package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ilbproject/ilb/sim/engine"
)

// ErrClosed is returned by [Backend.Generate] after [Backend.Close].
var ErrClosed = errors.New("replica: backend closed")

// ErrLoRADisabled is wrapped by the error [Backend.Generate] returns for a
// request with an adapter when LoRA is disabled (vLLM refuses it: "LoRA is
// not enabled").
var ErrLoRADisabled = errors.New("replica: LoRA disabled")

// Clock is the time source of a [Backend]. It must be safe for concurrent
// use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d, or until ctx is done, in which case it returns
	// ctx's error.
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock returns the wall clock.
func RealClock() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Backend runs a [Replica] in real time behind sim/engine's server: it
// implements [engine.Backend]. The model's time is the clock's time since
// NewBackend. A goroutine, started when there is work and ending when the
// replica is idle (or at Close), sleeps until the end of each step and
// then hands the tokens of that step to their requests: one per decoding
// request, the first when a prefill completes. Each request's channel is
// fed by its own goroutine, so a slow reader never delays the model.
//
// A request whose context ends is cancelled in the model at once (its KV
// blocks and slot are freed) before its channel closes; a request that
// completes has left the model before its last token is sent. So once a
// consumer sees its channel closed, [Backend.Load] no longer counts it.
// A Backend is safe for concurrent use.
type Backend struct {
	clock  Clock
	start  time.Time
	ctx    context.Context // the stepping goroutine's; cancelled by Close
	cancel context.CancelFunc
	loops  sync.WaitGroup

	mu       sync.Mutex
	model    *Replica
	nextID   uint64
	looping  bool // the stepping goroutine runs
	closed   bool
	results  []Result      // reused by collect
	adapters []AdapterLoad // reused by LoRALoad
}

var (
	_ engine.Backend      = (*Backend)(nil)
	_ engine.LoRAReporter = (*Backend)(nil)
)

// stream is the progress of one request, shared by the stepping goroutine
// (which counts tokens) and the request's forwarding goroutine.
type stream struct {
	mu       sync.Mutex
	produced int  // tokens produced by the model so far
	ended    bool // no more tokens will come (completed, failed or cancelled)
	wake     chan struct{}
}

// bump records a token (or the end) and wakes the forwarder.
func (s *stream) bump(token bool) {
	s.mu.Lock()
	if token {
		s.produced++
	} else {
		s.ended = true
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// progress returns the tokens produced and whether the stream ended.
func (s *stream) progress() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.produced, s.ended
}

// NewBackend returns a Backend modelling a replica of o on clock (nil:
// [RealClock]). o.OnToken, if set, is called too, under the Backend's lock.
// The error reports invalid options, as [New].
func NewBackend(o Options, clock Clock) (*Backend, error) {
	if clock == nil {
		clock = RealClock()
	}
	user := o.OnToken
	o.OnToken = func(id uint64, tag any, index int, at time.Duration) {
		if st, ok := tag.(*stream); ok {
			st.bump(true)
		}
		if user != nil {
			user(id, tag, index, at)
		}
	}
	m, err := New(o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Backend{clock: clock, start: clock.Now(), ctx: ctx, cancel: cancel, model: m}, nil
}

// Generate implements [engine.Backend]. A prompt of 0 tokens counts as 1.
func (b *Backend) Generate(ctx context.Context, req engine.GenRequest) (<-chan engine.Token, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("replica: generate: %w", err)
	}
	if req.Adapter != "" && b.model.LoRA().MaxLoras == 0 { // static: no lock needed
		return nil, fmt.Errorf("%w: adapter %q: LoRA is disabled (LoRA.MaxLoras 0)", ErrLoRADisabled, req.Adapter)
	}
	st := &stream{wake: make(chan struct{}, 1)}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, ErrClosed
	}
	id := b.nextID
	b.nextID++
	now := b.elapsed()
	b.model.Submit(now, Request{ID: id, Prompt: max(1, req.PromptTokens), Output: req.MaxTokens, Adapter: req.Adapter, Tag: st})
	b.collect(now)
	if !b.looping {
		b.looping = true
		b.loops.Go(b.loop)
	}
	b.mu.Unlock()
	out := make(chan engine.Token)
	go b.forward(ctx, id, st, req.MaxTokens, out)
	return out, nil
}

// Load implements [engine.Backend]: the model's running requests and KV
// cache usage as of now, and its waiting requests as vLLM reports them
// (Load.ReportedWaiting: the queue the last step left).
func (b *Backend) Load() engine.Load {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.collect(b.elapsed())
	}
	l := b.model.Load()
	return engine.Load{Running: l.Running, Waiting: l.ReportedWaiting, KVCacheUsage: l.KVUsage}
}

// ReplicaLoad returns the model's full [Load] (beyond what engine.Load carries), as of now.
func (b *Backend) ReplicaLoad() Load {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.collect(b.elapsed())
	}
	return b.model.Load()
}

// LoRALoad implements [engine.LoRAReporter]: the model's adapters, as
// [Replica.Adapters] reports them, as of now.
func (b *Backend) LoRALoad() engine.LoRALoad {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.collect(b.elapsed())
	}
	m := b.model.Adapters(b.adapters)
	b.adapters = m.Adapters
	l := engine.LoRALoad{MaxLoras: m.MaxLoras}
	if n := len(m.Adapters); n > 0 {
		l.Adapters = make([]engine.AdapterLoad, n)
		for i, a := range m.Adapters {
			l.Adapters[i] = engine.AdapterLoad{Name: a.Name, Running: a.Running, Waiting: a.Waiting}
		}
	}
	return l
}

// Close stops the stepping goroutine and fails every request in flight:
// their channels close early. Generate returns ErrClosed afterwards. Close
// waits for the stepping goroutine; it is idempotent.
func (b *Backend) Close() error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		now := b.elapsed()
		b.collect(now)
		for _, res := range b.model.SetState(now, Failed) {
			end(res)
		}
		b.cancel()
	}
	b.mu.Unlock()
	b.loops.Wait()
	return nil
}

// loop steps the model in real time until it is idle or closed.
func (b *Backend) loop() {
	for {
		b.mu.Lock()
		now := b.elapsed()
		b.collect(now)
		at, busy := b.model.Next()
		if !busy || b.closed {
			b.looping = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		if err := b.clock.Sleep(b.ctx, at-now); err != nil {
			b.mu.Lock()
			b.looping = false
			b.mu.Unlock()
			return
		}
	}
}

// forward feeds out with the tokens of request id as they are produced,
// then closes it; when ctx ends first, it cancels the request.
func (b *Backend) forward(ctx context.Context, id uint64, st *stream, want int, out chan<- engine.Token) {
	defer close(out)
	for sent := 0; sent < want; {
		produced, ended := st.progress()
		if sent < produced {
			select {
			case out <- engine.Token{Index: sent, Text: engine.TokenText(sent)}:
				sent++
				continue
			case <-ctx.Done():
				b.cancelRequest(id)
				return
			}
		}
		if ended {
			return // failed: fewer tokens
		}
		select {
		case <-st.wake:
		case <-ctx.Done():
			b.cancelRequest(id)
			return
		}
	}
}

// cancelRequest removes request id from the model.
func (b *Backend) cancelRequest(id uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	now := b.elapsed()
	b.collect(now)
	b.model.Cancel(now, id)
}

// collect runs the model up to now, delivering tokens (through OnToken)
// and ends, and starts the step that would start now. b.mu must be held.
func (b *Backend) collect(now time.Duration) {
	b.results = b.model.Advance(now, b.results[:0])
	for _, res := range b.results {
		end(res)
	}
	clear(b.results)
	b.model.Next()
}

// end marks res's stream as ended.
func end(res Result) {
	if st, ok := res.Tag.(*stream); ok {
		st.bump(false)
	}
}

// elapsed is the model time: the clock's time since NewBackend.
func (b *Backend) elapsed() time.Duration { return b.clock.Now().Sub(b.start) }
