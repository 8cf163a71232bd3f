// Package stack runs the whole ILB stack on loopback: one simulated
// engine per configured endpoint, ILB itself (package app), and one Envoy
// per source — envoysim, or a real envoy binary. The demo and the
// end-to-end tests run on it.
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"golang.org/x/sync/errgroup"

	"github.com/ilbproject/ilb/app"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/sim/engine"
	"github.com/ilbproject/ilb/sim/envoysim"
	"github.com/ilbproject/ilb/sim/fleet"
	"github.com/ilbproject/ilb/xds"
)

// Options configure a stack.
type Options struct {
	// EnvoyBin is a real envoy binary to run per source; "" runs envoysim.
	EnvoyBin string
	// Seed makes envoysim's and ext_proc's random draws reproducible;
	// 0 leaves them random.
	Seed uint64
	// Timing of the engines; nil: engine defaults.
	Timing *engine.FixedTiming
	Logger *slog.Logger // nil: discard
	// EnvoyTLS, when set, gives the Envoy nodeID of source its TLS to ILB
	// (the configuration given to Start then serves TLS: security.tls):
	// typically its own client certificate, the CA of ILB's and ILB's
	// SAN. Nil: plaintext, which a configuration with security.tls
	// refuses.
	EnvoyTLS func(source, nodeID string) (*envoy.UpstreamTLS, error)
	// HA, when set, runs Replicas ILB replicas (at least 2) on that etcd
	// (config ha:, each with its own replica name), and every Envoy lists
	// them all. Nil: one ILB, no etcd.
	HA       *config.HA
	Replicas int
	// Prepare, when set, may change the configuration ILB runs with once
	// the engines are bound (their addresses are in its clusters'
	// endpoints), e.g. to find a cluster's replicas through Kubernetes
	// discovery instead; the result is validated.
	Prepare func(c *config.Config) error
}

// Envoy is the Envoy of one source.
type Envoy struct {
	Source string
	URL    string          // http://host:port of its listener
	Sim    *envoysim.Envoy // nil for a real Envoy
	Boot   *bootstrapv3.Bootstrap
}

// Stack is a running stack. Everything stops when the context given to
// Start is done; Wait returns once it all has.
type Stack struct {
	Config *config.Config // as served: engines and servers on their bound addresses
	App    *app.App       // the ILB (with Options.HA: the first replica)
	// Replicas are the ILB replicas, with Options.HA.
	Replicas []*Replica
	Fleet    *fleet.Fleet
	Envoys   []Envoy

	opts    Options
	group   *errgroup.Group
	cancel  context.CancelFunc
	stopILB context.CancelFunc // stops the running App
	rand    func() uint64      // ext_proc's draw, kept across ILB restarts
	done    <-chan struct{}    // closed when the stack stops
}

// Start runs engines, ILB and one Envoy per source of c, every server on
// an ephemeral loopback port, and returns when every Envoy is ready.
func Start(ctx context.Context, c *config.Config, o Options) (*Stack, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(ctx)
	s := &Stack{opts: o, group: g, cancel: cancel, done: gctx.Done()}
	if err := s.start(gctx, c); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	return s, nil
}

