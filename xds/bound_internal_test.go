package xds

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestBounded(t *testing.T) {
	tests := []struct {
		name, in string
		limit    int
		want     string
	}{
		{"short: unchanged", "edge-us", 8, "edge-us"},
		{"exactly the limit: unchanged", "abcd", 4, "abcd"},
		{"long: head and the rest's length", "abcdefgh", 4, "abcd…(4 more bytes)"},
		{"cut inside a rune: before it", "abcé", 4, "abc…(2 more bytes)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := bounded(tc.in, tc.limit); got != tc.want || !utf8.ValidString(got) {
				t.Errorf("bounded(%q, %d) = %q; want %q", tc.in, tc.limit, got, tc.want)
			}
		})
	}
	long := strings.Repeat("é", 1000)
	a, b := boundedID(long+"a"), boundedID(long+"b")
	if a == b || len(a) > maxNodeID+64 || !utf8.ValidString(a) {
		t.Errorf("boundedID: %q and %q; want two distinct valid strings of about %d bytes", a, b, maxNodeID)
	}
}

func TestLogLimiter(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLogLimiter(time.Minute, 2)
	steps := []struct {
		name       string
		key        string
		at         time.Duration
		ok         bool
		suppressed int
	}{
		{"first of a key", "a", 0, true, 0},
		{"same key within the period", "a", 30 * time.Second, false, 0},
		{"another key, told what was held back", "b", 31 * time.Second, true, 1},
		{"a third key while the set is full", "c", 32 * time.Second, false, 0},
		{"a key again after its period", "a", 61 * time.Second, true, 1},
		{"a new key once an entry expired", "c", 92 * time.Second, true, 0},
	}
	for _, s := range steps {
		ok, suppressed := l.allow(s.key, t0.Add(s.at))
		if ok != s.ok || suppressed != s.suppressed {
			t.Errorf("%s: allow = %v, %d; want %v, %d", s.name, ok, suppressed, s.ok, s.suppressed)
		}
	}
	if len(l.last) > 2 {
		t.Errorf("%d keys held; want at most 2", len(l.last))
	}
}
