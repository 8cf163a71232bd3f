package replica

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestLifecycle(t *testing.T) {
	h100 := mustProfile(t, ProfileLlama3x8BH100)
	tests := []struct {
		name string
		run  func(t *testing.T, r *Replica)
	}{
		{"starting admits nothing until ready", func(t *testing.T, r *Replica) {
			r.SetState(0, Starting)
			r.Submit(0, Request{ID: 1, Prompt: 100, Output: 3})
			if _, busy := r.Next(); busy {
				t.Fatal("a Starting replica scheduled a step")
			}
			if l := r.Load(); l.Waiting != 1 || l.Running != 0 {
				t.Fatalf("Load %+v, want 1 waiting", l)
			}
			r.SetState(5*time.Second, Ready)
			res := r.Advance(math.MaxInt64, nil)
			if len(res) != 1 || res[0].Failed || res[0].Arrival != 0 || res[0].FirstToken <= 5*time.Second {
				t.Errorf("results %+v, want one completed, first token after 5s", res)
			}
		}},
		{"draining finishes work and admits nothing new", func(t *testing.T, r *Replica) {
			for i := range 6 { // MaxSeqs 2: 2 running, 4 waiting
				r.Submit(0, Request{ID: uint64(i), Prompt: 100, Output: 20})
			}
			at, _ := r.Next()
			res := r.Advance(at, nil)
			res = append(res, r.SetState(at, Draining)...)
			r.Submit(at, Request{ID: 99, Prompt: 10, Output: 1})
			res = r.Advance(math.MaxInt64, res)
			done := 0
			for _, x := range res {
				switch {
				case x.ID == 99 && (!x.Failed || x.Done != at || x.FirstToken != 0):
					t.Errorf("submitted while draining: %+v, want refused (Failed) at %v", x, at)
				case x.ID != 99 && (x.Failed || x.Output != 20):
					t.Errorf("request inside when draining: %+v, want completed", x)
				case x.ID != 99:
					done++
				}
			}
			if done != 6 || len(res) != 7 {
				t.Errorf("%d completed of 6, %d results", done, len(res))
			}
			if l := r.Load(); l.State != Draining || l.Running+l.Waiting != 0 {
				t.Errorf("Load %+v, want draining and empty", l)
			}
		}},
		{"failed returns every request inside", func(t *testing.T, r *Replica) {
			for i := range 10 {
				r.Submit(0, Request{ID: uint64(i), Prompt: 100, Output: 50})
			}
			recs, _ := stepThrough(r, 3)
			mid := recs[len(recs)-1].end + time.Millisecond
			r.Next() // a step in progress is aborted
			failed := r.SetState(mid, Failed)
			if len(failed) != 10 {
				t.Fatalf("%d failed results, want 10", len(failed))
			}
			started := 0
			for _, x := range failed {
				if !x.Failed || x.Done != mid || x.Output >= 50 {
					t.Errorf("result %+v, want Failed at %v", x, mid)
				}
				if x.FirstToken > 0 {
					started++
				}
			}
			if started != 2 {
				t.Errorf("%d failed results had a first token, want the 2 running", started)
			}
			if l := r.Load(); l.Running+l.Waiting+l.KVBlocksUsed+l.PendingTokens != 0 || l.State != Failed {
				t.Errorf("Load after failure %+v, want empty", l)
			}
			if res := r.Advance(math.MaxInt64, nil); len(res) != 0 {
				t.Errorf("results after failure %+v, want none", res)
			}
			r.Submit(mid, Request{ID: 100, Prompt: 10, Output: 1})
			if at, busy := r.Next(); !busy || at != mid {
				t.Errorf("Next %v %v, want the refusal at %v", at, busy, mid)
			}
			if res := r.Advance(mid, nil); len(res) != 1 || !res[0].Failed {
				t.Errorf("submitted to a failed replica: %+v, want refused", res)
			}
			r.SetState(mid, Starting) // restart
			r.SetState(mid+time.Minute, Ready)
			r.Submit(mid+time.Minute, Request{ID: 101, Prompt: 10, Output: 1})
			if res := r.Advance(math.MaxInt64, nil); len(res) != 1 || res[0].Failed {
				t.Errorf("after restart: %+v, want completed", res)
			}
		}},
		{"warming is slower, then full speed", func(t *testing.T, r *Replica) {
			r.SetState(0, Warming)
			r.Submit(0, Request{ID: 1, Prompt: 1, Output: 1})
			cold := r.Advance(math.MaxInt64, nil)[0].Done
			r.Submit(20*time.Second, Request{ID: 2, Prompt: 1, Output: 1})
			warm := r.Advance(math.MaxInt64, nil)[0].Done - 20*time.Second
			if want := h100.StepTime(1, 0); warm != want || cold != 2*want {
				t.Errorf("step %v at warmup start, %v after it; want %v and %v", cold, warm, 2*want, want)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := h100
			p.MaxSeqs = 2
			tt.run(t, newReplica(t, Options{Profile: p, WarmupSlowdown: 2, WarmupTime: 10 * time.Second}))
		})
	}
}

func TestCancel(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(r *Replica) time.Duration // returns when to cancel request 1
		found   bool
	}{
		{"running between steps", func(r *Replica) time.Duration {
			recs, _ := stepThrough(r, 2)
			return recs[1].end
		}, true},
		{"running inside a step", func(r *Replica) time.Duration {
			at, _ := r.Next()
			return at / 2
		}, true},
		{"waiting", func(r *Replica) time.Duration {
			r.SetState(0, Starting)
			return 0
		}, true},
		{"unknown", func(r *Replica) time.Duration {
			r.Cancel(0, 1)
			return 0
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReplica(t, Options{Profile: mustProfile(t, ProfileLlama3x8BH100)})
			r.Submit(0, Request{ID: 1, Prompt: 1000, Output: 100})
			r.Submit(0, Request{ID: 2, Prompt: 1000, Output: 100})
			at := tt.prepare(r)
			if got := r.Cancel(at, 1); got != tt.found {
				t.Errorf("Cancel = %v, want %v", got, tt.found)
			}
			if l := r.Load(); l.Running+l.Waiting != 1 || l.PendingTokens > 1099 {
				t.Errorf("Load after cancel %+v, want request 2 only", l)
			}
			r.SetState(at, Ready)
			res := r.Advance(math.MaxInt64, nil)
			if len(res) != 1 || res[0].ID != 2 || res[0].Failed {
				t.Errorf("results %+v, want request 2 only, completed", res)
			}
			if l := r.Load(); l.KVBlocksUsed != 0 || l.PendingTokens != 0 {
				t.Errorf("Load at the end %+v, want empty", l)
			}
		})
	}
}

