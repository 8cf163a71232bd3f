package experiment

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ilbproject/ilb/sim/replica"
	"github.com/ilbproject/ilb/sim/workload"
)

// Calibration parameters: the sweep an operator runs with a serving
// benchmark (vLLM's benchmark_serving at increasing request rates) before
// writing capacity_per_replica.
const (
	// calibrationRequests is how many requests of the mix the sweep cycles
	// through.
	calibrationRequests = 3000
	// calibrationSpan is the simulated length of one rate's run.
	calibrationSpan = 5 * time.Minute
	// calibrationSteps is the number of bisection steps of the sweep.
	calibrationSteps = 12
)

// Calibrate measures, for every replica profile of the fleet, the
// sustainable throughput of one replica on the request mix, in token-cost
// units per second (prompt tokens + 4 × output tokens, ILB's default
// costs): the highest Poisson arrival rate at which the replica's p99 time
// to first token stays within slo less the fleet's longest round trip
// (the worse of two arrival sequences): the throughput at which the
// engine meets the SLO, as operators define capacity_per_replica, found by bisection between 0 and its saturation throughput
// (everything queued at once), on requests sampled evenly over the whole
// workload. It is the
// capacity per replica the controller plans with (it fills its target
// utilization, 80 %, of it). The sweep is deterministic.
func Calibrate(f Fleet, mix []workload.Request, slo time.Duration) (map[string]float64, error) {
	if len(mix) == 0 {
		return nil, errors.New("calibrate: no requests to calibrate with")
	}
	if slo <= 0 {
		return nil, fmt.Errorf("calibrate: SLO %v, want > 0", slo)
	}
	mix = sample(mix, calibrationRequests)
	var cost float64
	for _, q := range mix {
		cost += requestCost(q)
	}
	meanCost := cost / float64(len(mix))
	budget := engineBudget(f, slo)
	if budget <= 0 {
		return nil, fmt.Errorf("calibrate: SLO %v is shorter than the fleet's longest round trip", slo)
	}
	out := map[string]float64{}
	for _, c := range f.Clusters {
		if _, done := out[c.Profile]; done {
			continue
		}
		p, ok := replica.LookupProfile(c.Profile)
		if !ok {
			return nil, fmt.Errorf("calibrate: cluster %s: unknown replica profile %q", c.Name, c.Profile)
		}
		sat, err := saturation(p, mix)
		if err != nil {
			return nil, fmt.Errorf("calibrate: profile %s: %w", c.Profile, err)
		}
		lo, hi := 0.0, sat
		for range calibrationSteps {
			rate := (lo + hi) / 2
			// Two independent arrival sequences, the worse one counts: one
			// 5-minute run's p99 is noisy near the knee.
			p99 := time.Duration(0)
			for seed := range uint64(2) {
				v, err := ttftP99(p, mix, rate, seed)
				if err != nil {
					return nil, fmt.Errorf("calibrate: profile %s: %w", c.Profile, err)
				}
				p99 = max(p99, v)
			}
			if p99 <= budget {
				lo = rate
			} else {
				hi = rate
			}
		}
		if lo <= 0 {
			return nil, fmt.Errorf("calibrate: profile %s cannot meet the SLO less the longest round trip (%v) even at low load", c.Profile, budget)
		}
		out[c.Profile] = lo * meanCost
	}
	return out, nil
}

// ttftQuantile is the share of requests the SLO is met for in
// calibration (p99) and in the capacity estimator.
const ttftQuantile = 0.99

// engineBudget is the engine's share of the SLO: what is left after the
// fleet's longest round trip (a request may cross it, half each way).
func engineBudget(f Fleet, slo time.Duration) time.Duration {
	budget := slo
	for _, l := range f.Links {
		budget = min(budget, slo-time.Duration(l.RTTMs*float64(time.Millisecond)))
	}
	return budget
}

// sample takes n requests spread evenly over the whole workload (all of
// them when there are fewer): the mix of a steady state, with sessions'
// later turns and every phase of the day, not the first seconds of the
// run.
func sample(reqs []workload.Request, n int) []workload.Request {
	if len(reqs) <= n {
		return reqs
	}
	out := make([]workload.Request, n)
	for i := range out {
		out[i] = reqs[i*len(reqs)/n]
	}
	return out
}

// requestCost is a request's token cost with ILB's default model costs.
func requestCost(q workload.Request) float64 { return float64(q.Prompt) + 4*float64(q.Output) }

