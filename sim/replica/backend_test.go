package replica

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ilbproject/ilb/sim/engine"
)

const waitLimit = 10 * time.Second

// fakeClock is a Clock whose Sleep advances it at once (gate nil) or once
// the test sends on gate.
type fakeClock struct {
	mu   sync.Mutex
	now  time.Time
	gate chan struct{}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// add moves the clock forward by d.
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if c.gate != nil {
		select {
		case <-c.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(max(d, 0))
	return ctx.Err()
}

func newBackend(t *testing.T, p Profile, clock Clock) *Backend {
	t.Helper()
	b, err := NewBackend(Options{Profile: p}, clock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// drain reads ch to the end and returns its tokens.
func drain(t *testing.T, ch <-chan engine.Token) []engine.Token {
	t.Helper()
	var out []engine.Token
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

func wantTokens(n int) []engine.Token {
	ts := make([]engine.Token, n)
	for i := range ts {
		ts[i] = engine.Token{Index: i, Text: engine.TokenText(i)}
	}
	return ts
}

func TestBackendGenerate(t *testing.T) {
	h100 := mustProfile(t, ProfileLlama3x8BH100)
	tests := []struct {
		name     string
		requests []engine.GenRequest
	}{
		{"one request", []engine.GenRequest{{Model: "m", PromptTokens: 100, MaxTokens: 5}}},
		{"empty prompt", []engine.GenRequest{{Model: "m", PromptTokens: 0, MaxTokens: 3}}},
		{"concurrent requests", slices.Repeat([]engine.GenRequest{{Model: "m", PromptTokens: 500, MaxTokens: 40}}, 50)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackend(t, h100, &fakeClock{now: time.Unix(1e9, 0)})
			var wg sync.WaitGroup
			for i, req := range tt.requests {
				wg.Go(func() {
					ch, err := b.Generate(t.Context(), req)
					if err != nil {
						t.Errorf("Generate %d: %v", i, err)
						return
					}
					if got := drain(t, ch); !slices.Equal(got, wantTokens(req.MaxTokens)) {
						t.Errorf("request %d: tokens %v, want %d in order", i, got, req.MaxTokens)
					}
				})
			}
			wg.Wait()
			if l := b.Load(); l != (engine.Load{}) {
				t.Errorf("Load after all %+v, want zero", l)
			}
		})
	}
}

func TestBackendErrors(t *testing.T) {
	b := newBackend(t, mustProfile(t, ProfileLlama3x8BH100), &fakeClock{})
	done, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		req  engine.GenRequest
		want error
	}{
		{"no tokens", t.Context(), engine.GenRequest{Model: "m", PromptTokens: 1, MaxTokens: 0}, engine.ErrInvalidGenRequest},
		{"context done", done, engine.GenRequest{Model: "m", PromptTokens: 1, MaxTokens: 1}, context.Canceled},
		{"adapter without LoRA", t.Context(), engine.GenRequest{Model: "a", Adapter: "a", PromptTokens: 1, MaxTokens: 1}, ErrLoRADisabled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if ch, err := b.Generate(tt.ctx, tt.req); !errors.Is(err, tt.want) || ch != nil {
				t.Errorf("Generate = %v, %v; want no channel and %v", ch, err, tt.want)
			}
		})
	}
	if _, err := NewBackend(Options{}, nil); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("NewBackend without a profile: %v, want ErrInvalidOptions", err)
	}
}

// TestBackendLoad: the engine gauges follow the model, step by step. The
// clock only moves when the test says so (the stepping goroutine never
// wakes); reading Load runs the model up to the clock's time.
func TestBackendLoad(t *testing.T) {
	p := mustProfile(t, ProfileLlama3x8BH100)
	p.MaxSeqs = 2
	clock := &fakeClock{gate: make(chan struct{})}
	b := newBackend(t, p, clock)
	var chans []<-chan engine.Token
	for range 4 {
		ch, err := b.Generate(t.Context(), engine.GenRequest{Model: "m", PromptTokens: 1000, MaxTokens: 3})
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	// waiting is what the gauge shows (the queue the last step left, as
	// vLLM reports it), queued the requests waiting now.
	steps := []struct {
		name                             string
		advance                          time.Duration
		running, waiting, queued, tokens int
	}{
		// The first request found the replica idle: its step started at
		// once; the other three came during it.
		{"first step", 0, 1, 0, 3, 1000},
		{"second step: a decode and a second prompt", p.StepTime(1000, 0), 2, 0, 2, 1001},
		{"third step: the second left two waiting", p.StepTime(1001, 1001), 2, 2, 2, 2},
	}
	for _, s := range steps {
		clock.add(s.advance)
		l, ml := b.Load(), b.ReplicaLoad()
		if l.Running != s.running || l.Waiting != s.waiting || ml.Waiting != s.queued || l.KVCacheUsage != ml.KVUsage || l.KVCacheUsage <= 0 || ml.BatchTokens != s.tokens {
			t.Errorf("%s: Load %+v, model %+v; want %d running, %d waiting reported, %d queued, %d tokens in the step",
				s.name, l, ml, s.running, s.waiting, s.queued, s.tokens)
		}
	}
	clock.add(time.Second)
	b.Load() // runs the model to the end
	for _, ch := range chans {
		if got := drain(t, ch); len(got) != 3 {
			t.Errorf("%d tokens, want 3", len(got))
		}
	}
	if l := b.Load(); l != (engine.Load{}) {
		t.Errorf("Load after all %+v, want zero", l)
	}
}

// TestBackendLoRA: the backend passes adapters to the model and reports
// them as the engine's LoRALoad, step by step on a clock that only moves
// when the test says so.
func TestBackendLoRA(t *testing.T) {
	p := mustProfile(t, ProfileLlama3x8BH100)
	o := Options{Profile: p, LoRA: LoRA{MaxLoras: 1, LoadTime: 50 * time.Millisecond}}
	clock := &fakeClock{gate: make(chan struct{})}
	b, err := NewBackend(o, clock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	var chans []<-chan engine.Token
	for _, req := range []engine.GenRequest{
		{Model: "a", Adapter: "a", PromptTokens: 100, MaxTokens: 2},
		{Model: "b", Adapter: "b", PromptTokens: 100, MaxTokens: 2},
		{Model: "m", PromptTokens: 100, MaxTokens: 2},
	} {
		ch, err := b.Generate(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	// Steps: a's prefill and the base request's, loading a (b waits for
	// the one slot); their decodes (both end); b's prefill, loading b;
	// its decode.
	load := o.LoRA.LoadTime
	steps := []struct {
		name    string
		advance time.Duration
		want    engine.LoRALoad
	}{
		{"a and the base request run, b waits", 0, engine.LoRALoad{MaxLoras: 1, Adapters: []engine.AdapterLoad{{Name: "a", Running: 1}, {Name: "b", Waiting: 1}}}},
		{"a ended, b runs", p.StepTime(200, 0) + load + p.StepTime(2, 202), engine.LoRALoad{MaxLoras: 1, Adapters: []engine.AdapterLoad{{Name: "b", Running: 1}}}},
		{"all done", p.StepTime(100, 0) + load + p.StepTime(1, 101), engine.LoRALoad{MaxLoras: 1}},
	}
	for _, s := range steps {
		clock.add(s.advance)
		if got := b.LoRALoad(); !reflect.DeepEqual(got, s.want) {
			t.Errorf("%s: LoRALoad %+v, want %+v", s.name, got, s.want)
		}
	}
	for i, ch := range chans {
		if got := drain(t, ch); len(got) != 2 {
			t.Errorf("request %d: %d tokens, want 2", i, len(got))
		}
	}
}

// TestBackendLoRAMetrics: behind sim/engine's server, the backend's
// adapters are exported as vLLM's vllm:lora_requests_info, stamped with
// the server's clock.
func TestBackendLoRAMetrics(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1e9, 0), gate: make(chan struct{})}
	b, err := NewBackend(Options{Profile: mustProfile(t, ProfileLlama3x8BH100), LoRA: LoRA{MaxLoras: 1}}, clock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	srv, err := engine.New(engine.Options{
		Name: "r", Cluster: "c", Models: []string{"m"}, Adapters: []string{"a", "b"},
		Backend: b, Now: func() time.Time { return time.Unix(1700000000, 0) },
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"a", "b", "a"} {
		if _, err := b.Generate(t.Context(), engine.GenRequest{Model: a, Adapter: a, PromptTokens: 10, MaxTokens: 5}); err != nil {
			t.Fatal(err)
		}
	}
	// The first request started a step at once; the others wait for the
	// next one, where b will not fit (MaxLoras 1).
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	want := `vllm:lora_requests_info{cluster="c",max_lora="1",running_lora_adapters="a",waiting_lora_adapters="a,b"} 1.7e+09`
	if !strings.Contains(rec.Body.String(), want+"\n") {
		t.Errorf("/metrics does not have %s:\n%s", want, rec.Body)
	}
	if _, err := engine.New(engine.Options{Name: "r", Cluster: "c", Models: []string{"m"}, Adapters: []string{"a"}, Backend: newBackend(t, mustProfile(t, ProfileLlama3x8BH100), clock)}); !errors.Is(err, engine.ErrInvalidOptions) {
		t.Errorf("engine.New with adapters on a backend without LoRA: %v, want ErrInvalidOptions", err)
	}
}

func TestBackendCancelAndClose(t *testing.T) {
	tests := []struct {
		name  string
		close bool // Close the backend, else cancel the client
	}{
		{"client goes away", false},
		{"backend closes", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := &fakeClock{gate: make(chan struct{})}
			b := newBackend(t, mustProfile(t, ProfileLlama3x8BH100), clock)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			ch, err := b.Generate(ctx, engine.GenRequest{Model: "m", PromptTokens: 2000, MaxTokens: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 { // three steps: three tokens
				clock.gate <- struct{}{}
				if tok := <-ch; tok.Index != i {
					t.Fatalf("token %+v, want index %d", tok, i)
				}
			}
			if tt.close {
				if err := b.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				cancel()
			}
			if rest := drain(t, ch); len(rest) > 1 {
				t.Errorf("%d more tokens after the end, want at most 1", len(rest))
			}
			if l := b.ReplicaLoad(); l.Running != 0 || l.KVBlocksUsed != 0 || l.PendingTokens != 0 {
				t.Errorf("Load once the channel closed %+v, want the request gone", l)
			}
			if tt.close {
				if _, err := b.Generate(t.Context(), engine.GenRequest{Model: "m", MaxTokens: 1}); !errors.Is(err, ErrClosed) {
					t.Errorf("Generate after Close: %v, want ErrClosed", err)
				}
			}
		})
	}
}

// TestBackendRealTime: on the wall clock, the backend paces tokens by
// the profile. It runs the model on absolute deadlines (a late wake-up
// catches up), so no token comes before its time: from the request to
// its 20th token at least 19 decode steps of ~7.2 ms pass, however busy
// the machine. There is no upper bound: a loaded machine may be slower
// (the schedule itself is checked in virtual time by the other tests).
func TestBackendRealTime(t *testing.T) {
	if testing.Short() {
		t.Skip("real time")
	}
	b := newBackend(t, mustProfile(t, ProfileLlama3x8BH100), nil)
	start := time.Now()
	ch, err := b.Generate(t.Context(), engine.GenRequest{Model: "m", PromptTokens: 10, MaxTokens: 20})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(drain(t, ch)); n != 20 {
		t.Fatalf("%d tokens, want 20", n)
	}
	if took := time.Since(start); took < 19*7*time.Millisecond {
		t.Errorf("20 tokens in %v, want at least 19 steps of about 7.2ms: the backend is not paced", took)
	}
}
