// Package app assembles ILB's all-in-one process (`ilb serve`): the
// weights controller, the xDS server, the ext_proc service and the admin
// API, on one explicit Prometheus registry, each server on its own
// listener. The demo and the end-to-end tests run the same assembly.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/ilbproject/ilb/admin"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/internal/serve"
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
}

// App is a running ILB. Its servers stop when the context given to Start
// is done; Wait returns once they all have.
type App struct {
	Config     *config.Config
	Registry   *prometheus.Registry
	Controller *weights.Controller
	XDS        *xds.Server
	ExtProc    *extproc.Server

	xdsLn, extprocLn, adminLn net.Listener
	group                     *errgroup.Group
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

	xs, err := xds.New(ctx, xds.Options{Config: c, Logger: o.Logger.With("component", "xds"), Registry: reg})
	if err != nil {
		return nil, err
	}
	ep, err := extproc.New(extproc.Options{Config: c, Logger: o.Logger.With("component", "extproc"), Registry: reg, Rand: o.Rand})
	if err != nil {
		return nil, err
	}
	policy, err := weights.NewPolicy(c.Controller.Policy)
	if err != nil {
		return nil, err
	}
	ctl, err := weights.NewController(weights.ControllerOptions{
		Config: c, Policy: policy, Sinks: []weights.Sink{xs, ep},
		Logger: o.Logger.With("component", "controller"), Registry: reg,
	})
	if err != nil {
		return nil, err
	}
	if err := ctl.Tick(ctx); err != nil {
		return nil, fmt.Errorf("app: first weights: %w", err)
	}
	a := &App{Config: c, Registry: reg, Controller: ctl, XDS: xs, ExtProc: ep}
	if err := a.listen(ctx); err != nil {
		return nil, err
	}
	adminSrv := &http.Server{
		Handler: admin.Handler(admin.Options{
			Config: c, Registry: reg, Weights: ctl, Decisions: ep.Decisions(), Nodes: xs,
			Logger: o.Logger.With("component", "admin"),
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return xs.Serve(gctx, a.xdsLn) })
	g.Go(func() error { return ep.Serve(gctx, a.extprocLn) })
	g.Go(func() error { return serve.HTTP(gctx, adminSrv, a.adminLn) })
	g.Go(func() error { return ctl.Run(gctx) })
	a.group = g
	o.Logger.InfoContext(ctx, "ilb serving", "xds", a.XDSAddr(), "extproc", a.ExtProcAddr(), "admin", a.AdminAddr(), "weights", ctl.Current().Version())
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
	return nil
}

// Wait blocks until every server has stopped and returns the first error.
func (a *App) Wait() error { return a.group.Wait() }

// XDSAddr is the bound address of the xDS server.
func (a *App) XDSAddr() string { return a.xdsLn.Addr().String() }

// ExtProcAddr is the bound address of the ext_proc service.
func (a *App) ExtProcAddr() string { return a.extprocLn.Addr().String() }

// AdminAddr is the bound address of the admin API.
func (a *App) AdminAddr() string { return a.adminLn.Addr().String() }
