// Package admin is ILB's admin HTTP API: health, Prometheus metrics and
// the debug views of weights, decisions, configuration and xDS nodes. It
// reads the components through small interfaces and never changes them.
package admin

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ilbproject/ilb/capacity"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/internal/bound"
	"github.com/ilbproject/ilb/signals"
	"github.com/ilbproject/ilb/weights"
	"github.com/ilbproject/ilb/xds"
)

// Weights reports the weights in force.
type Weights interface {
	Current() *weights.Weights
}

// Decisions looks up and follows decision records.
type Decisions interface {
	Get(requestID string) (decision.Record, bool)
	// Find returns up to n most recent records matching f, newest first.
	Find(f decision.Filter, n int) []decision.Record
	// Subscribe follows the records matching f as they complete, until
	// ctx is done.
	Subscribe(ctx context.Context, f decision.Filter, size int) *decision.Subscription
}

// History reports the last published weights versions, newest first.
type History interface {
	Versions(n int) []controller.VersionSummary
}

// Nodes reports the Envoys the xDS server knows, a bounded page at a
// time, and how many the query's source has in all.
type Nodes interface {
	ListNodes(q xds.NodeQuery) ([]xds.NodeStatus, int)
}

// Rollouts reports each source's xDS rollout: stable and canary versions,
// whether a canary is soaking, and the versions Envoys rejected.
type Rollouts interface {
	Rollouts() []xds.RolloutStatus
}

// Signals reports the engines' state.
type Signals interface {
	Snapshot() *signals.Snapshot
}

// Demand reports measured demand.
type Demand interface {
	Status() demand.Status
}

// Capacity reports each cluster's learned capacity.
type Capacity interface {
	Estimates() []capacity.Estimate
}

var (
	_ Weights   = (*controller.Controller)(nil)
	_ Decisions = (*decision.Log)(nil)
	_ Nodes     = (*xds.Server)(nil)
	_ Rollouts  = (*xds.Server)(nil)
	_ Signals   = (*signals.Monitor)(nil)
	_ Demand    = (*demand.Aggregator)(nil)
	_ History   = (*controller.History)(nil)
	_ Capacity  = (*capacity.Estimator)(nil)
)

// Options are the parts the admin API shows. Nil parts answer 404.
type Options struct {
	Config    *config.Config
	Registry  *prometheus.Registry
	Weights   Weights
	Decisions Decisions
	Nodes     Nodes
	Rollouts  Rollouts
	Signals   Signals
	Demand    Demand
	Capacity  Capacity
	History   History
	// UI is the dashboard (package dashboard), mounted at /ui/; nil: none.
	UI     http.Handler
	Logger *slog.Logger
}

