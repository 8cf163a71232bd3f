package extproc

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	randv2 "math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/ilbproject/ilb/budget"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/internal/serve"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/tenant"
	"github.com/ilbproject/ilb/weights"
)

// Options configure a Server.
type Options struct {
	Config   *config.Config       // validated; required
	Logger   *slog.Logger         // nil: discard
	Registry *prometheus.Registry // nil: metrics are not exported
	// Rand draws the random value of requests without a session. Must be
	// safe for concurrent use. nil: math/rand/v2.
	Rand func() uint64
	// Now is the clock of decision records. nil: time.Now.
	Now func() time.Time
	// NewID names requests that reach ext_proc without x-request-id.
	// nil: random 26-character ids.
	NewID func() string
	// DefaultSource is the source of streams whose Envoy sends no
	// x-ilb-source metadata (static setups); "" rejects such streams.
	DefaultSource string
	// Meter counts the demand of every decided or shed request (nil: not
	// counted).
	Meter *demand.Meter
	// TracerProvider traces every routing decision: one span "ilb.route"
	// per request, child of the request's W3C trace context, whose
	// context is forwarded upstream in traceparent/tracestate. nil or the
	// no-op provider: no span, no header.
	TracerProvider trace.TracerProvider
	// Authorizer checks that the peer of each stream may speak for the
	// source its x-ilb-source metadata names; nil: every peer may.
	Authorizer Authorizer
	// PeerOf names a stream's peer for extproc.max_streams_per_peer
	// (ILB: auth's voter, the verified identity and IP address); nil: its
	// IP address.
	PeerOf func(ctx context.Context) string
}

// Authorizer decides whether the peer of a stream (its identity travels
// in ctx) may speak for a source. The error is a gRPC status
// (PermissionDenied, Unauthenticated) that ends the stream; the
// authorizer counts and logs its refusals.
type Authorizer interface {
	Authorize(ctx context.Context, source string) error
}

// Server is the ext_proc service (docs/architecture.md): one gRPC stream per HTTP
// request, one answer of the matching type per message. It is a
// controller.Sink: each published version becomes the immutable State that
// requests read. Safe for concurrent use.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	opts      Options
	state     atomic.Pointer[State]
	liveState atomic.Pointer[live.State]
	log       *decision.Log
	metrics   *metrics
	tracer    trace.Tracer      // nil: tracing off
	engines   map[string]string // cluster -> engine kind, for spans
	open      atomic.Int64      // streams open, for extproc.max_streams
	peers     *peerStreams      // streams open per peer, for extproc.max_streams_per_peer
	held      atomic.Int64      // bytes of request bodies held across streams, for extproc.max_held_body_bytes
	followed  atomic.Int64      // responses followed, for extproc.max_followed_streams
	// idleScan ends the streams Envoy owes a message for too long.
	idleScan idleScan
	// typical learns what each demand stream's served requests cost:
	// the most a request counts before an engine accepts it.
	typical *demand.Typical
	// awaiting counts, per engine cluster, the requests routed there
	// whose response headers have not come back yet (for a streaming
	// response, the first token), and their estimated cost: the fast
	// loop's view of a burst before the engines' metrics show it. Built
	// once; the map is read-only.
	awaiting map[string]*inflight
	// unknownSource limits the log lines of streams naming an unknown
	// source: a misconfigured (or hostile) Envoy sends one per request.
	unknownSource logLimiter
	// pickers are the replica pickers of the clusters with replica
	// picking on (fixed at New; each is safe for concurrent use).
	pickers map[string]*replicaPicker
	// tenants are the tenant tables of the cells (source, then model) of
	// sources that trust x-ilb-tenant (fixed at New: demand outlives
	// weights versions; each is safe for concurrent use).
	tenants map[string]map[string]*tenant.Table
	// budgets are the tenants' token budgets (nil: none configured),
	// across sources and models.
	budgets *budget.Ledger
	// exchanges recycles the state of ended streams (newExchange).
	exchanges sync.Pool
}

var (
	_ extprocv3.ExternalProcessorServer = (*Server)(nil)
	_ controller.Sink                   = (*Server)(nil)
)

