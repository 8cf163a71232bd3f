package envoysim

import (
	"context"
	"time"
)

// Clock is the time source of the timers envoysim models with Envoy's
// monotonic clock: active health check intervals, the outlier detection
// interval and ejection times, slow start windows and retry back-off. Tests
// inject a fake one to control time. Route, idle and connect timeouts and
// health check probe timeouts always use real time.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d, or until ctx is done, in which case it returns
	// ctx's error.
	Sleep(ctx context.Context, d time.Duration) error
}

// realClock is the wall clock.
type realClock struct{}

var _ Clock = realClock{}

// Now implements Clock.
func (realClock) Now() time.Time { return time.Now() }

// Sleep implements Clock.
func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
