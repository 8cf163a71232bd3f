package extproc

import (
	"math"
	"sync/atomic"
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
	// token-cost unit (an integer, so that adding and removing the same
	// request leaves no rounding behind).
	work atomic.Int64
}

// maxMilliCost bounds one request's share of work (thousandths of a
// token-cost unit): a cost is the estimate ext_proc capped, this only
// keeps the sum far from overflowing whatever the estimate.
const maxMilliCost = 1 << 40

// add counts a request of the given cost and returns the amount to pass
// to remove when its response comes.
func (f *inflight) add(cost float64) int64 {
	m := int64(0)
	if cost > 0 { // NaN and negative costs count as 0
		m = int64(math.Min(cost*1000, maxMilliCost))
	}
	f.n.Add(1)
	f.work.Add(m)
	return m
}

// remove stops counting a request add counted (m is what add returned).
func (f *inflight) remove(m int64) {
	f.n.Add(-1)
	f.work.Add(-m)
}

// load is the requests in flight and their cost, in token-cost units.
func (f *inflight) load() (int64, float64) {
	return f.n.Load(), float64(max(f.work.Load(), 0)) / 1000
}