// saturation is the replica's throughput, in requests per second, on the
// whole mix queued at once.
func saturation(p replica.Profile, mix []workload.Request) (float64, error) {
	m, err := replica.New(replica.Options{Profile: p, Name: "calibration"})
	if err != nil {
		return 0, err
	}
	for i, q := range mix {
		m.Submit(0, replica.Request{ID: uint64(i), Prompt: q.Prompt, Output: q.Output})
	}
	end := drain(m)
	if end <= 0 {
		return 0, errors.New("served nothing")
	}
	return float64(len(mix)) / end.Seconds(), nil
}

// ttftP99 runs Poisson arrivals of the mix (cycled; seed picks the
// arrival sequence) at rate requests per second for calibrationSpan and
// returns the p99 time to first token.
func ttftP99(p replica.Profile, mix []workload.Request, rate float64, seed uint64) (time.Duration, error) {
	m, err := replica.New(replica.Options{Profile: p, Name: "calibration"})
	if err != nil {
		return 0, err
	}
	rng := rand.New(rand.NewPCG(math.Float64bits(rate), 0xca1+seed))
	var ttft []time.Duration
	var res []replica.Result
	collect := func(rs []replica.Result) {
		for _, x := range rs {
			if !x.Failed {
				ttft = append(ttft, x.FirstToken-x.Arrival)
			}
		}
	}
	at := time.Duration(0)
	for i := 0; ; i++ {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if at >= calibrationSpan {
			break
		}
		res = m.Advance(at, res[:0])
		collect(res)
		q := mix[i%len(mix)]
		m.Submit(at, replica.Request{ID: uint64(i), Prompt: q.Prompt, Output: q.Output})
	}
	res = m.Advance(math.MaxInt64, res[:0])
	collect(res)
	if len(ttft) == 0 {
		// At a rate this low nothing arrived in the span: no request
		// missed the SLO. (Every request submitted is served: the replica
		// only fails when told to.)
		return 0, nil
	}
	slices.Sort(ttft)
	return ttft[min(len(ttft)-1, int(math.Ceil(0.99*float64(len(ttft))))-1)], nil
}

// SaturationThroughput measures the most one replica of profile p
// sustains of the mix, in token-cost units per second (prompt + 4 ×
// output): Poisson arrivals at rates from 0.6 to 2 times the rate at which
// it drains the whole mix queued at once, each for six minutes, its token
// counters read between the first and the sixth; the highest throughput
// of the sweep. Deeper overload can serve less (long prompts fill the KV
// cache and preemption recomputes work), so the knee, not the deepest
// overload, is the saturation throughput. It is the figure a learned
// capacity is checked against.
func SaturationThroughput(p replica.Profile, mix []workload.Request) (float64, error) {
	if len(mix) == 0 {
		return 0, errors.New("saturation: no requests")
	}
	rate, err := saturation(p, mix)
	if err != nil {
		return 0, fmt.Errorf("saturation: %w", err)
	}
	best := 0.0
	for _, f := range []float64{0.6, 0.8, 1, 1.2, 1.5, 2} {
		x, err := sustained(p, mix, f*rate)
		if err != nil {
			return 0, err
		}
		best = max(best, x)
	}
	return best, nil
}

// sustained is the throughput of one replica of p under Poisson arrivals
// of the mix at rate requests per second, between its first and sixth
// minute, in token-cost units per second.
func sustained(p replica.Profile, mix []workload.Request, rate float64) (float64, error) {
	m, err := replica.New(replica.Options{Profile: p, Name: "saturation"})
	if err != nil {
		return 0, err
	}
	const from, to = time.Minute, 6 * time.Minute
	rng := rand.New(rand.NewPCG(0x5a7, math.Float64bits(rate)))
	var res []replica.Result
	var start replica.Load
	started := false
	at := time.Duration(0)
	for i := 0; at < to; i++ {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if !started && at >= from {
			res = m.Advance(from, res[:0])
			start, started = m.Load(), true
		}
		res = m.Advance(min(at, to), res[:0])
		q := mix[i%len(mix)]
		m.Submit(at, replica.Request{ID: uint64(i), Prompt: q.Prompt, Output: q.Output})
	}
	end := m.Load()
	tokens := float64(end.PromptTokens-start.PromptTokens) + 4*float64(end.GenerationTokens-start.GenerationTokens)
	return tokens / (to - from).Seconds(), nil
}

// drain steps m until it is idle and returns the end of its last step.
func drain(m *replica.Replica) time.Duration {
	var res []replica.Result
	var end time.Duration
	for {
		at, busy := m.Next()
		if !busy {
			return end
		}
		res = m.Advance(at, res[:0])
		end = at
	}
}
