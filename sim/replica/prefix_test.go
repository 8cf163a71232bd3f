package replica

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// chain returns n chained block hashes from root: equal roots give equal
// prefixes.
func chain(root uint64, n int) []uint64 {
	hs := make([]uint64, n)
	h := root
	for i := range hs {
		h = h*0x9e3779b97f4a7c15 + uint64(i) + 1
		hs[i] = h
	}
	return hs
}

func TestPrefixCache(t *testing.T) {
	h100 := mustProfile(t, ProfileLlama3x8BH100)
	tests := []struct {
		name       string
		profile    Profile
		cache      bool
		first      Request
		between    *Request // runs alone between first and second
		second     Request
		wantCached int // second's CachedPrompt
	}{
		{
			name: "shared prefix is not prefilled again", profile: h100, cache: true,
			first:      Request{ID: 1, Prompt: 2000, Output: 4, Prefix: chain(1, 64)},
			second:     Request{ID: 2, Prompt: 2000, Output: 4, Prefix: chain(1, 64)},
			wantCached: 1024,
		},
		{
			name: "cache off", profile: h100, cache: false,
			first:  Request{ID: 1, Prompt: 2000, Output: 4, Prefix: chain(1, 64)},
			second: Request{ID: 2, Prompt: 2000, Output: 4, Prefix: chain(1, 64)},
		},
		{
			name: "other prefix misses", profile: h100, cache: true,
			first:  Request{ID: 1, Prompt: 2000, Output: 4, Prefix: chain(1, 64)},
			second: Request{ID: 2, Prompt: 2000, Output: 4, Prefix: chain(2, 64)},
		},
		{
			name: "a fully cached prompt still computes its last block", profile: h100, cache: true,
			first:      Request{ID: 1, Prompt: 1024, Output: 4, Prefix: chain(1, 64)},
			second:     Request{ID: 2, Prompt: 1024, Output: 4, Prefix: chain(1, 64)},
			wantCached: 1008,
		},
		{
			name: "hashes past the prompt are ignored", profile: h100, cache: true,
			first:      Request{ID: 1, Prompt: 500, Output: 4, Prefix: chain(1, 64)},
			second:     Request{ID: 2, Prompt: 2000, Output: 4, Prefix: chain(1, 64)},
			wantCached: 31 * 16,
		},
		{
			// 200 blocks: the 3000-token prompt in between needs 188, evicting
			// 52 of the 64 cached ones, the prefix's tail first.
			name: "eviction under pressure takes the tail first", profile: tinyProfile(200, 8, 8192), cache: true,
			first:      Request{ID: 1, Prompt: 1024, Output: 1, Prefix: chain(1, 64)},
			between:    &Request{ID: 3, Prompt: 3000, Output: 1},
			second:     Request{ID: 2, Prompt: 1024, Output: 1, Prefix: chain(1, 64)},
			wantCached: 12 * 16,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReplica(t, Options{Profile: tt.profile, PrefixCache: tt.cache})
			now := time.Duration(0)
			run := func(req Request) Result {
				r.Submit(now, req)
				res := r.Advance(math.MaxInt64, nil)
				if len(res) != 1 || res[0].Failed {
					t.Fatalf("results %+v, want one completed", res)
				}
				now = res[0].Done + time.Second
				return res[0]
			}
			a := run(tt.first)
			if tt.between != nil {
				run(*tt.between)
			}
			b := run(tt.second)
			if a.CachedPrompt != 0 || b.CachedPrompt != tt.wantCached {
				t.Errorf("cached prompt tokens %d then %d, want 0 then %d", a.CachedPrompt, b.CachedPrompt, tt.wantCached)
			}
			ttftA, ttftB := a.FirstToken-a.Arrival, b.FirstToken-b.Arrival
			if tt.wantCached > 0 && tt.first.Prompt == tt.second.Prompt && ttftB >= ttftA {
				t.Errorf("TTFT %v with a cached prefix, want below %v without", ttftB, ttftA)
			}
			if l := r.Load(); l.KVBlocksUsed != 0 || l.KVUsage != 0 {
				t.Errorf("Load after all %+v: cached blocks must count as free", l)
			}
		})
	}
}

// TestPrefixCacheSharedWhileRunning: sequences running with the same
// prefix share its blocks.
func TestPrefixCacheSharedWhileRunning(t *testing.T) {
	r := newReplica(t, Options{Profile: mustProfile(t, ProfileLlama3x8BH100), PrefixCache: true})
	r.Submit(0, Request{ID: 1, Prompt: 1024, Output: 100, Prefix: chain(1, 64)})
	at, _ := r.Next()
	r.Advance(at, nil)
	r.Submit(at, Request{ID: 2, Prompt: 1024, Output: 100, Prefix: chain(1, 64)})
	r.Next()
	// 1 holds 65 blocks (64 shared + 1 for its first token); 2 adds 1 block
	// for its last prompt token.
	if l := r.Load(); l.KVBlocksUsed != 66 {
		t.Errorf("KV blocks used %d, want 66: the 64 prefix blocks shared", l.KVBlocksUsed)
	}
}

// TestDeterminism: the same inputs give identical results, with the prefix
// cache, preemptions and a lifecycle in play.
func TestDeterminism(t *testing.T) {
	p := mustProfile(t, ProfileLlama3x8BH100)
	p.KVCacheBytes /= 4 // ~105k tokens: preemptions at this load
	run := func() ([]Result, Load) {
		rng := rand.New(rand.NewPCG(9, 9))
		arrivals := poisson(16, 3*time.Minute, lognormalSizes(), 5)
		for i := range arrivals {
			if sys := rng.IntN(8); sys < 5 { // five shared system prompts of 512 tokens
				arrivals[i].req.Prefix = chain(uint64(sys), min(32, arrivals[i].req.Prompt/16))
			}
			arrivals[i].req.Tag = i
		}
		r := newReplica(t, Options{Profile: p, PrefixCache: true})
		split := slices.IndexFunc(arrivals, func(a arrival) bool { return a.at >= 2*time.Minute })
		res := drive(r, arrivals[:split], 2*time.Minute)
		res = append(res, r.SetState(2*time.Minute, Draining)...)
		res = append(res, drive(r, arrivals[split:], math.MaxInt64)...)
		return res, r.Load()
	}
	a, la := run()
	b, lb := run()
	if !reflect.DeepEqual(a, b) || la != lb {
		t.Fatal("two runs of the same inputs differ")
	}
	cached, failed := 0, 0
	for _, x := range a {
		cached += x.CachedPrompt
		if x.Failed {
			failed++
		}
	}
	if la.Preemptions == 0 || cached == 0 || failed == 0 {
		t.Errorf("preemptions %d, cached tokens %d, refused while draining %d: want all > 0 to exercise the model",
			la.Preemptions, cached, failed)
	}
}
