package xds

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// cacheLogger adapts slog to go-control-plane's logger. Its messages can
// quote what a peer sent (a request's resource names), so each is bounded
// to 1 KiB, and its warnings and errors pass at most once per format
// string every 10 s (the number held back is told with the next one).
// go-control-plane's info lines are logged at debug level.
type cacheLogger struct {
	l     *slog.Logger
	now   func() time.Time
	limit *logLimiter
}

func newCacheLogger(l *slog.Logger, now func() time.Time) cacheLogger {
	// The formats are go-control-plane's constants: a small, fixed set.
	return cacheLogger{l: l, now: now, limit: newLogLimiter(10*time.Second, 128)}
}

func (c cacheLogger) Debugf(f string, a ...any) { c.logf(slog.LevelDebug, f, a) }
func (c cacheLogger) Infof(f string, a ...any)  { c.logf(slog.LevelDebug, f, a) }
func (c cacheLogger) Warnf(f string, a ...any)  { c.logf(slog.LevelWarn, f, a) }
func (c cacheLogger) Errorf(f string, a ...any) { c.logf(slog.LevelError, f, a) }

func (c cacheLogger) logf(level slog.Level, f string, a []any) {
	ctx := context.Background()
	if !c.l.Enabled(ctx, level) {
		return
	}
	if level < slog.LevelWarn {
		c.l.Log(ctx, level, bounded(fmt.Sprintf(f, a...), maxLogLine))
		return
	}
	ok, suppressed := c.limit.allow(f, c.now())
	if !ok {
		return
	}
	msg := "xds: go-control-plane: " + bounded(fmt.Sprintf(f, a...), maxLogLine)
	if suppressed > 0 {
		c.l.Log(ctx, level, msg, "suppressed", suppressed)
		return
	}
	c.l.Log(ctx, level, msg)
}
