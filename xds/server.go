package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/internal/serve"
	"github.com/ilbproject/ilb/weights"
)

// Options configure a Server.
type Options struct {
	Config   *config.Config       // validated; required
	Logger   *slog.Logger         // nil: discard
	Registry *prometheus.Registry // nil: metrics are not exported
	// TracerProvider traces publications ("ilb.xds.publish", with one
	// "ilb.xds.push" per source), promotions and NACKs ("ilb.xds.nack",
	// error status with Envoy's message); nil: no-op.
	TracerProvider trace.TracerProvider
	// Authorizer checks that the peer of each xDS stream may subscribe
	// as its node's source (node.cluster); nil: every peer may. It is
	// asked on the first request of each stream that names a node, and
	// on each unary Fetch, before anything else: a refused peer gets its
	// error and nothing more, and leaves no record. The source it is
	// given is node.cluster as sent (not bounded, not yet checked against
	// the configuration).
	Authorizer Authorizer
	// Voter names who a stream's peer is for the NACK quorum
	// (envoy.rollout.nack_quorum): the nodes of one voter count as one
	// rejector and one connected Envoy, however many node ids it
	// claims. ILB's is the verified identity and IP address of the peer
	// (auth.Authorizer.Voter); nil: every node id is a voter.
	Voter func(ctx context.Context) string
	// Now is the clock of node records (NACK times, node_ttl) and of
	// canary soaks; nil: time.Now.
	Now func() time.Time
}

// Authorizer decides whether the peer of a stream (its identity travels
// in ctx) may speak for a source. The error is a gRPC status
// (PermissionDenied, Unauthenticated) that ends the stream; the
// authorizer counts and logs its refusals.
type Authorizer interface {
	Authorize(ctx context.Context, source string) error
}

// Server is ILB's xDS control plane: a go-control-plane ADS server (state
// of the world and delta) over a snapshot cache keyed by node.cluster, the
// source. It is a controller.Sink: each published weights version becomes one
// validated snapshot per source. Safe for concurrent use.
type Server struct {
	cfg     *config.Config
	log     *slog.Logger
	now     func() time.Time
	m       *metrics
	cache   cache.SnapshotCache
	xds     serverv3.Server
	tracker *tracker
	tracer  trace.Tracer

	mu        sync.Mutex // serialises commits; guards the fields below
	weights   *weights.Weights
	endpoints Endpoints
	epsGen    uint64 // bumped by every SetEndpoints that changed them
	// pendingEps are endpoints that only add traffic, held until
	// envoy.eds_min_interval after edsAt, the last endpoint push (nil:
	// none pending).
	pendingEps Endpoints
	edsAt      time.Time
	rollouts   map[string]*rollout // per source

	acks *ackQueue // ACKs, for Run

	bans     BanStore
	banQueue []banWrite // bans to store (guarded by mu)
	banRead  time.Time  // when the store was last read (guarded by mu)
}

var _ controller.Sink = (*Server)(nil)

