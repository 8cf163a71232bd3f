package demand

import (
	"strconv"
	"time"
)

const (
	// logEvery is how often one key (a reporter, or the expiry of
	// reporters) may log a line; what comes in between is counted and
	// said in the next line.
	logEvery = time.Minute
	// logKeys bounds the keys the limiter remembers; past it, new keys
	// share one.
	logKeys = 1024
	// keptRefusals is how many refused reports Status shows.
	keptRefusals = 8
)

// limiter lets one log line per key through every logEvery and counts
// what it held back. Used under the aggregator's lock.
type limiter struct {
	keys map[string]*held
}

type held struct {
	last  time.Time
	count int // events held back since last
}

// allow reports whether key may log at now and, if so, how many events
// were held back since its previous line; when it may not, the event is
// counted.
func (l *limiter) allow(key string, now time.Time) (bool, int) {
	if l.keys == nil {
		l.keys = map[string]*held{}
	}
	h := l.keys[key]
	if h == nil {
		if len(l.keys) >= logKeys {
			for k, v := range l.keys {
				if now.Sub(v.last) >= logEvery {
					delete(l.keys, k)
				}
			}
		}
		if len(l.keys) >= logKeys {
			key = "(other reporters)"
			h = l.keys[key]
		}
		if h == nil {
			h = &held{}
			l.keys[key] = h
			h.last = now
			return true, 0
		}
	}
	if now.Sub(h.last) < logEvery {
		h.count++
		return false, 0
	}
	n := h.count
	h.last, h.count = now, 0
	return true, n
}

// Refusal is a report the aggregator refused, in whole or in part.
type Refusal struct {
	At   time.Time `json:"at"`
	Node string    `json:"node"` // quoted, at most 64 bytes of it
	// Entries is how many entries (localities) of the report were
	// refused; the rest were summed.
	Entries int `json:"entries"`
	// Reasons are the first three: which entry, which value, what bound.
	Reasons []string `json:"reasons"`
}

// noteRefusal records a refused report for Status and logs it, rate
// limited per reporter. Under a.mu.
func (a *Aggregator) noteRefusal(now time.Time, node string, entries int, reasons []string) {
	r := Refusal{At: now, Node: show(node), Entries: entries, Reasons: reasons}
	a.refusals = append(a.refusals, r)
	if len(a.refusals) > keptRefusals {
		a.refusals = a.refusals[len(a.refusals)-keptRefusals:]
	}
	ok, held := a.logs.allow("node "+r.Node, now)
	if !ok {
		return
	}
	a.log.Warn("demand report: entries refused", "node", r.Node, "entries", entries, "reasons", reasons,
		"reports_held_back", held, "log_every", logEvery)
}

// noteExpired logs reporters forgotten for their silence, rate limited.
// Under a.mu.
func (a *Aggregator) noteExpired(now time.Time, nodes []string, horizon time.Duration) {
	ok, held := a.logs.allow("expired", now)
	if !ok {
		return
	}
	shown := nodes[:min(len(nodes), 5)]
	a.log.Warn("demand reporters expired: silent for more than "+strconv.Itoa(expiryIntervals)+" report intervals",
		"nodes", shown, "count", len(nodes), "silent_over", horizon, "lines_held_back", held, "log_every", logEvery)
}
