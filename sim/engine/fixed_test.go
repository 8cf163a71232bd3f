package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

type nameKey struct{}

// drain reads ch to the end and returns its tokens.
func drain(t *testing.T, ch <-chan Token) []Token {
	t.Helper()
	var out []Token
	for {
		select {
		case tok, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, tok)
		case <-time.After(waitLimit):
			t.Fatal("token channel did not close")
		}
	}
}

func TestFixedBackendFIFO(t *testing.T) {
	var mu sync.Mutex
	var order []string // names in order of their first Sleep, i.e. admission
	sleep := func(ctx context.Context, _ time.Duration) error {
		mu.Lock()
		defer mu.Unlock()
		if n := ctx.Value(nameKey{}).(string); !slices.Contains(order, n) {
			order = append(order, n)
		}
		return nil
	}
	b := NewFixedBackend(FixedTiming{MaxRunning: 1, Sleep: sleep})
	names := []string{"A", "B", "C", "D"}
	chans := make([]<-chan Token, len(names))
	for i, n := range names {
		ch, err := b.Generate(context.WithValue(t.Context(), nameKey{}, n), GenRequest{Model: "m", PromptTokens: 3, MaxTokens: 4})
		if err != nil {
			t.Fatalf("Generate %s: %v", n, err)
		}
		chans[i] = ch
	}
	// A holds the slot (blocked handing over its first token); the rest queue.
	if l := b.Load(); l.Running != 1 || l.Waiting != 3 {
		t.Fatalf("Load %+v, want 1 running 3 waiting", l)
	}
	// Drain in reverse order: admission must still follow arrival order.
	var wg sync.WaitGroup
	got := make([][]Token, len(chans))
	for i := len(chans) - 1; i >= 0; i-- {
		wg.Go(func() { got[i] = drain(t, chans[i]) })
	}
	wg.Wait()
	if !slices.Equal(order, names) {
		t.Errorf("admission order %v, want %v", order, names)
	}
	want := []Token{{0, TokenText(0)}, {1, TokenText(1)}, {2, TokenText(2)}, {3, TokenText(3)}}
	for i := range got {
		if !slices.Equal(got[i], want) {
			t.Errorf("%s tokens %v, want %v", names[i], got[i], want)
		}
	}
	if l := b.Load(); l != (Load{}) {
		t.Errorf("Load after all %+v, want zero", l)
	}
}

func TestFixedBackendCancel(t *testing.T) {
	tests := []struct {
		name     string
		cancelA  bool // cancel the running request A, else the waiting B
		wantNext Load // after the cancelled one is gone
	}{
		{"running request releases its slot to the waiter", true, Load{Running: 1}},
		{"waiting request leaves the queue", false, Load{Running: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newGate()
			b := NewFixedBackend(FixedTiming{MaxRunning: 1, KVCapacityTokens: 100, Sleep: g.sleep})
			ctxA, cancelA := context.WithCancel(t.Context())
			ctxB, cancelB := context.WithCancel(t.Context())
			defer cancelA()
			defer cancelB()
			a, errA := b.Generate(ctxA, GenRequest{PromptTokens: 10, MaxTokens: 2})
			bb, errB := b.Generate(ctxB, GenRequest{PromptTokens: 20, MaxTokens: 2})
			if errA != nil || errB != nil {
				t.Fatalf("Generate: %v, %v", errA, errB)
			}
			g.waitEntered(t, 1) // A in prefill
			if l := b.Load(); l != (Load{Running: 1, Waiting: 1, KVCacheUsage: 0.1}) {
				t.Fatalf("Load %+v, want 1 running 1 waiting 0.1 KV", l)
			}
			cancelled, survivor, survivorKV := a, bb, 0.2
			if tc.cancelA {
				cancelA()
			} else {
				cancelB()
				cancelled, survivor, survivorKV = bb, a, 0.1
			}
			if toks := drain(t, cancelled); len(toks) != 0 {
				t.Errorf("cancelled request yielded %v", toks)
			}
			if tc.cancelA {
				g.waitEntered(t, 1) // B admitted, in prefill
			}
			want := tc.wantNext
			want.KVCacheUsage = survivorKV
			if l := b.Load(); l != want {
				t.Errorf("after cancel: Load %+v, want %+v", l, want)
			}
			close(g.ch)
			if toks := drain(t, survivor); len(toks) != 2 {
				t.Errorf("survivor yielded %d tokens, want 2", len(toks))
			}
			if l := b.Load(); l != (Load{}) {
				t.Errorf("at the end: Load %+v, want zero", l)
			}
		})
	}
}

