package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Sim-only response headers, set on every response so that tests can see
// which replica answered. Real engines do not send them.
const (
	HeaderReplica = "x-ilb-engine-replica"
	HeaderCluster = "x-ilb-engine-cluster"
)

// DefaultShutdownTimeout is how long Serve waits for in-flight requests
// after its context ends, when Options.ShutdownTimeout is zero.
const DefaultShutdownTimeout = 5 * time.Second

// Options configure one replica.
type Options struct {
	// Name is the replica id, e.g. "us-east-a/0"; required, printable
	// ASCII. It is sent in the x-ilb-engine-replica header and as
	// system_fingerprint in completions.
	Name string
	// Cluster is the engine cluster the replica belongs to; required,
	// printable ASCII. It is the constant label "cluster" on every metric
	// and is sent in the x-ilb-engine-cluster header.
	Cluster string
	// Kind is the engine kind whose metric names the replica exports
	// (vllm, sglang, tgi, trtllm: config.EngineKind); "" means vllm.
	Kind string
	// Models are the served model names, matched exactly against a
	// request's "model"; at least one, non-empty, no duplicates. The first
	// is the primary name that labels the load gauges.
	Models []string
	// Adapters are the LoRA adapters the replica serves (vLLM's
	// --lora-modules), matched exactly against a request's "model" like
	// Models: a request for one is a LoRA request for that adapter
	// ([GenRequest.Adapter]) on the primary model. Each must be non-empty,
	// printable, without surrounding spaces or commas (vLLM's
	// vllm:lora_requests_info joins them with commas), not a duplicate and
	// not one of Models. With adapters, a vllm-kind replica exports
	// vllm:lora_requests_info if its Backend is a [LoRAReporter]; a
	// Backend that reports LoRA disabled (MaxLoras 0) is refused. Other
	// backends ([FixedBackend]) serve adapter requests as base-model
	// requests and export no LoRA series.
	Adapters []string
	// Backend decides when tokens come out; nil means
	// NewFixedBackend(DefaultFixedTiming()).
	Backend Backend
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock for "created" fields and time to first token; nil
	// means time.Now.
	Now func() time.Time
	// ShutdownTimeout bounds the graceful shutdown of Serve; 0 means
	// DefaultShutdownTimeout. Must not be negative.
	ShutdownTimeout time.Duration
}

// ErrInvalidOptions is wrapped by every problem New reports.
var ErrInvalidOptions = errors.New("engine: invalid options")

// Server is one simulated engine replica. Its methods are safe for
// concurrent use; its handler serves any number of requests at once.
type Server struct {
	opts    Options
	reg     *prometheus.Registry
	metrics *metrics
	handler http.Handler
}

// New validates opts, applying defaults, and returns a server. Every
// problem is reported at once (errors.Join), each wrapping
// [ErrInvalidOptions] and naming the field.
func New(opts Options) (*Server, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts.Models, opts.Adapters = slices.Clone(opts.Models), slices.Clone(opts.Adapters)
	if opts.Backend == nil {
		opts.Backend = NewFixedBackend(DefaultFixedTiming())
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	var lora func() LoRALoad
	if rep, ok := opts.Backend.(LoRAReporter); ok && len(opts.Adapters) > 0 {
		if rep.LoRALoad().MaxLoras == 0 {
			return nil, fmt.Errorf("%w: Adapters: %d served, but the backend has LoRA disabled (MaxLoras 0)",
				ErrInvalidOptions, len(opts.Adapters))
		}
		lora = rep.LoRALoad
	}
	s := &Server{opts: opts, reg: prometheus.NewRegistry()}
	if opts.Kind == "" {
		opts.Kind = "vllm"
	}
	m, err := newMetrics(s.reg, dialects[opts.Kind], opts.Cluster, opts.Models, opts.Backend.Load, lora, opts.Now)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.handler = s.routes()
	return s, nil
}

func (o *Options) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...))
	}
	for _, f := range []struct{ name, v string }{{"Name", o.Name}, {"Cluster", o.Cluster}} {
		if f.v == "" {
			bad("%s: required", f.name)
		} else if !printableASCII(f.v) {
			bad("%s: %q must be printable ASCII without surrounding spaces", f.name, f.v)
		}
	}
	if len(o.Models) == 0 {
		bad("Models: at least one model required")
	}
	for i, m := range o.Models {
		switch {
		case m == "" || strings.TrimSpace(m) != m:
			bad("Models[%d]: %q must be non-empty without surrounding spaces", i, m)
		case slices.Index(o.Models, m) < i:
			bad("Models[%d]: duplicate model %q", i, m)
		}
	}
	for i, a := range o.Adapters {
		switch {
		case a == "" || strings.TrimSpace(a) != a || strings.ContainsRune(a, ',') || !printable(a):
			bad("Adapters[%d]: %q must be non-empty and printable, without surrounding spaces or commas", i, a)
		case slices.Index(o.Adapters, a) < i:
			bad("Adapters[%d]: duplicate adapter %q", i, a)
		case slices.Contains(o.Models, a):
			bad("Adapters[%d]: %q is one of Models", i, a)
		}
	}
	if _, ok := dialects[o.Kind]; o.Kind != "" && !ok {
		bad("Kind: %q is not an engine kind: want one of %v", o.Kind, Kinds())
	}
	if o.ShutdownTimeout < 0 {
		bad("ShutdownTimeout: %v must not be negative", o.ShutdownTimeout)
	}
	return errors.Join(errs...)
}