// New builds the server; it serves nothing until Serve or Register.
func New(ctx context.Context, o Options) (*Server, error) {
	if o.Config == nil {
		return nil, errors.New("xds: Config is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.TracerProvider == nil {
		o.TracerProvider = noop.NewTracerProvider()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	m, err := newMetrics(o.Config, o.Registry)
	if err != nil {
		return nil, err
	}
	acks := newACKQueue()
	t := newTracker(o.Config, o.Logger, m, o.Now, o.Authorizer, acks)
	t.voter = o.Voter
	key := nodeKey{o.Config.Envoy.Rollout.CanaryPercent}
	c := &holdingCache{
		SnapshotCache: cache.NewSnapshotCache(true, key, newCacheLogger(o.Logger, o.Now)),
		key:           key, heldOn: t.heldOn,
	}
	srv := &Server{
		cfg:      o.Config,
		log:      o.Logger,
		now:      o.Now,
		m:        m,
		cache:    c,
		xds:      serverv3.NewServer(ctx, c, t.callbacks()),
		tracker:  t,
		tracer:   o.TracerProvider.Tracer(tracerName),
		rollouts: map[string]*rollout{},
		acks:     acks,
	}
	// NACKs are decided on the stream's own goroutine, before its request
	// is served (see tracker.request); their spans start a trace of their
	// own.
	t.onNACK = func(e event) { srv.nacked(context.Background(), e) }
	return srv, nil
}

// Publish prepares and commits w (see Prepare).
func (s *Server) Publish(ctx context.Context, w *weights.Weights) error {
	commit, err := s.Prepare(ctx, w)
	if err != nil {
		return err
	}
	commit()
	return nil
}

// Prepare builds and validates the snapshot of every source for w (with
// the endpoints in force); commit sets them all. Nothing changes for any
// Envoy when a source's snapshot fails, so a version is rolled out to
// every source or to none.
func (s *Server) Prepare(ctx context.Context, w *weights.Weights) (func(), error) {
	s.mu.Lock()
	eps, gen := s.endpoints, s.epsGen
	s.mu.Unlock()
	_, span := s.tracer.Start(ctx, "ilb.xds.prepare", trace.WithAttributes(attribute.String("ilb.weights_version", w.Version())))
	snaps, err := s.build(w, eps)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		span.End()
		return nil, err
	}
	span.End()
	// Commit cannot fail: a cancelled tick context must not stop the
	// snapshot from reaching every watch (the span parent stays).
	commitCtx := context.WithoutCancel(ctx)
	return func() { s.commit(commitCtx, w, snaps, gen) }, nil
}

func (s *Server) build(w *weights.Weights, eps Endpoints) (map[string]*cache.Snapshot, error) {
	snaps := make(map[string]*cache.Snapshot, len(s.cfg.Sources))
	for _, src := range s.cfg.Sources {
		res, err := Build(s.cfg, w, eps, src.Name)
		if err != nil {
			return nil, fmt.Errorf("xds: weights %s: %w", w.Version(), err)
		}
		snap, err := res.Snapshot()
		if err != nil {
			return nil, fmt.Errorf("xds: weights %s: source %s: %w", w.Version(), src.Name, err)
		}
		snaps[src.Name] = snap
	}
	return snaps, nil
}

// commit sets prepared snapshots, rebuilt first if the endpoints changed
// since they were prepared. SetSnapshot stores the snapshot before it
// answers open watches, so an error there (a stream that went away) does
// not lose the version: it is logged.
func (s *Server) commit(ctx context.Context, w *weights.Weights, snaps map[string]*cache.Snapshot, gen uint64) {
	ctx, span := s.tracer.Start(ctx, "ilb.xds.publish", trace.WithAttributes(attribute.String("ilb.weights_version", w.Version())))
	defer span.End()
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.epsGen {
		if fresh, err := s.build(w, s.endpoints); err == nil {
			snaps = fresh
		} else {
			s.log.ErrorContext(ctx, "xds: rebuilding with newer endpoints failed; setting the prepared snapshots", "err", err)
		}
	}
	s.set(ctx, snaps)
	s.weights = w
	s.m.publish.Inc()
	s.log.InfoContext(ctx, "xds snapshots set", "weights", w.Version(), "sources", len(snaps))
}

// set hands every source's new snapshot to its rollout. Called under mu.
func (s *Server) set(ctx context.Context, snaps map[string]*cache.Snapshot) {
	now := s.now()
	for _, src := range s.cfg.Sources {
		s.offer(ctx, src.Name, snaps[src.Name], now)
	}
}

// SetEndpoints makes EDS follow the replicas' state: the snapshots of
// every source are rebuilt with eps and the weights in force, checked and
// set. Endpoints equal to those in force change nothing. Before the first
// weights, eps is kept for them.
//
// Pushes are batched: a change that only adds traffic (a weight that
// grows, a replica that joins or recovers) less than
// envoy.eds_min_interval after the last endpoint push is held, and pushed
// (with whatever came since) by the rollout loop when the interval is
// over; a change that takes traffic away from a replica (unhealthy,
// draining, gone) is pushed at once. A held change is checked when it is
// pushed; if it fails then, the error is logged and Envoys keep what they
// have.
func (s *Server) SetEndpoints(ctx context.Context, eps Endpoints) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if reflect.DeepEqual(eps, s.endpoints) {
		s.pendingEps = nil // back to what Envoys have: nothing to push
		return nil
	}
	now := s.now()
	if s.weights != nil && now.Sub(s.edsAt) < s.cfg.Envoy.EDSMinInterval.Std() && !takesAway(s.endpoints, eps) && !givesFirst(s.endpoints, eps) {
		s.pendingEps = eps
		return nil
	}
	return s.applyEndpoints(ctx, eps, now, "at_once")
}

// applyEndpoints pushes eps. Called under mu.
func (s *Server) applyEndpoints(ctx context.Context, eps Endpoints, now time.Time, how string) error {
	s.pendingEps = nil
	if s.weights != nil {
		ctx, span := s.tracer.Start(ctx, "ilb.xds.publish", trace.WithAttributes(
			attribute.String("ilb.weights_version", s.weights.Version()), attribute.Bool("ilb.xds.endpoints", true)))
		defer span.End()
		snaps, err := s.build(s.weights, eps)
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
			return fmt.Errorf("xds: endpoints: %w", err)
		}
		s.set(ctx, snaps)
		s.edsAt = now
		s.m.edsPushes.WithLabelValues(how).Inc()
	}
	s.endpoints = eps
	s.epsGen++
	return nil
}

