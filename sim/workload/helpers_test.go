package workload

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// traceDir holds the Azure LLM inference traces 2023 (Azure Public Dataset,
// Patel et al., Splitwise, ISCA 2024; CC-BY 4.0), outside the repository.
const traceDir = "../../../shared/traces"

// loadTrace reads a trace of traceDir, or skips the test if it is absent.
func loadTrace(tb testing.TB, name string) []Row {
	tb.Helper()
	path := filepath.Join(traceDir, name)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		tb.Skipf("trace %s is absent (the Azure LLM inference traces are read from the shared traces directory, never copied into the repository)", path)
	}
	rows, err := LoadTrace(path)
	if err != nil {
		tb.Fatalf("LoadTrace: %v", err)
	}
	return rows
}

// asRequests turns trace rows into requests of one source, for Summarize.
func asRequests(rows []Row) []Request {
	reqs := make([]Request, len(rows))
	for i, r := range rows {
		reqs[i] = Request{At: r.At, Source: "trace", Model: "m", Priority: PriorityStandard, Prompt: r.Input, Output: r.Output}
	}
	return reqs
}

// near reports a failure unless got is within rel (relative) of want.
func near(tb testing.TB, what string, got, want, rel float64) {
	tb.Helper()
	if math.Abs(got-want) > rel*math.Abs(want) {
		tb.Errorf("%s = %.4g, want %.4g ± %.1f%%", what, got, want, 100*rel)
	}
}

// baseSource is a valid, plain source: Poisson at rate req/s, one model,
// fixed-ish lengths.
func baseSource(name string, rate float64) SourceSpec {
	return SourceSpec{
		Name:     name,
		MeanRate: rate,
		Models:   []Share{{Name: "m", Weight: 1}},
		Lengths:  Lengths{InputMean: 500, InputP99: 2000, OutputMean: 100, OutputP99: 400},
	}
}

// generate is Generate that fails the test on error.
func generate(tb testing.TB, s Spec) []Request {
	tb.Helper()
	reqs, err := Generate(s)
	if err != nil {
		tb.Fatalf("Generate: %v", err)
	}
	return reqs
}

// bySource splits requests by source.
func bySource(reqs []Request) map[string][]Request {
	out := map[string][]Request{}
	for _, r := range reqs {
		out[r.Source] = append(out[r.Source], r)
	}
	return out
}

// gapsCV is the coefficient of variation of the gaps between arrivals.
func gapsCV(reqs []Request) float64 {
	var sum, sq float64
	for i := 1; i < len(reqs); i++ {
		g := (reqs[i].At - reqs[i-1].At).Seconds()
		sum += g
		sq += g * g
	}
	n := float64(len(reqs) - 1)
	mean := sum / n
	return math.Sqrt(sq/n-mean*mean) / mean
}

// peakPhase estimates where in the period the rate of reqs peaks, in
// cycles in [0, 1), and the relative amplitude of the daily sine, from the
// first Fourier coefficient of the arrival times.
func peakPhase(reqs []Request, period time.Duration) (phase, amplitude float64) {
	var c, s float64
	for _, r := range reqs {
		x := 2 * math.Pi * r.At.Seconds() / period.Seconds()
		c += math.Cos(x)
		s += math.Sin(x)
	}
	phase = math.Atan2(s, c) / (2 * math.Pi)
	if phase < 0 {
		phase++
	}
	return phase, 2 * math.Hypot(c, s) / float64(len(reqs))
}

// cycleDiff is the distance between two phases on the circle, in cycles.
func cycleDiff(a, b float64) float64 {
	d := math.Mod(math.Abs(a-b), 1)
	return min(d, 1-d)
}
