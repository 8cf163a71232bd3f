package envoysim

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClock is a manual Clock: Sleep blocks until Advance moves the time
// past its deadline.
type fakeClock struct {
	mu       sync.Mutex
	now      time.Time
	sleepers []*sleeper
}

type sleeper struct {
	until time.Time
	wake  chan struct{}
}

var _ Clock = (*fakeClock)(nil)

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// Now implements Clock.
func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sleep implements Clock.
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	if d <= 0 {
		c.mu.Unlock()
		return ctx.Err()
	}
	s := &sleeper{until: c.now.Add(d), wake: make(chan struct{})}
	c.sleepers = append(c.sleepers, s)
	c.mu.Unlock()
	select {
	case <-s.wake:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		c.sleepers = slices.DeleteFunc(c.sleepers, func(o *sleeper) bool { return o == s })
		c.mu.Unlock()
		return ctx.Err()
	}
}

// Advance moves the time forward and wakes the sleepers it passes.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.sleepers = slices.DeleteFunc(c.sleepers, func(s *sleeper) bool {
		if s.until.After(c.now) {
			return false
		}
		close(s.wake)
		return true
	})
}

// waitSleepers waits until n goroutines sleep on the clock.
func (c *fakeClock) waitSleepers(t *testing.T, n int) {
	t.Helper()
	waitFor(t, "sleepers on the fake clock", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.sleepers) >= n
	})
}

// sleepRecorder is a RetrySleep that records the waits and returns at once.
type sleepRecorder struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (r *sleepRecorder) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = append(r.waits, d)
	return ctx.Err()
}

func (r *sleepRecorder) recorded() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.waits)
}

// TestFakeClock checks the test clock itself: a sleeper wakes only once the
// time passes its deadline, and a cancelled sleep returns the context error.
func TestFakeClock(t *testing.T) {
	c := newFakeClock()
	done := make(chan error, 1)
	go func() { done <- c.Sleep(context.Background(), time.Second) }()
	c.waitSleepers(t, 1)
	c.Advance(999 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("woke before its deadline (%v)", err)
	case <-time.After(20 * time.Millisecond):
	}
	c.Advance(time.Millisecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- c.Sleep(ctx, time.Hour) }()
	c.waitSleepers(t, 1)
	cancel()
	if err := <-done; err == nil {
		t.Error("cancelled sleep returned nil")
	}
}
