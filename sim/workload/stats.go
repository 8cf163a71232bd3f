package workload

import (
	"math"
	"slices"
	"time"
)

// Stats summarise a workload, for tests and reports.
type Stats struct {
	// Requests is the number of requests.
	Requests int
	// Span is the time covered: the windows [0, w), [w, 2w), ... up to the
	// one holding the last request.
	Span time.Duration
	// Rate is Requests / Span, in requests per second.
	Rate float64
	// PromptMean, PromptP99, OutputMean and OutputP99 are in tokens; the
	// percentiles are nearest-rank.
	PromptMean, PromptP99 float64
	OutputMean, OutputP99 float64
	// CV1s is the coefficient of variation (standard deviation over mean)
	// of the number of requests per 1 s window over Span: about
	// 1/sqrt(rate) for a steady Poisson stream, more when bursty.
	CV1s float64
	// Window is the window given to [Summarize] (1 s if it was <= 0), and
	// CVWindow the coefficient of variation of the counts per Window.
	Window   time.Duration
	CVWindow float64
	// Sessions is the number of distinct session keys, SessionRequests
	// the number of requests that have one.
	Sessions, SessionRequests int
	// PrefixShare is the fraction of prompt tokens covered by Prefix
	// blocks, in [0, 1].
	PrefixShare float64
	// PerSource, PerModel and PerPriority count requests by source, model
	// and priority; PerSource also has rates and means.
	PerSource   map[string]SourceStats
	PerModel    map[string]int
	PerPriority map[string]int
}

// SourceStats summarise the requests of one source.
type SourceStats struct {
	Requests               int
	Rate                   float64 // requests per second over Stats.Span
	PromptMean, OutputMean float64 // tokens
}

// Summarize returns the statistics of reqs, in any order, counting
// requests in windows of the given length (<= 0 means 1 s); a negative At
// counts in the first window.
func Summarize(reqs []Request, window time.Duration) Stats {
	if window <= 0 {
		window = time.Second
	}
	st := Stats{
		Requests:    len(reqs),
		Window:      window,
		PerSource:   map[string]SourceStats{},
		PerModel:    map[string]int{},
		PerPriority: map[string]int{},
	}
	if len(reqs) == 0 {
		return st
	}
	last := time.Duration(0)
	for _, r := range reqs {
		last = max(last, r.At)
	}
	st.Span = last - last%window + window
	st.Rate = float64(len(reqs)) / st.Span.Seconds()
	prompts := make([]int, len(reqs))
	outputs := make([]int, len(reqs))
	sessions := map[string]bool{}
	var promptSum, outputSum, prefixTokens float64
	for i, r := range reqs {
		prompts[i], outputs[i] = r.Prompt, r.Output
		promptSum += float64(r.Prompt)
		outputSum += float64(r.Output)
		prefixTokens += float64(len(r.Prefix) * BlockTokens)
		if r.Session != "" {
			sessions[r.Session] = true
			st.SessionRequests++
		}
		s := st.PerSource[r.Source]
		s.Requests++
		s.PromptMean += float64(r.Prompt)
		s.OutputMean += float64(r.Output)
		st.PerSource[r.Source] = s
		st.PerModel[r.Model]++
		st.PerPriority[r.Priority]++
	}
	n := float64(len(reqs))
	st.PromptMean, st.OutputMean = promptSum/n, outputSum/n
	st.PromptP99, st.OutputP99 = percentile99(prompts), percentile99(outputs)
	st.Sessions = len(sessions)
	if promptSum > 0 {
		st.PrefixShare = min(prefixTokens/promptSum, 1)
	}
	for name, s := range st.PerSource {
		s.Rate = float64(s.Requests) / st.Span.Seconds()
		s.PromptMean /= float64(s.Requests)
		s.OutputMean /= float64(s.Requests)
		st.PerSource[name] = s
	}
	st.CV1s = countCV(reqs, time.Second, st.Span)
	st.CVWindow = countCV(reqs, window, st.Span)
	return st
}

// percentile99 returns the nearest-rank 99th percentile of xs (sorted in
// place).
func percentile99(xs []int) float64 {
	slices.Sort(xs)
	return float64(xs[int(math.Ceil(0.99*float64(len(xs))))-1])
}

// countCV is the coefficient of variation of the numbers of requests in
// the windows of length w tiling [0, span) (a last partial window counts).
func countCV(reqs []Request, w, span time.Duration) float64 {
	counts := make([]float64, int((span+w-1)/w))
	for _, r := range reqs {
		counts[max(int(r.At/w), 0)]++
	}
	var sum, sq float64
	for _, c := range counts {
		sum += c
		sq += c * c
	}
	k := float64(len(counts))
	mean := sum / k
	if mean == 0 {
		return 0
	}
	return math.Sqrt(max(sq/k-mean*mean, 0)) / mean
}