func TestFixedBackendKVUsage(t *testing.T) {
	g := newGate()
	b := NewFixedBackend(FixedTiming{MaxRunning: 4, KVCapacityTokens: 100, Sleep: g.sleep})
	ch, err := b.Generate(t.Context(), GenRequest{PromptTokens: 10, MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{0.11, 0.12} {
		g.step(t) // prefill, then the first inter-token wait
		<-ch
		if got := b.Load().KVCacheUsage; got != want {
			t.Errorf("after token %d: KV %v, want %v", i, got, want)
		}
	}
	big, err := b.Generate(t.Context(), GenRequest{PromptTokens: 500, MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	g.waitEntered(t, 3) // the first request: prefill and two inter-token waits
	g.waitEntered(t, 1) // the big one, admitted, in prefill
	if got := b.Load().KVCacheUsage; got != 1 {
		t.Errorf("over capacity: KV %v, want 1 (capped)", got)
	}
	close(g.ch)
	drain(t, ch)
	drain(t, big)
	if l := b.Load(); l != (Load{}) {
		t.Errorf("Load %+v, want zero", l)
	}
}

func TestFixedBackendErrorsAndDefaults(t *testing.T) {
	b := NewFixedBackend(FixedTiming{})
	for _, tc := range []struct {
		name string
		req  GenRequest
	}{{"zero max tokens", GenRequest{MaxTokens: 0}}, {"negative prompt", GenRequest{MaxTokens: 1, PromptTokens: -1}}} {
		if _, err := b.Generate(t.Context(), tc.req); !errors.Is(err, ErrInvalidGenRequest) {
			t.Errorf("%s: err %v, want ErrInvalidGenRequest", tc.name, err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := b.Generate(ctx, GenRequest{MaxTokens: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("done ctx: err %v, want context.Canceled", err)
	}
	if b.timing.MaxRunning != DefaultMaxRunning || b.timing.KVCapacityTokens != DefaultKVCapacityTokens {
		t.Errorf("defaults not applied: %+v", b.timing)
	}
	d := DefaultFixedTiming()
	if d.MaxRunning != 8 || d.PrefillBase != 5*time.Millisecond || d.PrefillPerToken != 20*time.Microsecond ||
		d.InterTokenLatency != 2*time.Millisecond || d.KVCapacityTokens != 200000 {
		t.Errorf("DefaultFixedTiming %+v", d)
	}
	// Real timers, default timing: all tokens arrive.
	ch, err := NewFixedBackend(d).Generate(t.Context(), GenRequest{PromptTokens: 5, MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	if toks := drain(t, ch); len(toks) != 3 {
		t.Errorf("default timing yielded %d tokens, want 3", len(toks))
	}
}

// TestServeShutdownTimeout: a request that outlives ShutdownTimeout makes
// Serve report the forced close.
func TestServeShutdownTimeout(t *testing.T) {
	g := newGate()
	opts := testOptions(NewFixedBackend(FixedTiming{Sleep: g.sleep}))
	opts.ShutdownTimeout = time.Millisecond
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	res := post(t.Context(), "http://"+ln.Addr().String()+"/v1/completions", `{"model":"sim-model","prompt":"x"}`)
	g.waitEntered(t, 1) // in flight, and it never ends by itself
	cancel()
	if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Serve: %v, want context.DeadlineExceeded", err)
	}
	if r := <-res; r.err == nil {
		t.Errorf("in-flight request got status %d, want a broken connection", r.code)
	}
}
