package app

import (
	"context"
	"log/slog"
	"strings"
	"sync"

	"k8s.io/klog/v2"
)

var klogOnce sync.Once

// useKlogSlog sends client-go's log lines (klog, a process-wide logger
// that ILB cannot inject) to log, once per process: the first App with
// Kubernetes discovery sets it. client-go's reflectors log every failed
// list or watch at error level, every retry (up to every 2 s per watch
// while an API server is out of reach): those lines are dropped, since
// the signals monitor already says it once per error with the cluster,
// the API server and since when (its WARN line, ilb signals, the metric).
func useKlogSlog(log *slog.Logger) {
	klogOnce.Do(func() { klog.SetSlogLogger(slog.New(&quietReflector{log.Handler()})) })
}

// quietReflector drops client-go's "Failed to list" and "Failed to watch"
// records and passes the rest on.
type quietReflector struct{ slog.Handler }

var _ slog.Handler = (*quietReflector)(nil)

// Handle drops a reflector's list or watch failure.
func (q *quietReflector) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "Failed to watch") || strings.HasPrefix(r.Message, "Failed to list") {
		return nil
	}
	return q.Handler.Handle(ctx, r)
}

// WithAttrs and WithGroup keep the filter on derived handlers.
func (q *quietReflector) WithAttrs(as []slog.Attr) slog.Handler {
	return &quietReflector{q.Handler.WithAttrs(as)}
}

func (q *quietReflector) WithGroup(name string) slog.Handler {
	return &quietReflector{q.Handler.WithGroup(name)}
}