// Handler serves:
//
//	GET /healthz                    200 {"status":"ok","weights_version":...}
//	GET /metrics                    Prometheus text exposition
//	GET /debug/weights              the weights in force (JSON)
//	GET /debug/weights?explain=1[&source=S][&model=M]
//	                                with the controller's explanation of each cell
//	GET /debug/weights/history?limit=N[&source=S][&model=M]
//	                                the N most recent published versions (default 10,
//	                                at most 1000), newest first, each with what changed
//	                                since the version before it, cut to the cells of S/M
//	GET /debug/decisions?limit=N    the N most recent decision records (default 50), at
//	                                most 4 MiB of them; with more, a Link header
//	                                (rel="next") gives the next page: before=SEQ, the
//	                                seq of the page's last record
//	GET /debug/decisions?follow=1   newline-delimited JSON (application/x-ndjson): each
//	                                record once, when it completes (response headers, or
//	                                ILB's own answer), flushed per line, until the client
//	                                goes away; a reader that falls behind loses records:
//	                                a line {"dropped":N} says N were lost at that point
//	     both forms filter with source=, model=, cluster= (chosen or served), reason=;
//	     an unknown value matches nothing; a bad limit or follow is a 400
//	GET /debug/decisions/{id}       the decision record of a request id
//	GET /debug/config               the configuration in force
//	GET /debug/xds                  xDS nodes: ACKed versions, last NACK
//	GET /debug/rollout              per source: stable/canary versions, soak, rejected versions
//	GET /debug/signals              replica and cluster state with reasons and ages, measured demand,
//	                                and each cluster's learned capacity
//	GET /ui/                        the dashboard (when Options.UI is set); GET / redirects there
//
// Errors are JSON {"error":{"message":...}} with a 4xx status.
func Handler(o Options) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		v := ""
		if o.Weights != nil {
			if cur := o.Weights.Current(); cur != nil {
				v = cur.Version()
			}
		}
		writeJSON(w, map[string]string{"status": "ok", "weights_version": v})
	})
	if o.Registry != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{ErrorLog: slogErrorLog{o.Logger}}))
	}
	mux.HandleFunc("GET /debug/weights", func(w http.ResponseWriter, r *http.Request) {
		if o.Weights == nil || o.Weights.Current() == nil {
			writeError(w, http.StatusNotFound, "no weights have been computed yet")
			return
		}
		q := r.URL.Query()
		cur := o.Weights.Current()
		if q.Get("explain") == "" && q.Get("source") == "" && q.Get("model") == "" {
			writeJSON(w, cur)
			return
		}
		source, model := q.Get("source"), q.Get("model")
		writeJSON(w, cur.View(func(c weights.Cell) bool {
			return (source == "" || c.Source == source) && (model == "" || c.Model == model)
		}))
	})
	mux.HandleFunc("GET /debug/decisions", func(w http.ResponseWriter, r *http.Request) {
		serveDecisions(w, r, o.Decisions, o.Logger)
	})
	mux.HandleFunc("GET /debug/weights/history", func(w http.ResponseWriter, r *http.Request) {
		serveHistory(w, r, o.History)
	})
	mux.HandleFunc("GET /debug/decisions/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if o.Decisions == nil {
			writeError(w, http.StatusNotFound, "this process keeps no decision log")
			return
		}
		rec, ok := o.Decisions.Get(id)
		if !ok {
			writeError(w, http.StatusNotFound, "no decision record for request id "+bound.Quote(id, bound.Excerpt)+" (unknown; evicted from the log, which keeps the latest records; or never seen by ILB: Envoy answers without ext_proc when it cannot reach it — a fail-open source by its default weights, a fail-closed one with 503 routing_unavailable)")
			return
		}
		writeJSON(w, rec)
	})
	mux.HandleFunc("GET /debug/config", func(w http.ResponseWriter, r *http.Request) {
		if o.Config == nil {
			writeError(w, http.StatusNotFound, "no configuration")
			return
		}
		writeJSON(w, o.Config)
	})
	mux.HandleFunc("GET /debug/signals", func(w http.ResponseWriter, r *http.Request) {
		out := signalsView{}
		if o.Signals != nil {
			out.Signals = o.Signals.Snapshot()
		}
		if o.Demand != nil {
			st := o.Demand.Status()
			out.Demand = &st
		}
		if o.Capacity != nil {
			out.Capacity = o.Capacity.Estimates()
		}
		writeJSON(w, out)
	})
	mux.HandleFunc("GET /debug/xds", func(w http.ResponseWriter, r *http.Request) {
		if o.Nodes == nil {
			writeError(w, http.StatusNotFound, "this process serves no xDS")
			return
		}
		q, err := nodeQuery(r.URL.Query())
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		page, total := o.Nodes.ListNodes(q)
		w.Header().Set("X-Total-Count", strconv.Itoa(total)) // of the source, or of all
		writeJSON(w, page)
	})
	mux.HandleFunc("GET /debug/rollout", func(w http.ResponseWriter, r *http.Request) {
		if o.Rollouts == nil {
			writeError(w, http.StatusNotFound, "this process serves no xDS")
			return
		}
		writeJSON(w, o.Rollouts.Rollouts())
	})
	if o.UI != nil {
		mux.Handle("/ui/", o.UI)
		mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	}
	return mux
}

// signalsView is the /debug/signals document.
type signalsView struct {
	// Signals is nil when the engines are not watched (signals.disabled).
	Signals *signals.Snapshot `json:"signals"`
	Demand  *demand.Status    `json:"demand,omitempty"`
	// Capacity is each cluster's learned capacity: the estimate, its
	// prior, evidence and confidence.
	Capacity []capacity.Estimate `json:"capacity,omitempty"`
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encode: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// slogErrorLog adapts slog to promhttp's error logger.
type slogErrorLog struct{ l *slog.Logger }

func (s slogErrorLog) Println(v ...any) { s.l.Error("metrics exposition failed", "err", v) }
