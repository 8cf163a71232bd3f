package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// FixedTiming configures a [FixedBackend]. Use [DefaultFixedTiming] and
// override fields; a zero or negative duration means no delay.
type FixedTiming struct {
	// MaxRunning is the number of requests generating at once (slots);
	// further requests wait in FIFO order. <= 0 means the default, 8.
	MaxRunning int
	// PrefillBase is the fixed part of the time from admission to the first
	// token. Default 5ms.
	PrefillBase time.Duration
	// PrefillPerToken is added to the time to first token per prompt token.
	// Default 20µs.
	PrefillPerToken time.Duration
	// InterTokenLatency is the time between two tokens of one request.
	// Default 2ms.
	InterTokenLatency time.Duration
	// KVCapacityTokens is the KV cache size in tokens: KV usage is the
	// number of tokens (prompt + generated so far) held by running requests
	// divided by this, capped at 1. It does not limit admission.
	// <= 0 means the default, 200000.
	KVCapacityTokens int
	// Sleep waits for d or until ctx ends, returning ctx.Err() in the latter
	// case. It is called once for the prefill of every admitted request and
	// once before every token after the first, even when d is zero, so tests
	// can inject a zero delay or gate the progress of requests step by step.
	// It must be safe for concurrent use. Nil means a real timer.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Default values of [FixedTiming].
const (
	DefaultMaxRunning        = 8
	DefaultPrefillBase       = 5 * time.Millisecond
	DefaultPrefillPerToken   = 20 * time.Microsecond
	DefaultInterTokenLatency = 2 * time.Millisecond
	DefaultKVCapacityTokens  = 200000
)

// DefaultFixedTiming returns the default timing: 8 slots, 5ms + 20µs per
// prompt token to the first token, 2ms per further token, 200000 KV tokens.
func DefaultFixedTiming() FixedTiming {
	return FixedTiming{
		MaxRunning:        DefaultMaxRunning,
		PrefillBase:       DefaultPrefillBase,
		PrefillPerToken:   DefaultPrefillPerToken,
		InterTokenLatency: DefaultInterTokenLatency,
		KVCapacityTokens:  DefaultKVCapacityTokens,
	}
}

// FixedBackend is a [Backend] with fixed timing: MaxRunning slots, a FIFO
// waiting queue, a prefill delay linear in the prompt length, then one token
// every InterTokenLatency. It is safe for concurrent use.
//
// A request whose context ends while waiting leaves the queue; while running
// it releases its slot (handed to the oldest waiter) and its KV tokens. The
// token channel is closed only after the slot is released, so once a
// consumer sees it closed, [FixedBackend.Load] no longer counts the request.
type FixedBackend struct {
	timing FixedTiming

	mu       sync.Mutex
	running  int       // admitted requests, <= timing.MaxRunning
	queue    []*waiter // FIFO, oldest first
	kvTokens int       // tokens held by running requests
}

var _ Backend = (*FixedBackend)(nil)

// waiter is one queued request; ready is closed, and admitted set, under
// FixedBackend.mu when it gets a slot.
type waiter struct {
	ready    chan struct{}
	admitted bool
}

// NewFixedBackend returns a FixedBackend with timing t; fields <= 0 that
// have a documented default take it.
func NewFixedBackend(t FixedTiming) *FixedBackend {
	if t.MaxRunning <= 0 {
		t.MaxRunning = DefaultMaxRunning
	}
	if t.KVCapacityTokens <= 0 {
		t.KVCapacityTokens = DefaultKVCapacityTokens
	}
	if t.Sleep == nil {
		t.Sleep = sleepCtx
	}
	return &FixedBackend{timing: t}
}

// Generate implements [Backend]. The request is queued (or admitted) before
// Generate returns, so the order of Generate calls is the admission order.
func (b *FixedBackend) Generate(ctx context.Context, req GenRequest) (<-chan Token, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("engine: generate: %w", err)
	}
	w := &waiter{ready: make(chan struct{})}
	b.mu.Lock()
	if b.running < b.timing.MaxRunning && len(b.queue) == 0 {
		b.running++
		w.admitted = true
		close(w.ready)
	} else {
		b.queue = append(b.queue, w)
	}
	b.mu.Unlock()

	out := make(chan Token)
	go b.run(ctx, req, w, out)
	return out, nil
}

// Load implements [Backend].
func (b *FixedBackend) Load() Load {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Load{
		Running:      b.running,
		Waiting:      len(b.queue),
		KVCacheUsage: min(1, float64(b.kvTokens)/float64(b.timing.KVCapacityTokens)),
	}
}

// run waits for admission, then produces the tokens of req on out.
func (b *FixedBackend) run(ctx context.Context, req GenRequest, w *waiter, out chan<- Token) {
	defer close(out) // after release: see the FixedBackend doc
	if !b.await(ctx, w) {
		return
	}
	held := req.PromptTokens
	b.mu.Lock()
	b.kvTokens += held
	b.mu.Unlock()
	defer func() { b.release(held) }()

	prefill := b.timing.PrefillBase + b.timing.PrefillPerToken*time.Duration(req.PromptTokens)
	if b.timing.Sleep(ctx, prefill) != nil {
		return
	}
	for i := range req.MaxTokens {
		if i > 0 && b.timing.Sleep(ctx, b.timing.InterTokenLatency) != nil {
			return
		}
		b.mu.Lock()
		b.kvTokens++
		b.mu.Unlock()
		held++
		select {
		case out <- Token{Index: i, Text: TokenText(i)}:
		case <-ctx.Done():
			return
		}
	}
}

// await blocks until w is admitted (true) or ctx ends (false). On false the
// request holds no slot and is no longer queued.
func (b *FixedBackend) await(ctx context.Context, w *waiter) bool {
	select {
	case <-w.ready:
		return true
	case <-ctx.Done():
	}
	b.mu.Lock()
	if !w.admitted {
		if i := slices.Index(b.queue, w); i >= 0 {
			b.queue = slices.Delete(b.queue, i, i+1)
		}
		b.mu.Unlock()
		return false
	}
	b.mu.Unlock()
	b.release(0) // admitted just as ctx ended: give the slot back
	return false
}

// release frees a slot and kvTokens KV tokens; the slot goes to the oldest
// waiter, if any.
func (b *FixedBackend) release(kvTokens int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.kvTokens -= kvTokens
	if len(b.queue) == 0 {
		b.running--
		return
	}
	next := b.queue[0]
	b.queue[0] = nil
	b.queue = b.queue[1:]
	next.admitted = true
	close(next.ready)
}

// sleepCtx waits for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
