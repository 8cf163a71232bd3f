package live

import (
	"math"
	"time"

	"github.com/ilbproject/ilb/capacity"
	"github.com/ilbproject/ilb/signals"
)

// PrefillWindow is the time constant over which a cluster's prefill
// speed (Cluster.PrefillPerToken) pools its intervals: the capacity
// estimator's smoothing window (capacity.DefaultSmoothTime).
//
// One interval's figure is its mean time to first token over its mean
// prompt, a second of a few first tokens of whatever sizes came: on a
// held-out trace of long prompts (15,000 tokens on average) the same
// H100 cluster read from 6.5 to 45 µs a token between the 10th and 90th
// percentiles of its intervals, and its A100 neighbours no slower (a
// median of 49 µs, a 10th percentile of 0 to 20 µs). Balancing and the
// move within the TTFT target acted on that noise: prompts of 50,000
// tokens went to A100 clusters, where their prefill alone is past a 2 s
// target. Pooled — total time over total tokens — the same intervals
// read 28–32 µs on every H100 cluster and 61–64 µs on every A100 one,
// the two GPUs' real ratio.
const PrefillWindow = capacity.DefaultSmoothTime

// prefill pools the prefill figure of c, the signals' view of cluster
// name at at, into cl, from prev's (nil: none).
//
// An interval slower than the pool is taken at once, as contention in
// the batch (a busier batch prefills slower), not averaged away: pooled
// alone, the long-prompt workload at 1.1 of the fleet's throughput lost
// its tail (p99 TTFT 1.82 → 1.85 s, 1.72 → 1.78 s and 1.76 → 1.84 s on
// seeds 1–3); taken at once, 1.79, 1.73 and 1.76 s. A faster interval
// counts only through the pool.
func (cl *Cluster) prefill(c signals.Cluster, at time.Time, prev *State, name string) {
	dt := 1.0 // the first view: any weight, the ratio is the interval's
	if prev != nil {
		was := prev.Clusters[name]
		dt = at.Sub(prev.At).Seconds()
		if !(dt >= 0) {
			dt = 0 // a view out of order adds nothing
		}
		keep := math.Exp(-dt / PrefillWindow.Seconds())
		cl.PrefillSeconds, cl.PrefillTokens = was.PrefillSeconds*keep, was.PrefillTokens*keep
	}
	if c.PrefillKnown && c.PromptTokensPerSecond > 0 && c.PrefillSecondsPerToken >= 0 && !math.IsInf(c.PromptTokensPerSecond, 0) && !math.IsInf(c.PrefillSecondsPerToken, 0) {
		cl.PrefillSeconds += c.PrefillSecondsPerToken * c.PromptTokensPerSecond * dt
		cl.PrefillTokens += c.PromptTokensPerSecond * dt
	}
	if cl.PrefillTokens > 0 {
		cl.PrefillPerToken = cl.PrefillSeconds / cl.PrefillTokens
	}
	if c.PrefillKnown && c.PrefillSecondsPerToken > cl.PrefillPerToken && !math.IsInf(c.PrefillSecondsPerToken, 0) {
		cl.PrefillPerToken = c.PrefillSecondsPerToken
	}
}