func printableASCII(s string) bool {
	for i := range len(s) {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return strings.TrimSpace(s) == s
}

// printable reports whether s is valid UTF-8 of printable characters
// (spaces included).
func printable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return utf8.ValidString(s)
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Registry returns the server's own Prometheus registry, served at /metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Serve serves HTTP on ln until ctx ends, then shuts down gracefully:
// it stops accepting, waits up to ShutdownTimeout for in-flight requests
// (request contexts are not cancelled by ctx), then closes what remains.
// It closes ln and returns nil on a clean shutdown, or an error if serving
// failed or the shutdown timed out.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if ln == nil {
		return errors.New("engine: serve: nil listener")
	}
	log := s.opts.Logger.With("replica", s.opts.Name, "addr", ln.Addr().String())
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.InfoContext(ctx, "engine serving")
	select {
	case err := <-errc:
		return fmt.Errorf("engine: serve: %w", err)
	case <-ctx.Done():
	}
	shCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shCtx)
	if err != nil {
		err = errors.Join(fmt.Errorf("engine: shutdown: %w", err), srv.Close())
	}
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, fmt.Errorf("engine: serve: %w", serr))
	}
	log.InfoContext(ctx, "engine stopped", "err", err)
	return err
}

// routes builds the handler: every response gets the sim-only headers.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	post, get := []string{http.MethodPost}, []string{http.MethodGet, http.MethodHead}
	mux.Handle("/v1/chat/completions", s.only(post, s.handleChat))
	mux.Handle("/v1/completions", s.only(post, s.handleCompletion))
	mux.Handle("/v1/embeddings", s.only(post, s.handleEmbeddings))
	mux.Handle("/v1/models", s.only(get, s.handleModels))
	mux.Handle("/v1/models/{id...}", s.only(get, s.handleModel))
	mux.Handle("/health", s.only(get, func(http.ResponseWriter, *http.Request) {}))
	metrics := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.opts.Logger.Handler(), slog.LevelWarn)})
	mux.Handle("/metrics", s.only(get, metrics.ServeHTTP))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		e := badRequest(codeNotFound, "", "no route for %s %s", r.Method, r.URL.Path)
		e.Status = http.StatusNotFound
		s.writeError(w, e)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(HeaderReplica, s.opts.Name)
		w.Header().Set(HeaderCluster, s.opts.Cluster)
		mux.ServeHTTP(w, r)
	})
}

// only restricts h to methods, answering others with 405.
func (s *Server) only(methods []string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(methods, r.Method) {
			w.Header().Set("Allow", strings.Join(methods, ", "))
			e := badRequest(codeMethodNotAllowed, "", "method %s not allowed on %s, want %s",
				r.Method, r.URL.Path, strings.Join(methods, " or "))
			e.Status = http.StatusMethodNotAllowed
			s.writeError(w, e)
			return
		}
		h(w, r)
	})
}

// writeError writes e, logging a failed write.
func (s *Server) writeError(w http.ResponseWriter, e *apiError) {
	if err := writeAPIError(w, e); err != nil {
		s.opts.Logger.Warn("engine: write error response", "err", err)
	}
}
