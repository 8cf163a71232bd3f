package auth

import (
	"sync"
	"time"
)

// maxLogKeys bounds the keys the refusal log remembers.
const maxLogKeys = 1024

// overflowKey stands for every key that finds the limiter full.
const overflowKey = "\x00overflow"

// logLimiter lets one log line a key through per period, and counts the
// rest. Bounded: past maxLogKeys keys (after forgetting those older than
// a period), every new key shares one overflow key.
type logLimiter struct {
	every time.Duration

	mu   sync.Mutex
	keys map[string]*logKey
}

type logKey struct {
	last       time.Time
	suppressed int
}

// allow reports whether a line for key may be logged at now, and how
// many were suppressed since the last one for the key.
func (l *logLimiter) allow(key string, now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = map[string]*logKey{}
	}
	k := l.keys[key]
	if k == nil && len(l.keys) >= maxLogKeys {
		for key, k := range l.keys {
			if now.Sub(k.last) >= l.every {
				delete(l.keys, key)
			}
		}
		if len(l.keys) >= maxLogKeys {
			key = overflowKey
			k = l.keys[key]
		}
	}
	if k == nil {
		// Strings from peers are bounded by the caller; copying the key
		// keeps no request memory alive.
		l.keys[string([]byte(key))] = &logKey{last: now}
		return true, 0
	}
	if now.Sub(k.last) < l.every {
		k.suppressed++
		return false, 0
	}
	n := k.suppressed
	k.last, k.suppressed = now, 0
	return true, n
}
