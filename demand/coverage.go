package demand

import "time"

const (
	// expiryIntervals: a demand reporter silent for more than this many
	// report intervals is forgotten.
	expiryIntervals = 3
	// coverageIntervals caps the time a reporter may have in store: the
	// expiry horizon plus one interval of slack.
	coverageIntervals = expiryIntervals + 1
)

// coverage is the time a reporter's reports may still claim to cover, a
// token bucket of time: it starts with one report interval of slack (a
// reporter's first report may come at once, covering the interval before
// its stream opened), grows with the time that passes up to
// coverageIntervals intervals, and each report spends the interval it
// claims. So over any span, a reporter's reports are believed to cover
// at most that span plus the slack — however long the intervals they
// claim and however often they come — and the rate bound of a report
// (extproc.max_report_rate × the interval believed) cannot be inflated.
// Not safe for concurrent use: one per stream, or under the
// aggregator's lock.
type coverage struct {
	left, limit time.Duration
	at          time.Time
}

func newCoverage(now time.Time, interval time.Duration) *coverage {
	return &coverage{left: interval, limit: coverageIntervals * interval, at: now}
}

// take returns the longest interval a report arriving at now may be
// believed to cover, and spends what the report claims of it (its
// longest claimed interval).
func (c *coverage) take(now time.Time, claim time.Duration) time.Duration {
	if d := now.Sub(c.at); d > 0 { // a clock that steps back adds nothing
		c.left, c.at = min(c.limit, c.left+d), now
	}
	most := c.left
	c.left -= min(max(claim, 0), c.left)
	return most
}
