package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/ilbproject/ilb/admin"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/ha"
	"github.com/ilbproject/ilb/weights"
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
// the publisher becomes its only sink and the summed demand its input.
// The etcd client closes when ctx ends unless runHA took it over.
func (a *App) startHA(ctx context.Context, o Options, copts *weights.ControllerOptions, agg *demand.Aggregator) error {
	rep, err := ha.New(ha.Options{
		Config: a.Config, Sinks: copts.Sinks, Demand: agg.Rates, Registry: a.Registry,
		Logger: o.Logger.With("component", "ha"),
		// The controller exists once startHA returns; it leads only
		// after Run starts.
		Lead: func(ctx context.Context) error { return a.Controller.Run(ctx) },
	})
	if err != nil {
		return fmt.Errorf("app: %w", err)
	}
	a.HA = rep
	a.stopHAClose = context.AfterFunc(ctx, func() { _ = rep.Close() })
	copts.Sinks = []weights.Sink{rep.Publisher()}
	copts.Demand = rep.Demand
	return nil
}

// bootstrapHA installs the version in force in etcd, or else the weights
// this replica computes alone from the state it sees now (no demand), so
// no Envoy or request ever meets a replica without weights.
func (a *App) bootstrapHA(ctx context.Context, policy weights.Policy, copts weights.ControllerOptions) error {
	return a.HA.Bootstrap(ctx, func() (*weights.Weights, error) {
		states := weights.StaticState(a.Config)
		if copts.State != nil {
			states, _ = copts.State()
		}
		w, err := policy.Compute(weights.Input{Config: a.Config, Clusters: states, Demand: weights.Demand{}, Now: time.Now()})
		if err != nil {
			fb, ferr := weights.Proportional{}.Compute(weights.Input{Config: a.Config, Clusters: states, Demand: weights.Demand{}, Now: time.Now()})
			if ferr != nil {
				return nil, fmt.Errorf("%w (and the proportional fallback: %w)", err, ferr)
			}
			return fb, nil
		}
		return w, nil
	})
}

// runHA runs the replica until ctx ends, then closes its etcd client
// (after it revoked its lease: another replica leads at once).
func (a *App) runHA(ctx context.Context) error {
	a.stopHAClose()
	defer func() { _ = a.HA.Close() }()
	return a.HA.Run(ctx)
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
