package app

import (
	"log/slog"
	"sync"

	"k8s.io/klog/v2"
)

var klogOnce sync.Once

// useKlogSlog sends client-go's log lines (klog, a process-wide logger
// that ILB cannot inject) to log, once per process: the first App with
// Kubernetes discovery sets it. ILB's own account of an API server out of
// reach is the signals monitor's (the cluster's discovery error).
func useKlogSlog(log *slog.Logger) {
	klogOnce.Do(func() { klog.SetSlogLogger(log) })
}
