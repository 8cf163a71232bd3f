package replica

import (
	"math"
	"math/rand/v2"
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
func BenchmarkVirtualHour(b *testing.B) {
	for _, bc := range []struct {
		name  string
		cache bool
	}{{"plain", false}, {"prefix cache", true}} {
		b.Run(bc.name, func(b *testing.B) {
			arrivals := hourWorkload(bc.cache)
			o := Options{Profile: mustProfile(b, ProfileLlama3x8BH100), PrefixCache: bc.cache}
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

// TestAdvanceAllocs: once warm, submitting and advancing does not
// allocate.
func TestAdvanceAllocs(t *testing.T) {
	arrivals := hourWorkload(false)
	r := newReplica(t, Options{Profile: mustProfile(t, ProfileLlama3x8BH100)})
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
}
