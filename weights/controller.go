package weights

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/config"
)

// Sink serves weights versions. A version is rolled out in two phases so
// that it reaches every sink or none: Prepare builds and checks everything
// the sink needs for w without changing what it serves, and returns commit,
// which switches the sink to w and cannot fail.
type Sink interface {
	Prepare(ctx context.Context, w *Weights) (commit func(), err error)
}

// StateFunc returns the current state of every engine cluster.
type StateFunc func() map[string]ClusterState

// ControllerOptions configure a Controller.
type ControllerOptions struct {
	Config *config.Config // validated; required
	Policy Policy         // required
	// State reports cluster states; nil means StaticState(Config).
	State StateFunc
	// Sinks get every new version: all prepare it, then all commit it; a
	// sink that fails to prepare stops the version for every sink.
	Sinks    []Sink
	Logger   *slog.Logger         // nil: discard
	Now      func() time.Time     // nil: time.Now
	Registry *prometheus.Registry // nil: metrics are not exported
}

// Controller runs the policy every tick and publishes new versions. Its
// methods are safe for concurrent use.
type Controller struct {
	opts    ControllerOptions
	mu      sync.Mutex // serialises ticks
	current atomic.Pointer[Weights]
	metrics controllerMetrics
}

type controllerMetrics struct {
	ticks *prometheus.CounterVec
	solve prometheus.Histogram
}

// NewController checks the options and registers the metrics.
func NewController(o ControllerOptions) (*Controller, error) {
	var errs []error
	if o.Config == nil {
		errs = append(errs, errors.New("controller: Config is required"))
	}
	if o.Policy == nil {
		errs = append(errs, errors.New("controller: Policy is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if o.State == nil {
		st := StaticState(o.Config)
		o.State = func() map[string]ClusterState { return st }
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	c := &Controller{opts: o, metrics: controllerMetrics{
		ticks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_controller_ticks_total",
			Help: "Controller ticks by result: published (a new version reached every sink), unchanged (same version), failed (kept the last good version).",
		}, []string{"result"}),
		solve: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ilb_controller_solve_seconds",
			Help:    "Time the policy took to compute the weights of one tick.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
	}}
	if o.Registry != nil {
		if err := registerAll(o.Registry, c.metrics.ticks, c.metrics.solve); err != nil {
			return nil, fmt.Errorf("controller metrics: %w", err)
		}
	}
	return c, nil
}

func registerAll(r *prometheus.Registry, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Current returns the last version every sink accepted, or nil before the
// first.
func (c *Controller) Current() *Weights { return c.current.Load() }

// Tick computes the weights once and publishes them if the version
// changed. On error the last good version stays current, in every sink.
func (c *Controller) Tick(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.current.Load()
	start := time.Now()
	w, err := c.opts.Policy.Compute(Input{
		Config:   c.opts.Config,
		Clusters: c.opts.State(),
		Previous: prev,
		Now:      c.opts.Now(),
	})
	c.metrics.solve.Observe(time.Since(start).Seconds())
	if err != nil {
		c.metrics.ticks.WithLabelValues("failed").Inc()
		return fmt.Errorf("compute weights: %w", err)
	}
	if prev != nil && prev.Version() == w.Version() {
		c.metrics.ticks.WithLabelValues("unchanged").Inc()
		return nil
	}
	commits := make([]func(), len(c.opts.Sinks))
	for i, s := range c.opts.Sinks {
		commit, err := s.Prepare(ctx, w)
		if err != nil {
			c.metrics.ticks.WithLabelValues("failed").Inc()
			return fmt.Errorf("weights %s rejected by sink %d (%T): %w", w.Version(), i, s, err)
		}
		commits[i] = commit
	}
	for _, commit := range commits {
		commit()
	}
	c.current.Store(w)
	c.metrics.ticks.WithLabelValues("published").Inc()
	c.opts.Logger.InfoContext(ctx, "weights published", "version", w.Version(), "policy", w.Policy(), "previous", versionOf(prev))
	return nil
}

func versionOf(w *Weights) string {
	if w == nil {
		return ""
	}
	return w.Version()
}

// Run ticks at once, then every Config.Controller.Tick, until ctx is done.
// A failed tick is logged and the loop goes on with the last good weights.
func (c *Controller) Run(ctx context.Context) error {
	t := time.NewTicker(c.opts.Config.Controller.Tick.Std())
	defer t.Stop()
	for {
		if err := c.Tick(ctx); err != nil {
			c.opts.Logger.ErrorContext(ctx, "controller tick failed; keeping the last good weights", "err", err, "version", versionOf(c.Current()))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
