package envoysim

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
)

// Options configures an [Envoy].
type Options struct {
	// Bootstrap is required: node (id, cluster), dynamic_resources (ADS) and
	// static_resources (clusters, optional listeners).
	Bootstrap *bootstrapv3.Bootstrap
	// Logger receives envoysim's logs; nil discards them.
	Logger *slog.Logger
	// Rand supplies Envoy's random values: each stream's random value (drawn
	// once per request, used by weighted clusters), the load balancers'
	// draws (one per host choice, plus choice_count for least request) and
	// the round robin seed of each cluster. nil uses a crypto-seeded
	// math/rand/v2 generator. Calls are serialised. x-request-id values do
	// not use it. Outlier detection also draws from it (ejection jitter,
	// enforcing percentages strictly between 0 and 100).
	Rand func() uint64
	// Clock is the time source of health check intervals, the outlier
	// detection interval and ejection times, and slow start. nil is the
	// real clock.
	Clock Clock
	// RetrySleep waits a retry back-off (jittered exponential or
	// rate-limited); it returns an error when ctx ends first. nil uses
	// Clock.Sleep.
	RetrySleep func(ctx context.Context, d time.Duration) error
}

// Envoy is a running model of an Envoy proxy: an ADS client, listeners with
// HTTP connection managers, ext_proc, header_mutation and router filters, and upstream
// clusters. Create it with [New] and start it with [Envoy.Run].
type Envoy struct {
	log        *slog.Logger
	rand       func() uint64
	clock      Clock
	retrySleep func(ctx context.Context, d time.Duration) error
	resolver   *net.Resolver
	policy     fieldPolicy
	bootstrap  *compiledBootstrap
	ads        *adsConfig
	boot       *bootstrapv3.Bootstrap

	cfgMu sync.Mutex // guards state; held while applying configuration
	state *configState

	snap      atomic.Pointer[snapshot]
	listeners *listenerManager
	stats     *statsRegistry
	grpc      *grpcPool

	versionsMu sync.Mutex
	versions   map[string]string

	running atomic.Bool
	bg      sync.WaitGroup // health checkers and outlier detectors
}

// New checks opts.Bootstrap and returns an Envoy ready to [Envoy.Run]. It
// reports every invalid or unsupported field at once.
func New(opts Options) (*Envoy, error) {
	if opts.Bootstrap == nil {
		return nil, errors.New("envoysim: Options.Bootstrap is required")
	}
	e := &Envoy{
		log:      opts.Logger,
		resolver: net.DefaultResolver,
		policy:   newFieldPolicy(),
		boot:     opts.Bootstrap,
		state:    newConfigState(),
		stats:    newStatsRegistry(),
		versions: map[string]string{},
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	e.clock = opts.Clock
	if e.clock == nil {
		e.clock = realClock{}
	}
	e.retrySleep = opts.RetrySleep
	if e.retrySleep == nil {
		e.retrySleep = e.clock.Sleep
	}
	e.rand = serialised(opts.Rand)
	cb, err := compileBootstrap(opts.Bootstrap, e.policy)
	if err != nil {
		return nil, fmt.Errorf("envoysim: invalid bootstrap: %w", err)
	}
	e.bootstrap = cb
	e.ads = cb.ads
	e.state.staticClusters = cb.clusters
	e.state.staticListeners = cb.listeners
	e.listeners = newListenerManager(e.log, e.serveHTTP)
	e.grpc = newGRPCPool()
	e.snap.Store(&snapshot{})
	return e, nil
}

// serialised wraps f (or a crypto-seeded generator) so that concurrent calls
// are safe and happen one at a time.
func serialised(f func() uint64) func() uint64 {
	if f == nil {
		var seed [32]byte
		_, _ = crand.Read(seed[:])
		r := mrand.New(mrand.NewChaCha8(seed))
		f = r.Uint64
	}
	var mu sync.Mutex
	return func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		return f()
	}
}

// Run installs the static resources, binds the static listeners, runs the
// ADS client and serves until ctx is done, then drains the listeners and
// stops every goroutine it started. It returns nil on a clean stop and an
// error if a static listener cannot be bound. Run may be called once.
func (e *Envoy) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("envoysim: Run called twice")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		e.listeners.stopAll()
		e.grpc.close()
		e.cfgMu.Lock()
		for _, rt := range e.state.runtimes {
			rt.close()
		}
		for _, rt := range e.state.retiring {
			rt.close()
		}
		e.cfgMu.Unlock()
		e.bg.Wait()
	}()

	e.cfgMu.Lock()
	for _, cc := range e.state.staticClusters {
		e.installCluster(ctx, cc)
	}
	err := e.listeners.reconcile(ctx, e.state.staticListeners)
	e.publishLocked()
	e.cfgMu.Unlock()
	if err != nil {
		return fmt.Errorf("envoysim: static listeners: %w", err)
	}
	if e.ads != nil {
		client := e.newADSClient()
		wg.Go(func() { client.run(ctx) })
	}
	wg.Go(func() { e.refreshDNS(ctx) })
	<-ctx.Done()
	return nil
}

// WaitReady blocks until every listener known from the bootstrap or LDS is
// bound and its RDS route table is loaded, the first CDS and LDS responses
// are accepted and every EDS cluster has received its endpoints, or until
// ctx is done.
func (e *Envoy) WaitReady(ctx context.Context) error {
	for {
		e.cfgMu.Lock()
		ready := e.running.Load() && e.readyLocked()
		changed := e.state.changed
		e.cfgMu.Unlock()
		if ready {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("envoysim: not ready: %w", ctx.Err())
		}
	}
}

// ListenerAddr returns the bound address of the named listener (the actual
// port when the configuration asks for port 0).
func (e *Envoy) ListenerAddr(name string) (string, bool) {
	return e.listeners.addr(name)
}

// Stats returns a snapshot of the counters.
func (e *Envoy) Stats() Stats {
	return e.stats.snapshot()
}

// Versions returns the last ACKed version_info per type URL.
func (e *Envoy) Versions() map[string]string {
	e.versionsMu.Lock()
	defer e.versionsMu.Unlock()
	return maps.Clone(e.versions)
}

func (e *Envoy) setVersion(typeURL, version string) {
	e.versionsMu.Lock()
	defer e.versionsMu.Unlock()
	e.versions[typeURL] = version
}
