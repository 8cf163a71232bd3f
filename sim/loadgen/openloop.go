package loadgen

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// openLoop sends Poisson arrivals of o.Rate per second at every target
// until ctx is done or o.Requests have arrived (all targets together),
// and returns every arrival's result once the last request sent is
// answered or cut: a request still unanswered when ctx ends is returned
// with ctx's error (and its TTFT when its first token came), since an
// open-loop client that waited that long was not served in time.
func openLoop(ctx context.Context, o Options) []Result {
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 1024
	}
	var (
		mu      sync.Mutex
		results []Result
		wg      sync.WaitGroup
		arrived int
	)
	record := func(r Result) {
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
	}
	// take reports whether one more arrival is allowed by o.Requests.
	take := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if o.Requests > 0 && arrived >= o.Requests {
			return false
		}
		arrived++
		return true
	}
	for ti, t := range o.Targets {
		arrivals := rand.New(rand.NewPCG(o.Seed, uint64(ti)))
		requests := rand.New(rand.NewPCG(o.Seed, uint64(ti)+1<<32))
		slots := make(chan struct{}, o.MaxInFlight)
		wg.Go(func() {
			next := time.Now()
			timer := time.NewTimer(0)
			defer timer.Stop()
			for {
				next = next.Add(time.Duration(arrivals.ExpFloat64() / o.Rate * float64(time.Second)))
				timer.Reset(time.Until(next))
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
				if !take() {
					return
				}
				select {
				case slots <- struct{}{}:
				default:
					record(Result{Source: t.Source, Start: time.Now(), Err: ErrOverflow})
					if o.handled != nil {
						o.handled(true)
					}
					continue
				}
				rng := rand.New(rand.NewPCG(requests.Uint64(), requests.Uint64()))
				wg.Go(func() {
					defer func() { <-slots }()
					record(one(ctx, o, t, rng))
				})
				if o.handled != nil {
					o.handled(false)
				}
			}
		})
	}
	wg.Wait()
	return results
}
