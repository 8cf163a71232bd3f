package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

// Sink serves weights versions. A version is rolled out in two phases so
// that it reaches every sink or none: Prepare builds and checks everything
// the sink needs for w without changing what it serves, and returns commit,
// which switches the sink to w and cannot fail.
type Sink interface {
	Prepare(ctx context.Context, w *weights.Weights) (commit func(), err error)
}

// refresher is a sink that also takes the fresh weights of a tick whose
// routing did not change (same version, new demand and explanations):
// metrics must describe the latest tick, not the first of a version.
type refresher interface {
	Refresh(w *weights.Weights)
}

// StateFunc returns the current state of every engine cluster and when it
// was observed.
type StateFunc func() (map[string]weights.ClusterState, time.Time)

// DemandFunc returns the demand measured since the last call (rates per
// stream, canonical model names) and how fresh it is: the time by which
// every reporter had reported. A reporter that falls silent makes the
// demand stale (the controller then keeps the last good weights), rather
// than look like zero demand.
type DemandFunc func() (weights.Demand, time.Time)

// Options configure a Controller.
type Options struct {
	Config *config.Config // validated; required
	Policy weights.Policy // required
	// Fallback computes weights when Policy fails and there are no last
	// good weights to keep; nil: Proportional.
	Fallback weights.Policy
	// State reports cluster states; nil means StaticState(Config), always
	// fresh.
	State StateFunc
	// Demand reports measured demand; nil means none (every cell is
	// planned for controller.min_cell_demand).
	Demand DemandFunc
	// Blind says why the cluster state cannot be trusted now, "" when it
	// can (signals.Monitor.Blind: ILB's own probes fail silently for most
	// of the fleet, or its signals loop is behind). While it gives a
	// reason every tick fails static with reason "blind", whatever the
	// state says, and the last good weights stay. nil: never blind. It is
	// called once per tick and must be cheap and safe for concurrent use.
	Blind func() string
	// Sinks get every new version: all prepare it, then all commit it; a
	// sink that fails to prepare stops the version for every sink.
	Sinks    []Sink
	Logger   *slog.Logger         // nil: discard
	Now      func() time.Time     // nil: time.Now
	Registry *prometheus.Registry // nil: metrics are not exported
	// MinResolveGap: 0 means DefaultMinResolveGap.
	MinResolveGap time.Duration
	// TracerProvider traces every tick as a span "ilb.controller.tick"
	// (the sinks' Prepare runs in its context); nil: no-op.
	TracerProvider trace.TracerProvider
}

// Controller runs the policy every tick and publishes new versions. Its
// methods are safe for concurrent use.
type Controller struct {
	opts    Options
	mu      sync.Mutex // serialises ticks; guards the fields below
	smooth  *Smoother
	guard   guard
	current atomic.Pointer[weights.Weights]
	metrics *controllerMetrics
	trigger chan struct{}
	tracer  trace.Tracer
}

// DefaultMinResolveGap is the least time between two ticks that Trigger
// asks for: a flapping cluster cannot make the controller solve in a loop.
const DefaultMinResolveGap = time.Second