// flushEndpoints pushes held endpoints once envoy.eds_min_interval has
// passed since the last push. Called under mu.
func (s *Server) flushEndpoints(ctx context.Context, now time.Time) {
	if s.pendingEps == nil || now.Sub(s.edsAt) < s.cfg.Envoy.EDSMinInterval.Std() {
		return
	}
	if err := s.applyEndpoints(ctx, s.pendingEps, now, "batched"); err != nil {
		s.log.ErrorContext(ctx, "EDS update refused; Envoys keep the previous endpoints", "err", err)
	}
}

// givesFirst reports whether going from old to eps gives a cluster its
// first HEALTHY endpoint: held back, the cluster's routes would find no
// host (503 "no healthy upstream") for as long as the batching lasts,
// since its first replicas are what lets the controller give it weight
// (a discovery's first answer, a fleet back from zero).
func givesFirst(old, eps Endpoints) bool {
	for name, list := range eps {
		if healthy(list) && !healthy(old[name]) {
			return true
		}
	}
	return false
}

// healthy reports whether one endpoint of list is HEALTHY.
func healthy(list []Endpoint) bool {
	for _, ep := range list {
		if ep.Health == corev3.HealthStatus_HEALTHY {
			return true
		}
	}
	return false
}

// takesAway reports whether going from old to eps takes traffic away from
// a replica that had some: a HEALTHY endpoint that is gone or no longer
// HEALTHY, or a cluster whose endpoints are all gone.
func takesAway(old, eps Endpoints) bool {
	for name, list := range old {
		next, ok := eps[name]
		if !ok {
			return true
		}
		health := make(map[string]corev3.HealthStatus, len(next))
		for _, ep := range next {
			health[ep.Address] = ep.Health
		}
		for _, ep := range list {
			if ep.Health != corev3.HealthStatus_HEALTHY {
				continue
			}
			if h, ok := health[ep.Address]; !ok || h != corev3.HealthStatus_HEALTHY {
				return true
			}
		}
	}
	return false
}

// Snapshot returns the snapshot currently set for a source's Envoys (its
// canaries may run a newer one: see Rollouts).
func (s *Server) Snapshot(source string) (*cache.Snapshot, error) {
	snap, err := s.cache.GetSnapshot(source)
	if err != nil {
		return nil, fmt.Errorf("xds: snapshot of %s: %w", source, err)
	}
	cs, ok := snap.(*cache.Snapshot)
	if !ok {
		return nil, fmt.Errorf("xds: snapshot of %s has type %T", source, snap)
	}
	return cs, nil
}

// Register adds the ADS service, the per-type services for Envoys that do
// not use ADS, and the standard gRPC health service (grpc.health.v1:
// SERVING for "" and for the ADS service) that the xDS cluster's health
// check calls when Envoys list several ILB replicas, to g.
func (s *Server) Register(g *grpc.Server) {
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(discoveryv3.AggregatedDiscoveryService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, s.xds)
	clusterservice.RegisterClusterDiscoveryServiceServer(g, s.xds)
	endpointservice.RegisterEndpointDiscoveryServiceServer(g, s.xds)
	listenerservice.RegisterListenerDiscoveryServiceServer(g, s.xds)
	routeservice.RegisterRouteDiscoveryServiceServer(g, s.xds)
}

// Serve serves xDS on ln, and runs the rollout loop (Run), until ctx is
// done, then stops gracefully.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	g := grpc.NewServer()
	s.Register(g)
	eg, ectx := errgroup.WithContext(ctx)
	eg.Go(func() error { return s.Run(ectx) })
	eg.Go(func() error { return serve.GRPC(ectx, g, ln) })
	if err := eg.Wait(); err != nil {
		return fmt.Errorf("xds: %w", err)
	}
	return nil
}

// versionAttrs are a snapshot's versions per type (ilb.xds.version.route,
// ...), none for nil.
func versionAttrs(snap *cache.Snapshot) []attribute.KeyValue {
	if snap == nil {
		return nil
	}
	out := make([]attribute.KeyValue, 0, len(allTypes))
	for _, typ := range allTypes {
		out = append(out, attribute.String("ilb.xds.version."+shortType(typ), snap.GetVersion(typ)))
	}
	return out
}

// tracerName is the instrumentation scope of the xDS server's spans.
const tracerName = "github.com/ilbproject/ilb/xds"