func TestSubmitTooLong(t *testing.T) {
	r := newReplica(t, Options{Profile: tinyProfile(10, 8, 64)})
	r.Submit(time.Second, Request{ID: 1, Prompt: 150, Output: 20}) // 170 tokens > 160
	if at, busy := r.Next(); !busy || at != time.Second {
		t.Errorf("Next = %v, %v; want the refusal at 1s", at, busy)
	}
	res := r.Advance(time.Second, nil)
	if len(res) != 1 || !res[0].Failed || res[0].Done != time.Second || res[0].FirstToken != 0 {
		t.Errorf("results %+v, want request 1 refused at 1s", res)
	}
}

func TestValidate(t *testing.T) {
	good := mustProfile(t, ProfileLlama3x8BH100)
	tests := []struct {
		name   string
		edit   func(o *Options)
		fields []string // each must be named by the error; none: valid
	}{
		{"valid", func(*Options) {}, nil},
		{"defaults for zero limits", func(o *Options) { o.Profile.BlockSize, o.Profile.MaxSeqs, o.Profile.MaxBatchedTokens = 0, 0, 0 }, nil},
		{"no name and no floor", func(o *Options) { o.Profile.Name, o.Profile.Floor = "", 0 }, []string{"Name", "Floor"}},
		{"negative durations", func(o *Options) {
			o.Profile.PerToken, o.Profile.PerContextToken, o.Profile.Overhead = -1, -1, -1
		}, []string{"PerToken", "PerContextToken", "Overhead"}},
		{"negative limits", func(o *Options) {
			o.Profile.FloorTokens, o.Profile.BlockSize, o.Profile.MaxSeqs, o.Profile.MaxBatchedTokens = -1, -1, -1, -1
		}, []string{"FloorTokens", "BlockSize", "MaxSeqs", "MaxBatchedTokens"}},
		{"no KV", func(o *Options) { o.Profile.KVBytesPerToken, o.Profile.KVCacheBytes = 0, 0 }, []string{"KVBytesPerToken", "KVCacheBytes"}},
		{"KV below one block", func(o *Options) { o.Profile.KVCacheBytes = 15 * o.Profile.KVBytesPerToken }, []string{"KVCacheBytes"}},
		{
			"bad lifecycle options", func(o *Options) { o.StartupTime, o.WarmupTime, o.WarmupSlowdown = -1, -1, 0.5 },
			[]string{"StartupTime", "WarmupTime", "WarmupSlowdown"},
		},
		{"NaN slowdown", func(o *Options) { o.WarmupSlowdown = math.NaN() }, []string{"WarmupSlowdown"}},
		{"LoRA", func(o *Options) {
			o.LoRA = LoRA{MaxLoras: 4, MaxCPULoras: 8, LoadTime: time.Second, ActivateTime: time.Millisecond}
		}, nil},
		{"LoRA: default CPU cache, free loads", func(o *Options) { o.LoRA = LoRA{MaxLoras: 1} }, nil},
		{"LoRA: negative", func(o *Options) {
			o.LoRA = LoRA{MaxLoras: -1, MaxCPULoras: -1, LoadTime: -1, ActivateTime: -1}
		}, []string{"LoRA.MaxLoras", "LoRA.MaxCPULoras", "LoRA.LoadTime", "LoRA.ActivateTime"}},
		{"LoRA: CPU cache smaller than the slots", func(o *Options) { o.LoRA = LoRA{MaxLoras: 4, MaxCPULoras: 3} }, []string{"LoRA.MaxCPULoras"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Options{Profile: good}
			tt.edit(&o)
			_, err := New(o)
			if len(tt.fields) == 0 {
				if err != nil {
					t.Fatalf("New: %v, want no error", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("New: %v, want an error wrapping ErrInvalidOptions", err)
			}
			for _, f := range tt.fields {
				if !strings.Contains(err.Error(), f+" ") {
					t.Errorf("error %q does not name %s", err, f)
				}
			}
		})
	}
}

func TestProfiles(t *testing.T) {
	ps := Profiles()
	if len(ps) < 3 {
		t.Fatalf("%d profiles, want at least 3", len(ps))
	}
	for _, p := range ps {
		if err := p.Validate(); err != nil {
			t.Errorf("shipped profile %s: %v", p.Name, err)
		}
		if got, ok := LookupProfile(p.Name); !ok || got != p {
			t.Errorf("LookupProfile(%q) = %v, %v", p.Name, got.Name, ok)
		}
		if p.Source == "" {
			t.Errorf("profile %s has no Source", p.Name)
		}
	}
	ps[0].Floor = 0 // a fresh slice each call: no shared state to corrupt
	if again := Profiles(); again[0].Floor == 0 {
		t.Error("Profiles shares its slice between calls")
	}
	if _, ok := LookupProfile("gpt-5/abacus"); ok {
		t.Error("LookupProfile found an unknown profile")
	}
}