// New checks the options and registers the metrics.
func New(o Options) (*Controller, error) {
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
	if o.MinResolveGap <= 0 {
		o.MinResolveGap = DefaultMinResolveGap
	}
	if o.Fallback == nil {
		o.Fallback = weights.Proportional{}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.State == nil {
		st := weights.StaticState(o.Config)
		now := o.Now
		o.State = func() (map[string]weights.ClusterState, time.Time) { return st, now() }
	}
	if o.Demand == nil {
		now := o.Now
		o.Demand = func() (weights.Demand, time.Time) { return weights.Demand{}, now() }
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.TracerProvider == nil {
		o.TracerProvider = noop.NewTracerProvider()
	}
	m, err := newControllerMetrics(o.Registry)
	if err != nil {
		return nil, err
	}
	return &Controller{
		opts: o, metrics: m, trigger: make(chan struct{}, 1), tracer: o.TracerProvider.Tracer(tracerName),
		smooth: NewSmoother(o.Config.Controller.DemandHalfLife.Std()),
		guard:  guard{cfg: o.Config.Controller, blind: o.Blind},
	}, nil
}

// Current returns the last version every sink accepted, or nil before the
// first. While the controller is fail-static, its Status says why.
func (c *Controller) Current() *weights.Weights { return c.current.Load() }

// Adopt makes w, a version published elsewhere (another ILB replica's,
// read from etcd), the one this controller holds: the next tick plans
// from it (step bounds, movement cost, deadband) and publishes only if
// its result differs. It publishes nothing itself. A nil w changes
// nothing.
func (c *Controller) Adopt(w *weights.Weights) {
	if w == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.current.Store(w)
}

// Tick reads the inputs, computes the weights once and publishes them if
// the version changed. When the inputs are stale or implausible, the
// policy fails or a sink rejects the version, the last good weights stay
// (fail-static): Tick returns the reason, which Current's Status and the
// ilb_controller_fail_static metric show too.
//
// Every tick is a span "ilb.controller.tick" with the policy, the solve
// time, the previous and new weights versions and the outcome
// (ilb.outcome: published, unchanged or fail-static, with
// ilb.fail_static_reason and an error status).
func (c *Controller) Tick(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, span := c.tracer.Start(ctx, "ilb.controller.tick", trace.WithSpanKind(trace.SpanKindInternal))
	defer span.End()
	now := c.opts.Now()
	prev := c.current.Load()
	span.SetAttributes(attribute.String("ilb.policy", c.opts.Policy.Name()), attribute.String("ilb.previous_version", versionOf(prev)))
	states, stateAt := c.opts.State()
	raw, demandAt := c.opts.Demand()

	in := weights.Input{Config: c.opts.Config, Clusters: states, Previous: prev, Now: now}
	// Raw demand is checked before it reaches the moving average: one NaN
	// folded in would fail every later tick.
	if err := weights.CheckDemand(c.opts.Config, raw); err != nil {
		return c.failStatic(ctx, reasonBadInput, fmt.Errorf("measured demand refused: %w", err))
	}
	if reason, err := c.guard.check(now, states, stateAt, raw, demandAt); err != nil {
		return c.failStatic(ctx, reason, err)
	}
	// The rates cover the time up to now; demandAt only says how fresh
	// they are.
	in.Demand = c.smooth.Observe(raw, now)
	c.guard.accept(states, raw)

	start := time.Now()
	w, err := c.opts.Policy.Compute(in)
	solve := time.Since(start).Seconds()
	c.metrics.solve.Observe(solve)
	span.SetAttributes(attribute.Float64("ilb.solve_seconds", solve))
	if err != nil {
		reason := reasonSolver
		if errors.Is(err, weights.ErrBadInput) {
			reason = reasonBadInput
		}
		if prev == nil { // nothing to keep: the fallback policy
			fb, ferr := c.opts.Fallback.Compute(in)
			if ferr != nil {
				return c.failStatic(ctx, reason, errors.Join(err, ferr))
			}
			w = fb.WithStatus(fmt.Sprintf("%s failed (%v): %s fallback", c.opts.Policy.Name(), err, fb.Policy()))
		} else {
			return c.failStatic(ctx, reason, err)
		}
	}
	if prev != nil && prev.Version() == w.Version() {
		// Same routing (a deadband held, or nothing changed): no rollout,
		// but keep the fresh explanation, demand and planned load.
		c.current.Store(w)
		for _, s := range c.opts.Sinks {
			if r, ok := s.(refresher); ok {
				r.Refresh(w)
			}
		}
		span.SetAttributes(attribute.String("ilb.outcome", "unchanged"), attribute.String("ilb.weights_version", w.Version()))
		c.metrics.ticks.WithLabelValues("unchanged").Inc()
		c.metrics.failStatic("")
		return nil
	}
	commits := make([]func(), len(c.opts.Sinks))
	for i, s := range c.opts.Sinks {
		commit, err := s.Prepare(ctx, w)
		if err != nil {
			return c.failStatic(ctx, reasonRejected, fmt.Errorf("weights %s rejected by sink %d (%T): %w", w.Version(), i, s, err))
		}
		commits[i] = commit
	}
	for _, commit := range commits {
		commit()
	}
	c.current.Store(w)
	span.SetAttributes(attribute.String("ilb.outcome", "published"), attribute.String("ilb.weights_version", w.Version()))
	c.metrics.ticks.WithLabelValues("published").Inc()
	c.metrics.failStatic("")
	c.opts.Logger.InfoContext(ctx, "weights published", "version", w.Version(), "policy", w.Policy(), "previous", versionOf(prev))
	return nil
}

// failStatic keeps the last good weights, marks them with the reason and
// returns the error; the tick's span (in ctx) says so.
func (c *Controller) failStatic(ctx context.Context, reason string, err error) error {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(attribute.String("ilb.outcome", "fail-static"), attribute.String("ilb.fail_static_reason", reason),
		attribute.String("ilb.weights_version", versionOf(c.current.Load())))
	span.SetStatus(codes.Error, reason+": "+err.Error())
	c.metrics.ticks.WithLabelValues("failed").Inc()
	c.metrics.failStatic(reason)
	msg := fmt.Sprintf("fail-static (%s): kept the last good weights: %v", reason, err)
	if cur := c.current.Load(); cur != nil {
		c.current.Store(cur.WithStatus(msg))
	}
	c.opts.Logger.WarnContext(ctx, "controller fail-static", "reason", reason, "err", err, "version", versionOf(c.current.Load()))
	return fmt.Errorf("%s: %w", reason, err)
}

// tracerName is the instrumentation scope of the controller's spans.
const tracerName = "github.com/ilbproject/ilb/weights"

func versionOf(w *weights.Weights) string {
	if w == nil {
		return ""
	}
	return w.Version()
}

// Trigger asks Run for a tick now (a cluster became unhealthy or ready),
// at most one per Options.MinResolveGap. It never blocks.
func (c *Controller) Trigger() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// Run ticks at once, then every Config.Controller.Tick and on Trigger,
// until ctx is done. A failed tick is logged and the loop goes on with the
// last good weights.
func (c *Controller) Run(ctx context.Context) error {
	t := time.NewTicker(c.opts.Config.Controller.Tick.Std())
	defer t.Stop()
	for {
		last := time.Now()
		_ = c.Tick(ctx) // logged, counted and shown in Current().Status()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-c.trigger:
			c.metrics.ticks.WithLabelValues("triggered").Inc()
			if wait := c.opts.MinResolveGap - time.Since(last); wait > 0 {
				w := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					w.Stop()
					return nil
				case <-w.C:
				}
			}
			t.Reset(c.opts.Config.Controller.Tick.Std())
		}
	}
}
