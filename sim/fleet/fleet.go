// Package fleet runs one simulated engine replica (package engine) per
// endpoint of a configuration, on loopback: the engines of the demo and
// the end-to-end tests.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/sim/engine"
	"github.com/ilbproject/ilb/sim/replica"
)

// DefaultProfile is the replica profile of a fleet without Timing.
const DefaultProfile = replica.ProfileLlama3x8BH100

// Options configure a fleet.
type Options struct {
	// Rebind starts every replica on an ephemeral loopback port and
	// rewrites the endpoints of the returned configuration; otherwise each
	// replica binds its configured endpoint.
	Rebind bool
	// Timing, if set, gives every replica an engine.FixedBackend with this
	// timing (tests inject it to control time). Nil: every replica is a
	// replica.Backend, the vLLM-like model of Profile in real time.
	Timing *engine.FixedTiming
	// Profile names the replica.Profile of every replica when Timing is
	// nil (see replica.Profiles); "" means DefaultProfile.
	Profile string
	// LoRA is the LoRA settings of the replica models of clusters serving
	// adapters (models[].adapters); zero MaxLoras: DefaultLoRA. Replicas
	// with a Timing serve adapters as their base model and report none.
	LoRA   replica.LoRA
	Logger *slog.Logger // nil: discard
}

// Fleet is a set of running replicas.
type Fleet struct {
	// Config is the configuration the replicas serve: the input one, with
	// the bound endpoints when Rebind was set.
	Config *config.Config
	// Replicas maps each endpoint (host:port, as in Config) to its server.
	Replicas map[string]*engine.Server
	group    *errgroup.Group

	mu      sync.Mutex
	stops   map[string]context.CancelFunc
	stopped map[string]chan struct{}
}

// Start binds and serves one replica per endpoint until ctx is done. A
// replica serves its cluster's models under their canonical names and
// aliases (as vLLM does with several --served-model-name).
func Start(ctx context.Context, c *config.Config, o Options) (*Fleet, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	newBackend, err := backends(o)
	if err != nil {
		return nil, err
	}
	out := *c
	out.Clusters = slices.Clone(c.Clusters)
	f := &Fleet{Config: &out, Replicas: map[string]*engine.Server{}, stops: map[string]context.CancelFunc{}, stopped: map[string]chan struct{}{}}
	var lc net.ListenConfig
	var lns []net.Listener
	var srvs []*engine.Server
	var closers []func() error // the backends', one per server
	closeAll := func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
		for _, cl := range closers {
			_ = cl()
		}
	}
	for ci := range out.Clusters {
		cl := &out.Clusters[ci]
		cl.Endpoints = slices.Clone(cl.Endpoints)
		for i, ep := range cl.Endpoints {
			addr := ep
			if o.Rebind {
				addr = "127.0.0.1:0"
			}
			ln, err := lc.Listen(ctx, "tcp", addr)
			if err != nil {
				closeAll()
				return nil, fmt.Errorf("fleet: cluster %s endpoint %s: %w", cl.Name, ep, err)
			}
			lns = append(lns, ln)
			name := fmt.Sprintf("%s/%d", cl.Name, i)
			adapters := servedAdapters(c, *cl)
			var lora replica.LoRA
			if len(adapters) > 0 {
				lora = o.LoRA
				if lora.MaxLoras == 0 {
					lora = DefaultLoRA
				}
			}
			backend, closer, err := newBackend(name, lora)
			if err != nil {
				closeAll()
				return nil, fmt.Errorf("fleet: cluster %s: %w", cl.Name, err)
			}
			closers = append(closers, closer)
			srv, err := engine.New(engine.Options{
				Name:     name,
				Cluster:  cl.Name,
				Kind:     string(cl.Engine),
				Models:   servedNames(c, cl.Models),
				Adapters: adapters,
				Backend:  backend,
				Logger:   o.Logger.With("replica", name),
			})
			if err != nil {
				closeAll()
				return nil, fmt.Errorf("fleet: cluster %s: %w", cl.Name, err)
			}
			srvs = append(srvs, srv)
			cl.Endpoints[i] = ln.Addr().String()
			f.Replicas[cl.Endpoints[i]] = srv
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for i, srv := range srvs {
		ln, closeBackend := lns[i], closers[i]
		addr := ln.Addr().String()
		rctx, cancel := context.WithCancel(gctx)
		done := make(chan struct{})
		f.stops[addr], f.stopped[addr] = cancel, done
		g.Go(func() error {
			defer close(done)
			err := srv.Serve(rctx, ln)
			return errors.Join(err, closeBackend())
		})
	}
	f.group = g
	return f, nil
}

// Stop stops the replica at addr, as a crash or a scale-down would: its
// listener closes at once (new connections are refused) and requests in
// flight finish. It returns once the replica has stopped.
func (f *Fleet) Stop(addr string) error {
	f.mu.Lock()
	cancel, ok := f.stops[addr]
	done := f.stopped[addr]
	f.mu.Unlock()
	if !ok {
		return fmt.Errorf("fleet: no replica at %s", addr)
	}
	cancel()
	<-done
	return nil
}

// Wait blocks until every replica has stopped.
func (f *Fleet) Wait() error { return f.group.Wait() }

// backends returns the constructor of the replicas' backends: FixedBackends
// of o.Timing, or real-time replica models of o.Profile. The closer stops
// a backend once its server is done.
func backends(o Options) (func(name string, lora replica.LoRA) (engine.Backend, func() error, error), error) {
	if o.Timing != nil {
		timing := *o.Timing
		return func(string, replica.LoRA) (engine.Backend, func() error, error) {
			return engine.NewFixedBackend(timing), func() error { return nil }, nil
		}, nil
	}
	name := o.Profile
	if name == "" {
		name = DefaultProfile
	}
	p, ok := replica.LookupProfile(name)
	if !ok {
		return nil, fmt.Errorf("fleet: Profile %q: no such replica profile", name)
	}
	return func(replicaName string, lora replica.LoRA) (engine.Backend, func() error, error) {
		b, err := replica.NewBackend(replica.Options{Profile: p, Name: replicaName, LoRA: lora}, replica.RealClock())
		if err != nil {
			return nil, nil, err
		}
		return b, b.Close, nil
	}, nil
}

// servedAdapters lists the LoRA adapters the configuration says cluster
// cl serves.
func servedAdapters(c *config.Config, cl config.EngineCluster) []string {
	var out []string
	for _, m := range c.Models {
		for _, a := range m.Adapters {
			if (config.ResolvedAdapter{Adapter: a, Model: m.Name}).ServesAdapter(cl) {
				out = append(out, a.Name)
			}
		}
	}
	return out
}

// DefaultLoRA is the LoRA settings of replica models serving adapters
// when Options.LoRA leaves them unset: vLLM with --max-loras 4
// --max-cpu-loras 16, 100 ms to load an adapter from disk and 5 ms to
// copy one into a GPU slot (the routing benchmark's assumptions).
var DefaultLoRA = replica.LoRA{MaxLoras: 4, MaxCPULoras: 16, LoadTime: 100 * time.Millisecond, ActivateTime: 5 * time.Millisecond}

// servedNames lists canonical names then aliases of models.
func servedNames(c *config.Config, models []string) []string {
	var names []string
	for _, m := range models {
		names = append(names, m)
		for _, cm := range c.Models {
			if cm.Name == m {
				names = append(names, cm.Aliases...)
			}
		}
	}
	return names
}
