package replica

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// hourWorkload is one hour of Poisson arrivals at 15 req/s with
// Azure-conversation-like sizes; with prefixes, every prompt's full blocks
// are hashed, the first 512 tokens shared by one of five system prompts
// (as sim/workload's conversations).
func hourWorkload(prefixes bool) []arrival {
	arrivals := poisson(15, time.Hour, lognormalSizes(), 1)
	if !prefixes {
		return arrivals
	}
	rng := rand.New(rand.NewPCG(2, 2))
	for i := range arrivals {
		n := arrivals[i].req.Prompt / DefaultBlockSize
		hs := chain(uint64(rng.IntN(5)), n)
		if n > 32 {
			copy(hs[32:], chain(uint64(1000+i), n-32))
		}
		arrivals[i].req.Prefix = hs
	}
	return arrivals
}

// runHour runs arrivals through a fresh replica as an event loop would,
// reusing out.
func runHour(tb testing.TB, o Options, arrivals []arrival, out []Result) (int, Load) {
	r := newReplica(tb, o)
	done := 0
	for _, a := range arrivals {
		out = r.Advance(a.at, out[:0])
		done += len(out)
		r.Submit(a.at, a.req)
	}
	out = r.Advance(math.MaxInt64, out[:0])
	return done + len(out), r.Load()
}

// BenchmarkVirtualHour: one simulated hour of one H100 replica at 15
// req/s (54k requests) per op.
//
// The "lora" case spreads the requests over 8 adapters (skewed, see
// withAdapters) served with 4 GPU slots and 6 adapters in the CPU cache.
func BenchmarkVirtualHour(b *testing.B) {
	for _, bc := range []struct {
		name  string
		cache bool
		lora  bool
	}{{"plain", false, false}, {"prefix cache", true, false}, {"lora", false, true}} {
		b.Run(bc.name, func(b *testing.B) {
			arrivals := hourWorkload(bc.cache)
			o := Options{Profile: mustProfile(b, ProfileLlama3x8BH100), PrefixCache: bc.cache}
			if bc.lora {
				arrivals, o.LoRA = withAdapters(arrivals), hourLoRA
			}
			out := make([]Result, 0, 1024)
			b.ReportAllocs()
			for b.Loop() {
				if n, _ := runHour(b, o, arrivals, out); n != len(arrivals) {
					b.Fatalf("%d results, want %d", n, len(arrivals))
				}
			}
			b.ReportMetric(float64(len(arrivals)), "requests/op")
		})
	}
}

// hourLoRA is the LoRA configuration of the "lora" benchmark.
var hourLoRA = LoRA{MaxLoras: 4, MaxCPULoras: 6, LoadTime: 20 * time.Millisecond, ActivateTime: time.Millisecond}

// withAdapters gives every request one of 8 adapters, adapter i about
// twice as likely as i+1 (the last two equally), deterministically.
func withAdapters(arrivals []arrival) []arrival {
	arrivals = slices.Clone(arrivals)
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range arrivals {
		k := 0
		for k < 7 && rng.IntN(2) == 0 {
			k++
		}
		arrivals[i].req.Adapter = fmt.Sprintf("adapter-%d", k)
	}
	return arrivals
}

// TestAdvanceAllocs: once warm, submitting and advancing does not
// allocate, with or without adapters.
func TestAdvanceAllocs(t *testing.T) {
	for _, tc := range []struct {
		name string
		lora bool
	}{{"plain", false}, {"lora", true}} {
		t.Run(tc.name, func(t *testing.T) {
			arrivals := hourWorkload(false)
			o := Options{Profile: mustProfile(t, ProfileLlama3x8BH100)}
			if tc.lora {
				arrivals, o.LoRA = withAdapters(arrivals), hourLoRA
			}
			r := newReplica(t, o)
			out := make([]Result, 0, 1024)
			i := 0
			for ; arrivals[i].at < 10*time.Minute; i++ {
				out = r.Advance(arrivals[i].at, out[:0])
				r.Submit(arrivals[i].at, arrivals[i].req)
			}
			allocs := testing.AllocsPerRun(2000, func() {
				a := arrivals[i]
				i++
				out = r.Advance(a.at, out[:0])
				r.Submit(a.at, a.req)
			})
			if allocs != 0 {
				t.Errorf("%v allocations per Submit+Advance in steady state, want 0", allocs)
			}
			if tc.lora {
				var cost time.Duration
				for _, x := range r.Advance(math.MaxInt64, out[:0]) {
					cost += x.AdapterCost
				}
				if cost == 0 {
					t.Error("no adapter was loaded: the workload does not exercise LoRA")
				}
			}
		})
	}
}
