package replica

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// azureConvTrace is the Azure LLM inference trace 2023, conversation
// service (CC-BY 4.0, Patel et al., Splitwise, ISCA 2024), read in place:
// never copied into the repository.
const azureConvTrace = "/work/shared/traces/azure-llm-2023-conv.csv"

// sizer draws the (prompt, output) token counts of one request.
type sizer func(rng *rand.Rand) (prompt, output int)

// lognormalSizes approximates the Azure conversation trace: prompts
// lognormal with mean 1155 and p99 4142 tokens (sigma 0.636), outputs
// lognormal with mean 211 (sigma 0.8), both clamped.
func lognormalSizes() sizer {
	const (
		inSigma, outSigma = 0.636, 0.8
	)
	inMu := math.Log(1155) - inSigma*inSigma/2
	outMu := math.Log(211) - outSigma*outSigma/2
	return func(rng *rand.Rand) (int, int) {
		in := math.Exp(inMu + inSigma*rng.NormFloat64())
		out := math.Exp(outMu + outSigma*rng.NormFloat64())
		return int(min(max(in, 1), 16000)), int(min(max(out, 1), 2000))
	}
}

// traceSizes samples (with replacement) the rows of the Azure conversation
// trace; it skips the test when the file is absent.
func traceSizes(tb testing.TB) sizer {
	tb.Helper()
	f, err := os.Open(azureConvTrace)
	if errors.Is(err, os.ErrNotExist) {
		tb.Skipf("trace %s absent: the trace-driven case needs it (the lognormal case covers the model)", azureConvTrace)
	}
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var rows [][2]int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), ",")
		if len(cols) != 3 || cols[0] == "TIMESTAMP" {
			continue
		}
		in, err1 := strconv.Atoi(cols[1])
		out, err2 := strconv.Atoi(cols[2])
		if err := errors.Join(err1, err2); err != nil {
			tb.Fatalf("trace row %q: %v", sc.Text(), err)
		}
		rows = append(rows, [2]int{in, out})
	}
	if err := sc.Err(); err != nil || len(rows) == 0 {
		tb.Fatalf("trace %s: %d rows, %v", azureConvTrace, len(rows), err)
	}
	return func(rng *rand.Rand) (int, int) {
		r := rows[rng.IntN(len(rows))]
		return r[0], r[1]
	}
}

// arrival is one request of an open-loop workload.
type arrival struct {
	at  time.Duration
	req Request
}

// poisson returns Poisson arrivals at rate per second over [0, d), sized
// by size, reproducible from seed.
func poisson(rate float64, d time.Duration, size sizer, seed uint64) []arrival {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	var out []arrival
	t := 0.0
	for id := uint64(0); ; id++ {
		t += rng.ExpFloat64() / rate
		at := time.Duration(t * float64(time.Second))
		if at >= d {
			return out
		}
		p, o := size(rng)
		out = append(out, arrival{at: at, req: Request{ID: id, Prompt: p, Output: o}})
	}
}

// drive submits the arrivals to r in time order, as a discrete-event
// runner would, runs it until until, and returns every result.
func drive(r *Replica, arrivals []arrival, until time.Duration) []Result {
	var out []Result
	for _, a := range arrivals {
		out = r.Advance(a.at, out)
		r.Submit(a.at, a.req)
	}
	return r.Advance(until, out)
}

// newReplica returns a replica of o, failing the test on error.
func newReplica(tb testing.TB, o Options) *Replica {
	tb.Helper()
	r, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// mustProfile returns the shipped profile name.
func mustProfile(tb testing.TB, name string) Profile {
	tb.Helper()
	p, ok := LookupProfile(name)
	if !ok {
		tb.Fatalf("no profile %q", name)
	}
	return p
}

// quantile returns the q-quantile (nearest rank) of ds, 0 if empty.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)]
}

// loadStats summarises an open-loop run: offered and achieved rates in a
// window, and TTFT quantiles of the requests arriving in it.
type loadStats struct {
	offered, throughput float64 // req/s in the window
	p50, p99            time.Duration
	preemptions         int
}

func (s loadStats) String() string {
	return fmt.Sprintf("offered %.1f/s served %.1f/s TTFT p50 %v p99 %v preemptions %d",
		s.offered, s.throughput, s.p50.Round(time.Millisecond), s.p99.Round(time.Millisecond), s.preemptions)
}

// openLoop runs Poisson arrivals at rate for d, then lets the replica
// drain, and measures the window [d/5, d).
func openLoop(tb testing.TB, o Options, rate float64, d time.Duration, size sizer, seed uint64) loadStats {
	tb.Helper()
	r := newReplica(tb, o)
	arrivals := poisson(rate, d, size, seed)
	res := drive(r, arrivals, d)
	lo, hi := d/5, d
	var st loadStats
	for _, x := range res {
		if x.Done >= lo && x.Done < hi {
			st.throughput++
		}
	}
	res = r.Advance(math.MaxInt64, res)
	var ttft []time.Duration
	for _, x := range res {
		if x.Failed {
			tb.Fatalf("request %d failed: %+v", x.ID, x)
		}
		if x.Arrival >= lo && x.Arrival < hi {
			st.offered++
			ttft = append(ttft, x.FirstToken-x.Arrival)
		}
	}
	w := (hi - lo).Seconds()
	st.offered, st.throughput = st.offered/w, st.throughput/w
	st.p50, st.p99 = quantile(ttft, 0.5), quantile(ttft, 0.99)
	st.preemptions = r.Load().Preemptions
	return st
}
