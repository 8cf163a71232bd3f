package extproc

import (
	"math"
	"sync/atomic"

	"github.com/ilbproject/ilb/route"
)

// inflight is what ext_proc sent to one engine cluster and has not heard
// back from: the requests whose response headers (for a streaming
// response, the first token) have not come back yet, and their estimated
// cost. It is the fast loop's view of a burst before the engines'
// metrics show it: the count predicts the next request's time to first
// token (route.PredictTTFT), the cost is the work balancing compares
// (route.Signal.Work). Safe for concurrent use.
type inflight struct {
	n atomic.Int64
	// work is the sum of the requests' costs in thousandths of a
	// token-cost unit, prompt the sum of their prompts' estimated tokens
	// in thousandths (integers, so that adding and removing the same
	// request leaves no rounding behind).
	work, prompt atomic.Int64
	// calib is how the first tokens of ext_proc's followed streaming
	// responses from the cluster compare with their predictions
	// (route.Signal.FirstTokenScale).
	calib route.Calibration
}

// maxMilliCost bounds one request's share of work (thousandths of a
// token-cost unit): a cost is the estimate ext_proc capped, this only
// keeps the sum far from overflowing whatever the estimate.
const maxMilliCost = 1 << 40

// booked is what add counted of one request, to pass to remove.
type booked struct{ work, prompt int64 }

// add counts a request of the given cost and prompt tokens and returns
// what to pass to remove when its response comes.
func (f *inflight) add(cost, prompt float64) booked {
	b := booked{work: milli(cost), prompt: milli(prompt)}
	f.n.Add(1)
	f.work.Add(b.work)
	f.prompt.Add(b.prompt)
	return b
}

// milli is v in thousandths, bounded by maxMilliCost; NaN and negative
// values count as 0.
func milli(v float64) int64 {
	if v > 0 {
		return int64(math.Min(v*1000, maxMilliCost))
	}
	return 0
}

// remove stops counting a request add counted (b is what add returned).
func (f *inflight) remove(b booked) {
	f.n.Add(-1)
	f.work.Add(-b.work)
	f.prompt.Add(-b.prompt)
}

// load is the requests in flight, their cost, in token-cost units, and
// their prompts' tokens.
func (f *inflight) load() (n int64, work, prompt float64) {
	return f.n.Load(), float64(max(f.work.Load(), 0)) / 1000, float64(max(f.prompt.Load(), 0)) / 1000
}