// New checks the options and registers the metrics.
func New(o Options) (*Server, error) {
	if o.Config == nil {
		return nil, errors.New("extproc: Config is required")
	}
	if o.DefaultSource != "" {
		if _, ok := o.Config.Source(o.DefaultSource); !ok {
			return nil, fmt.Errorf("extproc: default source %q is not in the configuration", o.DefaultSource)
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Rand == nil {
		o.Rand = randv2.Uint64
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.NewID == nil {
		o.NewID = rand.Text
	}
	dlog := decision.NewLog(o.Config.ExtProc.DecisionLogSize, o.Config.ExtProc.DecisionLogBytes)
	m, err := newMetrics(o.Registry, dlog)
	if err != nil {
		return nil, err
	}
	engines := make(map[string]string, len(o.Config.Clusters))
	for _, c := range o.Config.Clusters {
		engines[c.Name] = string(c.Engine)
	}
	awaiting := make(map[string]*inflight, len(o.Config.Clusters))
	for _, e := range o.Config.Clusters {
		awaiting[e.Name] = new(inflight)
	}
	if o.Registry != nil {
		if err := o.Registry.Register(newScaleCollector(awaiting)); err != nil {
			return nil, fmt.Errorf("extproc: metrics: %w", err)
		}
	}
	pickers := newPickers(o.Config, m)
	if o.Registry != nil && len(pickers) > 0 {
		if err := o.Registry.Register(newPickerCollector(pickers)); err != nil {
			return nil, fmt.Errorf("extproc: metrics: %w", err)
		}
	}
	tenants := map[string]map[string]*tenant.Table{}
	for _, src := range o.Config.Sources {
		if !src.TrustTenantHeader {
			continue
		}
		tenants[src.Name] = map[string]*tenant.Table{}
		for _, mdl := range o.Config.Models {
			tenants[src.Name][mdl.Name] = tenant.New(o.Config.Tenants, o.Config.Controller.Tick.Std(), o.Now())
		}
	}
	return &Server{
		tenants: tenants, budgets: budget.New(o.Config.Tenants),
		opts: o, log: dlog, metrics: m, unknownSource: logLimiter{every: time.Minute},
		tracer: newTracer(o.TracerProvider), engines: engines, awaiting: awaiting, pickers: pickers,
		typical: demand.NewTypical(),
		peers:   newPeerStreams(o.Config.ExtProc.PeerStreamLimit()),
	}, nil
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

// Prepare indexes a weights version; commit swaps it in whole. A version
// that cannot be indexed leaves the running state untouched.
func (s *Server) Prepare(_ context.Context, w *weights.Weights) (func(), error) {
	st, err := newState(s.opts.Config, w)
	if err != nil {
		return nil, fmt.Errorf("extproc: %w", err)
	}
	return func() { s.state.Store(st) }, nil
}

// Version is the weights version requests are decided on, "" before the
// first Publish.
func (s *Server) Version() string {
	if st := s.state.Load(); st != nil {
		return st.version
	}
	return ""
}

// Decisions is the decision log.
func (s *Server) Decisions() *decision.Log { return s.log }

// GRPCOptions are the server options ext_proc needs: messages large
// enough for a whole buffered request body (gRPC's default is 4 MiB),
// keepalive pings so that the streams of an Envoy that vanished without
// closing its connection end within a minute instead of holding memory,
// a tap that lets ILB end an idle stream from a timer (it takes the
// server's only InTapHandle), and gRPC's proto codec wrapped so that the
// answers ILB encoded itself go out as they are (wire.go; it forces the
// server's codec). A server built without them still works; each stream
// then costs a goroutine more, and every answer is marshalled.
func (s *Server) GRPCOptions() []grpc.ServerOption {
	c := s.opts.Config
	limit := max(c.ExtProc.MaxBodyBytes, int(c.Envoy.RequestBufferBytes)) + 1<<20
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(limit),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: 30 * time.Second, Timeout: 20 * time.Second,
			// A connection without a stream for this long is closed
			// (GOAWAY): idle connections do not pile up.
			MaxConnectionIdle: c.Listen.Connections.Idle(),
		}),
		// Envoy's own keepalive (if configured) must not be refused.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// A context ILB can cancel for every ext_proc stream: the idle
		// bound needs no goroutine per stream then (see Process).
		grpc.InTapHandle(streamTap),
	}
	if codec := newWireCodec(); codec != nil {
		// gRPC's proto codec, but answers ILB encoded itself go out as
		// they are (wire.go). Process relies on the tap and the codec
		// coming together.
		opts = append(opts, grpc.ForceServerCodecV2(codec))
	}
	return opts
}

// Register adds the ext_proc service to g, and the standard gRPC health
// service (grpc.health.v1) that Envoy's gRPC health check of the ext_proc
// cluster calls: SERVING for "" and for envoy.service.ext_proc.v3.
// Build g with GRPCOptions.
func (s *Server) Register(g *grpc.Server) {
	extprocv3.RegisterExternalProcessorServer(g, s)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(extprocv3.ExternalProcessor_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
}

// Serve serves ext_proc on ln until ctx is done.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	g := grpc.NewServer(s.GRPCOptions()...)
	s.Register(g)
	if err := serve.GRPC(ctx, g, ln); err != nil {
		return fmt.Errorf("extproc: %w", err)
	}
	return nil
}

// logLimiter lets a log line through at most once per period and counts
// the ones it held back. Safe for concurrent use.
type logLimiter struct {
	every time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// allow reports whether a line may be logged at now; when not, it counts
// one more suppressed line.
func (l *logLimiter) allow(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.suppressed++
		return false
	}
	l.last = now
	return true
}

// take returns how many lines were held back since the last one logged,
// and resets the count.
func (l *logLimiter) take() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.suppressed
	l.suppressed = 0
	return n
}
