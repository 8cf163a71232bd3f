// Package app assembles ILB's all-in-one process (`ilb serve`): the
// engine signals monitor, the weights controller, the xDS server (with the
// LRS service on the same port), the ext_proc service with its demand
// meter, and the admin API, on one explicit Prometheus registry. The demo
// and the end-to-end tests run the same assembly.
//
// The loops: signals → EDS (xds.SetEndpoints) and the fast loop
// (extproc.SetLive) on every change, and an immediate controller tick when
// a cluster's serving replicas change; ext_proc's demand → aggregator →
// the controller's input every tick.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/ilbproject/ilb/admin"
	"github.com/ilbproject/ilb/auth"
	"github.com/ilbproject/ilb/capacity"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/dashboard"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/ha"
	"github.com/ilbproject/ilb/internal/serve"
	"github.com/ilbproject/ilb/kube"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/signals"
	"github.com/ilbproject/ilb/weights"
	"github.com/ilbproject/ilb/xds"
)

// Options configure the process.
type Options struct {
	Config *config.Config // validated; required
	Logger *slog.Logger   // nil: discard
	// Rand is ext_proc's random draw (tests make it deterministic); nil:
	// math/rand/v2.
	Rand func() uint64
	// TracerProvider traces controller ticks, xDS publications and
	// NACKs, and ext_proc's routing decisions (see package telemetry);
	// nil: no-op. The caller shuts it down after Wait.
	TracerProvider trace.TracerProvider
}

// App is a running ILB. Its servers stop when the context given to Start
// is done; Wait returns once they all have.
type App struct {
	Config     *config.Config
	Registry   *prometheus.Registry
	Controller *controller.Controller
	XDS        *xds.Server
	ExtProc    *extproc.Server
	// Signals watches the engines; nil when signals.disabled.
	Signals *signals.Monitor
	// Demand aggregates the demand ext_proc measures (in memory) and any
	// reporter sends over LRS on the xDS port.
	Demand *demand.Aggregator
	// History keeps the last published weights versions (/debug/weights/history, ilb why).
	History *controller.History
	// Dashboard is the web page at the admin server's /ui/.
	Dashboard *dashboard.Dashboard
	// Auth is the transport security of the three ports (security:):
	// TLS material reloaded from files, the authorizers of the gRPC
	// services, the admin API's token.
	Auth *auth.Auth
	// Capacity learns each cluster's capacity from the signals (nil when
	// signals.disabled); the controller plans with it unless
	// controller.capacity.mode is configured.
	Capacity *capacity.Estimator
	// HA is this replica of an HA group (app/ha.go); nil without ha:.
	HA *ha.Replica
	// Kube watches the API servers of clusters with kubernetes discovery;
	// nil when none has it.
	Kube *kube.Discovery

	log                       *slog.Logger
	xdsLn, extprocLn, adminLn net.Listener
	pickerLns                 []pickerListener
	group                     *errgroup.Group
	stopHAClose               func() bool
	haSink                    *haSink

	// signalsMu orders signals snapshots into EDS and the fast loop:
	// OnChange and followRamps run on different goroutines, and an older
	// snapshot must not overwrite a newer one (signalsAt).
	signalsMu sync.Mutex
	signalsAt time.Time
	// live is the fast loop's view last derived (live.FromSignals holds
	// an overload from one view to the next); under signalsMu.
	live *live.State
}

