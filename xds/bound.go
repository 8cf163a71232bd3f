package xds

import (
	"crypto/sha256"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"
)

// Bounds of the strings an Envoy (or anyone reaching the xDS port) sends
// that ILB keeps: in node records, logs, spans, errors and /debug JSON.
const (
	maxNodeID   = 256  // node.id
	maxMessage  = 1024 // a NACK's error_detail.message
	maxExcerpt  = 64   // an unknown node.cluster quoted in an error or a log line
	maxLogLine  = 1024 // a go-control-plane log message
	maxBanned   = 64   // banned versions kept per source (newest)
	maxGoodSnap = 8    // fully acknowledged snapshots kept per key (rollback targets)
)

// bounded returns s when it is at most limit bytes, else its first bytes
// (cut on a rune boundary) followed by how many bytes were elided.
func bounded(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d more bytes)", s[:cut], len(s)-cut)
}

// boundedID is a node id fit to key a record: the id itself when it is at
// most maxNodeID bytes, else its first bytes, its length and a hash of
// the whole, so that two long ids sharing a prefix stay two nodes.
func boundedID(id string) string {
	if len(id) <= maxNodeID {
		return id
	}
	cut := maxNodeID - 64
	for cut > 0 && !utf8.RuneStart(id[cut]) {
		cut--
	}
	sum := sha256.Sum256([]byte(id))
	return fmt.Sprintf("%s…(%d bytes, sha256 %x)", id[:cut], len(id), sum[:8])
}

// logLimiter lets a log line through at most once per key per period,
// for at most size keys at a time; the lines it holds back are counted
// and reported with the next line it lets through. Safe for concurrent
// use.
type logLimiter struct {
	period time.Duration
	size   int

	mu         sync.Mutex
	last       map[string]time.Time
	suppressed int
}

func newLogLimiter(period time.Duration, size int) *logLimiter {
	return &logLimiter{period: period, size: size, last: map[string]time.Time{}}
}

// allow reports whether the line of key may be logged at now, and how
// many lines were held back since the last one let through.
func (l *logLimiter) allow(key string, now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if at, seen := l.last[key]; seen && now.Sub(at) < l.period {
		l.suppressed++
		return false, 0
	}
	if _, seen := l.last[key]; !seen && len(l.last) >= l.size {
		for k, at := range l.last {
			if now.Sub(at) >= l.period {
				delete(l.last, k)
			}
		}
		if len(l.last) >= l.size {
			l.suppressed++
			return false, 0
		}
	}
	l.last[key] = now
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}