func (s *Stack) start(ctx context.Context, c *config.Config) error {
	f, err := fleet.Start(ctx, c, fleet.Options{Rebind: true, Timing: s.opts.Timing, Logger: s.opts.Logger.With("component", "engine")})
	if err != nil {
		return err
	}
	s.Fleet = f
	s.group.Go(f.Wait)
	cfg := *f.Config
	cfg.Listen.XDS, cfg.Listen.ExtProc, cfg.Listen.Admin = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Sources = slices.Clone(cfg.Sources)
	cfg.Clusters = slices.Clone(cfg.Clusters)
	for i := range cfg.Sources {
		cfg.Sources[i].Listener = "127.0.0.1:0"
		if s.opts.EnvoyBin != "" { // a real Envoy reports no ephemeral port back: pick one
			if cfg.Sources[i].Listener, err = freePort(ctx); err != nil {
				return err
			}
		}
	}
	if s.opts.Prepare != nil {
		if err := s.opts.Prepare(&cfg); err != nil {
			return fmt.Errorf("stack: prepare: %w", err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("stack: config: %w", err)
	}
	s.Config = &cfg
	var draw func() uint64
	if s.opts.Seed != 0 {
		draw = rand.New(rand.NewPCG(s.opts.Seed, 1)).Uint64
	}
	s.rand = lockedRand(draw)
	if s.opts.HA != nil {
		if err := s.startReplicas(ctx, &cfg); err != nil {
			return err
		}
	} else if err := s.startILB(ctx, &cfg); err != nil {
		return err
	}
	for _, src := range cfg.Sources {
		e, err := s.StartEnvoy(ctx, src.Name, s.extprocAddrs())
		if err != nil {
			return err
		}
		s.Envoys = append(s.Envoys, e)
	}
	return nil
}

// startILB runs an App of cfg until ctx is done, the stack stops or
// RestartILB stops it.
func (s *Stack) startILB(ctx context.Context, cfg *config.Config) error {
	actx, cancel := context.WithCancel(ctx)
	a, err := app.Start(actx, app.Options{Config: cfg, Logger: s.opts.Logger.With("component", "ilb"), Rand: s.rand})
	if err != nil {
		cancel()
		return err
	}
	go func() {
		select {
		case <-s.done:
		case <-actx.Done():
		}
		cancel()
	}()
	s.App, s.stopILB = a, cancel
	s.group.Go(a.Wait)
	return nil
}

// RestartILB stops ILB, leaves it down for down, and starts a new one with
// the same configuration on the same addresses, as a crashed control plane
// that is rescheduled would be. Engines and Envoys keep running: they see
// ILB go away and come back. The new App lives until ctx is done or the
// stack stops.
func (s *Stack) RestartILB(ctx context.Context, down time.Duration) error {
	old := s.App
	s.stopILB()
	if err := old.Wait(); err != nil {
		return fmt.Errorf("stack: stopping ILB: %w", err)
	}
	t := time.NewTimer(down)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	cfg := *s.Config
	cfg.Listen.XDS, cfg.Listen.ExtProc, cfg.Listen.Admin = old.XDSAddr(), old.ExtProcAddr(), old.AdminAddr()
	if err := s.startILB(ctx, &cfg); err != nil {
		return fmt.Errorf("stack: restarting ILB: %w", err)
	}
	return nil
}

// StartEnvoy starts one more Envoy of source whose ext_proc filter reaches
// extprocAddr (a dead address models ext_proc being down; several,
// comma-separated, are replicas), and waits until
// it is ready. It runs until ctx is done or the stack stops; Wait waits
// for it too.
func (s *Stack) StartEnvoy(ctx context.Context, source, extprocAddr string) (Envoy, error) {
	src, ok := s.Config.Source(source)
	if !ok {
		return Envoy{}, fmt.Errorf("stack: unknown source %q", source)
	}
	o := envoy.BootstrapOptions{NodeID: fmt.Sprintf("%s-envoy-%d", source, len(s.Envoys)), XDS: s.xdsAddrs(), ExtProc: extprocAddr}
	if s.opts.EnvoyTLS != nil {
		var err error
		if o.TLS, err = s.opts.EnvoyTLS(source, o.NodeID); err != nil {
			return Envoy{}, fmt.Errorf("stack: TLS of %s: %w", o.NodeID, err)
		}
	}
	if err := envoy.RequireTLS(s.Config, o); err != nil {
		return Envoy{}, fmt.Errorf("stack: %s: %w (set Options.EnvoyTLS)", o.NodeID, err)
	}
	b, err := envoy.Bootstrap(s.Config, source, o)
	if err != nil {
		return Envoy{}, err
	}
	e := Envoy{Source: source, Boot: b}
	ctx, cancel := context.WithCancel(ctx)
	go func() { // the Envoy lives until ctx is done or the stack stops
		select {
		case <-s.done:
		case <-ctx.Done():
		}
		cancel()
	}()
	var addr string
	if s.opts.EnvoyBin != "" {
		addr, err = startRealEnvoy(ctx, s.group, s.opts.EnvoyBin, b, src.Listener, len(s.Envoys))
	} else {
		e.Sim, addr, err = s.startSim(ctx, b)
	}
	if err != nil {
		cancel()
		return Envoy{}, fmt.Errorf("stack: envoy of %s: %w", source, err)
	}
	e.URL = "http://" + addr
	return e, nil
}

func (s *Stack) startSim(ctx context.Context, b *bootstrapv3.Bootstrap) (*envoysim.Envoy, string, error) {
	var draw func() uint64
	if s.opts.Seed != 0 {
		draw = rand.New(rand.NewPCG(s.opts.Seed, uint64(len(s.Envoys))+2)).Uint64
	}
	e, err := envoysim.New(envoysim.Options{
		Bootstrap: b, Rand: draw,
		Logger: s.opts.Logger.With("component", "envoysim", "node", b.GetNode().GetId()),
	})
	if err != nil {
		return nil, "", err
	}
	s.group.Go(func() error { return e.Run(ctx) })
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.WaitReady(wctx); err != nil {
		return nil, "", fmt.Errorf("envoysim not ready: %w", err)
	}
	addr, ok := e.ListenerAddr(xds.ListenerName)
	if !ok {
		return nil, "", fmt.Errorf("envoysim has no listener %s", xds.ListenerName)
	}
	return e, addr, nil
}

// Envoy returns the first Envoy of source.
func (s *Stack) Envoy(source string) (Envoy, bool) {
	i := slices.IndexFunc(s.Envoys, func(e Envoy) bool { return e.Source == source })
	if i < 0 {
		return Envoy{}, false
	}
	return s.Envoys[i], true
}

// Wait blocks until everything has stopped and returns the first error.
func (s *Stack) Wait() error { return s.group.Wait() }

// Stop stops everything and waits for it.
func (s *Stack) Stop() error {
	s.cancel()
	return s.group.Wait()
}