// Start builds every component, computes and publishes the first weights
// (so no Envoy or request ever sees an ILB without weights), binds the
// three listeners and serves until ctx is done. A listener address with
// port 0 gets an ephemeral port; see the Addr methods.
func Start(ctx context.Context, o Options) (*App, error) {
	if o.Config == nil {
		return nil, errors.New("app: Config is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	c := o.Config
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	now := time.Now
	au, err := auth.New(auth.Options{Config: c, Logger: o.Logger.With("component", "auth"), Registry: reg})
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	xs, err := xds.New(ctx, xds.Options{
		Config: c, Logger: o.Logger.With("component", "xds"), Registry: reg, TracerProvider: o.TracerProvider,
		Authorizer: au.Authorizer(auth.PortXDS), Voter: au.Authorizer(auth.PortXDS).Voter,
	})
	if err != nil {
		return nil, err
	}
	agg := demand.NewAggregator(c, o.Logger.With("component", "demand"), now())
	meter := demand.NewMeter(now())
	ep, err := extproc.New(extproc.Options{
		Config: c, Logger: o.Logger.With("component", "extproc"), Registry: reg, Rand: o.Rand, Meter: meter,
		TracerProvider: o.TracerProvider, Authorizer: au.Authorizer(auth.PortExtProc), PeerOf: au.Authorizer(auth.PortExtProc).Voter,
	})
	if err != nil {
		return nil, err
	}
	policy, err := weights.NewPolicy(c.Controller.Policy)
	if err != nil {
		return nil, err
	}
	// The weights' own gauges and the version history follow every
	// published version like the servers do; the demand metrics read the
	// aggregator at each scrape.
	wmetrics, err := controller.NewMetricsSink(reg)
	if err != nil {
		return nil, err
	}
	history := controller.NewHistory(0, nil)
	if err := reg.Register(demand.NewCollector(agg, now)); err != nil {
		return nil, fmt.Errorf("app: demand metrics: %w", err)
	}
	a := &App{Config: c, Registry: reg, XDS: xs, ExtProc: ep, Demand: agg, History: history, Auth: au, log: o.Logger}
	copts := controller.Options{
		Config: c, Policy: policy, Sinks: []controller.Sink{xs, ep, wmetrics, history},
		Logger: o.Logger.With("component", "controller"), Registry: reg, TracerProvider: o.TracerProvider,
		Demand: func() (weights.Demand, time.Time) { return agg.Rates(now()) },
	}
	if !c.Signals.Disabled {
		kd, err := kube.New(c, kube.Options{Now: now})
		if err != nil {
			return nil, fmt.Errorf("app: %w", err)
		}
		a.Kube = kd
		var discoverers map[string]signals.Discoverer
		if kd != nil {
			discoverers = kd.Discoverers()
			useKlogSlog(o.Logger.With("component", "client-go"))
		}
		mon, err := signals.New(signals.Options{
			Config: c, Logger: o.Logger.With("component", "signals"), Registry: reg, Discoverers: discoverers,
			OnChange: func(snap *signals.Snapshot, healthChanged []string) {
				a.onSignals(ctx, snap, healthChanged)
			},
		})
		if err != nil {
			return nil, err
		}
		a.Signals = mon
		if a.Capacity, err = newEstimator(c, reg); err != nil {
			return nil, err
		}
		copts.Blind = mon.Blind // a blind monitor's held state is not believed: fail static
		copts.State = func() (map[string]weights.ClusterState, time.Time) {
			snap := mon.Snapshot()
			if c.Controller.Capacity.Mode == config.CapacityLearned {
				return snap.ClusterStatesWith(c, a.Capacity.Learned), snap.At
			}
			return snap.ClusterStates(c), snap.At
		}
	}
	if c.HA != nil {
		if err := a.startHA(ctx, o, &copts, agg); err != nil {
			return nil, err
		}
	}
	ctl, err := controller.New(copts)
	if err != nil {
		return nil, err
	}
	a.Controller = ctl
	if err := ctl.Tick(ctx); err != nil {
		return nil, fmt.Errorf("app: first weights: %w", err)
	}
	if a.HA != nil {
		if err := a.bootstrapHA(ctx); err != nil {
			return nil, fmt.Errorf("app: first weights: %w", err)
		}
	}
	if err := a.listen(ctx); err != nil {
		return nil, err
	}
	aopts := admin.Options{
		Config: c, Registry: reg, Weights: ctl, Decisions: ep.Decisions(), Nodes: xs, Rollouts: xs, Demand: agg,
		History: history, Logger: o.Logger.With("component", "admin"),
	}
	a.haView(&aopts)
	a.Dashboard = dashboard.New(dashboard.Options{
		Config: c, Weights: aopts.Weights, Decisions: ep.Decisions(), Signals: a.Signals,
		Logger: o.Logger.With("component", "dashboard"),
	})
	aopts.UI = a.Dashboard.Handler()
	if a.Signals != nil {
		aopts.Signals = a.Signals
		aopts.Capacity = a.Capacity
	}
	cs := newConns(ctx, o.Logger, reg, c.Listen.Connections)
	adminSrv := &http.Server{
		Handler: au.Admin(a.withHAHealth(admin.Handler(aopts))), ReadHeaderTimeout: 10 * time.Second, ErrorLog: au.AdminErrorLog(),
		IdleTimeout: c.Listen.Connections.Idle(), ConnState: cs.admin.ConnState,
		// Streams (/debug/decisions?follow=1) end with the process, not
		// after the shutdown grace period.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	xdsGRPC := grpcServer(au, auth.PortXDS, append(connOptions(cs.xds, c.Listen.Connections),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: c.Listen.Connections.Idle()}))...)
	xs.Register(xdsGRPC)
	demand.NewServer(demand.ServerOptions{
		Sink: agg, Interval: c.ExtProc.ReportInterval.Std(), Logger: o.Logger.With("component", "lrs"),
		Authorizer: au.Authorizer(auth.PortLRS), Voter: au.Authorizer(auth.PortLRS).Voter,
	}).Register(xdsGRPC)
	extprocGRPC := grpcServer(au, auth.PortExtProc, append(ep.GRPCOptions(), connOptions(cs.extproc, c.Listen.Connections)...)...)
	ep.Register(extprocGRPC)
	// An endpoint picker's listener per source with routing "picker":
	// ext_proc for that source's streams alone.
	pickerGRPC := make([]*grpc.Server, len(a.pickerLns))
	for i, p := range a.pickerLns {
		pickerGRPC[i] = grpcServer(au, auth.PortExtProc, append(append(ep.GRPCOptions(), connOptions(cs.extproc, c.Listen.Connections)...),
			grpc.ChainStreamInterceptor(extproc.AsSource(p.source)))...)
		ep.Register(pickerGRPC[i])
	}
	reporter := &demand.Reporter{
		Meter: meter, Sink: agg, Node: demand.ReporterNode("ilb-all-in-one"),
		Interval: c.ExtProc.ReportInterval.Std(), Logger: o.Logger.With("component", "demand"),
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serve.GRPC(gctx, xdsGRPC, cs.xds.Wrap(a.xdsLn)) })
	g.Go(func() error { return xs.Run(gctx) })
	g.Go(func() error {
		if err := serve.GRPC(gctx, extprocGRPC, cs.extproc.Wrap(a.extprocLn)); err != nil {
			return fmt.Errorf("extproc: %w", err)
		}
		return nil
	})
	for i, p := range a.pickerLns {
		g.Go(func() error {
			if err := serve.GRPC(gctx, pickerGRPC[i], cs.extproc.Wrap(p.ln)); err != nil {
				return fmt.Errorf("extproc: picker of source %s: %w", p.source, err)
			}
			return nil
		})
	}
	g.Go(func() error { return serve.HTTP(gctx, adminSrv, secureAdmin(au, cs.admin.Wrap(a.adminLn))) })
	g.Go(func() error { return au.Run(gctx) })
	if a.HA != nil {
		g.Go(func() error { return a.runHA(gctx) })
	} else {
		g.Go(func() error { return ctl.Run(gctx) })
	}
	g.Go(func() error { return reporter.Run(gctx) })
	g.Go(func() error { return a.Dashboard.Run(gctx) })
	if a.Kube != nil {
		g.Go(func() error { return a.Kube.Run(gctx) })
	}
	if a.Signals != nil {
		g.Go(func() error { return a.Signals.Run(gctx) })
		g.Go(func() error { return a.followRamps(gctx) })
	}
	a.group = g
	warnInsecure(ctx, o.Logger, c)
	o.Logger.InfoContext(ctx, "ilb serving", "xds", a.XDSAddr(), "extproc", a.ExtProcAddr(), "admin", a.AdminURL(),
		"tls", au.TLSEnabled(), "client_certs", au.ClientCerts(), "weights", aopts.Weights.Current().Version())
	return a, nil
}

func (a *App) listen(ctx context.Context) error {
	var lc net.ListenConfig
	var bound []net.Listener
	for _, l := range []struct {
		name string
		addr string
		dst  *net.Listener
	}{
		{"listen.xds", a.Config.Listen.XDS, &a.xdsLn},
		{"listen.extproc", a.Config.Listen.ExtProc, &a.extprocLn},
		{"listen.admin", a.Config.Listen.Admin, &a.adminLn},
	} {
		ln, err := lc.Listen(ctx, "tcp", l.addr)
		if err != nil {
			for _, b := range bound {
				_ = b.Close()
			}
			return fmt.Errorf("app: %s %s: %w", l.name, l.addr, err)
		}
		bound = append(bound, ln)
		*l.dst = ln
	}
	for i, s := range a.Config.Sources {
		if s.Picker == nil {
			continue
		}
		ln, err := lc.Listen(ctx, "tcp", s.Picker.Listen)
		if err != nil {
			for _, b := range bound {
				_ = b.Close()
			}
			return fmt.Errorf("app: sources[%d].picker.listen %s: %w", i, s.Picker.Listen, err)
		}
		bound = append(bound, ln)
		a.pickerLns = append(a.pickerLns, pickerListener{source: s.Name, ln: ln})
	}
	return nil
}

// pickerListener is an endpoint picker's listener (routing "picker").
type pickerListener struct {
	source string
	ln     net.Listener
}

// PickerAddr is the bound address of source's endpoint-picker listener,
// "" when it has none.
func (a *App) PickerAddr(source string) string {
	for _, p := range a.pickerLns {
		if p.source == source {
			return p.ln.Addr().String()
		}
	}
	return ""
}

// Wait blocks until every server has stopped and returns the first error.
func (a *App) Wait() error { return a.group.Wait() }

// XDSAddr is the bound address of the xDS server.
func (a *App) XDSAddr() string { return a.xdsLn.Addr().String() }

// ExtProcAddr is the bound address of the ext_proc service.
func (a *App) ExtProcAddr() string { return a.extprocLn.Addr().String() }

// AdminAddr is the bound address of the admin API.
func (a *App) AdminAddr() string { return a.adminLn.Addr().String() }
