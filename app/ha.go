package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/ilbproject/ilb/admin"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/ha"
	"github.com/ilbproject/ilb/weights"
	"github.com/ilbproject/ilb/xds"
)

// With an ha: section the process is one replica of an HA group
// (package ha): the controller runs only while this replica leads, and
// publishes to etcd (its one sink); every replica, the leader too,
// installs the published version into the sinks the controller feeds in
// the single process (the xDS server, ext_proc, the weights metrics, the
// local history); the controller plans with the demand of every replica,
// each sharing what its aggregator measured.

// startHA makes the replica and turns copts into the leader's
// controller: its sinks become the replica's (installed through etcd),
// the replica's publisher its only sink (behind haSink) and the summed
// demand its input. The etcd client closes when ctx ends unless runHA
// took it over.
func (a *App) startHA(ctx context.Context, o Options, copts *controller.Options, agg *demand.Aggregator) error {
	rep, err := ha.New(ha.Options{
		Config: a.Config, Sinks: copts.Sinks, Demand: agg.Rates, Registry: a.Registry,
		Logger: o.Logger.With("component", "ha"),
		// The controller exists once startHA returns; it leads only
		// after Run starts, from the version in force (its predecessor's).
		Lead: func(ctx context.Context) error {
			a.Controller.Adopt(a.HA.Current())
			return a.Controller.Run(ctx)
		},
	})
	if err != nil {
		return fmt.Errorf("app: %w", err)
	}
	a.HA = rep
	// Banned xDS versions live in the HA store (etcd, or ConfigMaps with
	// ha.kubernetes): every replica bans what one banned, and a restart
	// forgets none.
	a.XDS.UseBans(ctx, rep.Store())
	a.haSink = &haSink{pub: rep.Publisher()}
	a.stopHAClose = context.AfterFunc(ctx, func() { _ = rep.Close() })
	copts.Sinks = []controller.Sink{a.haSink}
	copts.Demand = rep.Demand
	return nil
}

// bootstrapHA installs the version in force in etcd, or else the
// controller's first tick (computed alone, before the replica runs), so
// no Envoy or request ever meets a replica without weights.
func (a *App) bootstrapHA(ctx context.Context) error {
	return a.HA.Bootstrap(ctx, func() (*weights.Weights, error) {
		if w := a.haSink.first.Load(); w != nil {
			return w, nil
		}
		return nil, errors.New("the controller computed no weights")
	})
}

// runHA runs the replica until ctx ends, then closes its etcd client
// (after it revoked its lease: another replica leads at once).
func (a *App) runHA(ctx context.Context) error {
	a.stopHAClose()
	a.haSink.publishing.Store(true)
	defer func() { _ = a.HA.Close() }()
	return a.HA.Run(ctx)
}

// haSink is the controller's sink with ha:. Until the replica runs it
// keeps the controller's first tick for bootstrapHA (the controller then
// has weights, as without ha:); then it is the replica's publisher.
type haSink struct {
	pub        *ha.Publisher
	publishing atomic.Bool
	first      atomic.Pointer[weights.Weights]
}

var (
	_ controller.Sink = (*haSink)(nil)
	_ xds.BanStore    = (*ha.Store)(nil)
)

func (s *haSink) Prepare(ctx context.Context, w *weights.Weights) (func(), error) {
	if !s.publishing.Load() {
		return func() { s.first.Store(w) }, nil
	}
	return s.pub.Prepare(ctx, w)
}

// Refresh forwards the weights of an unchanged tick to the publisher.
func (s *haSink) Refresh(w *weights.Weights) {
	if s.publishing.Load() {
		s.pub.Refresh(w)
	}
}

// haView is what admin and the dashboard read: with HA, the version this
// replica serves and the history kept in etcd; else the controller's
// current version and the local history.
func (a *App) haView(aopts *admin.Options) {
	if a.HA == nil {
		return
	}
	aopts.Weights = a.HA
	aopts.History = a.HA
}

// withHAHealth answers GET /healthz with the replica's HA status besides
// the weights version; other paths go to next. The status is 200 while
// the process serves, fail static included ("status": "fail_static").
// etcd's error text is logged, not shown: /healthz needs no token.
func (a *App) withHAHealth(next http.Handler) http.Handler {
	if a.HA == nil {
		return next
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		st := a.HA.Status()
		st.EtcdError = ""
		out := struct {
			Status  string    `json:"status"`
			Version string    `json:"weights_version"`
			HA      ha.Status `json:"ha"`
		}{Status: "ok", Version: st.Installed, HA: st}
		if st.FailStatic {
			out.Status = "fail_static"
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(out); err != nil {
			a.log.DebugContext(r.Context(), "healthz: write", "err", err)
		}
	})
	mux.Handle("/", next)
	return mux
}

var (
	_ admin.Weights = (*ha.Replica)(nil)
	_ admin.History = (*ha.Replica)(nil)
)
