package dashboard

import (
	"embed"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/signals"
	"github.com/ilbproject/ilb/weights"
)

// static holds the page: index.html, app.css and app.js.
//
//go:embed static
var static embed.FS

// Weights reports the weights in force.
type Weights interface {
	Current() *weights.Weights
}

// Decisions looks up decision records.
type Decisions interface {
	// Find returns up to n records matching f, newest first.
	Find(f decision.Filter, n int) []decision.Record
	Get(id string) (decision.Record, bool)
	Tally(after uint64) decision.Tally
}

// Signals reports the engines' state.
type Signals interface {
	Snapshot() *signals.Snapshot
}

var (
	_ Weights   = (*controller.Controller)(nil)
	_ Decisions = (*decision.Log)(nil)
	_ Signals   = (*signals.Monitor)(nil)
)

// Default values of [Options].
const (
	DefaultInterval    = 2 * time.Second
	DefaultWindow      = 30 * time.Minute
	DefaultMaxVersions = 200
)

// Options are what the dashboard shows and how it samples. Nil parts are
// shown as absent (the page says so); they never make a request fail.
type Options struct {
	// Config lays out the heatmap: sources, models and clusters in
	// configuration order, with their regions. Nil: the layout comes from
	// the weights' cells, sorted by name.
	Config    *config.Config
	Weights   Weights
	Decisions Decisions
	// Signals may be nil (signals.disabled): cluster state is then unknown.
	Signals Signals
	// Interval is the sampling period of Run; default DefaultInterval.
	Interval time.Duration
	// Window is how far back the samples go (the ring holds
	// Window/Interval samples); default DefaultWindow.
	Window time.Duration
	// MaxVersions bounds the weights version history; default
	// DefaultMaxVersions.
	MaxVersions int
	// Now is the clock of the samples' timestamps; nil: time.Now.
	Now    func() time.Time
	Logger *slog.Logger // nil: discard
}

// Dashboard serves the page and its API and keeps the sampled history.
// Safe for concurrent use.
type Dashboard struct {
	o Options

	mu       sync.Mutex
	samples  []Sample // ring of cap samples, oldest at start once full
	start    int      // index of the oldest sample when the ring is full
	versions []Version
	tallied  uint64 // the log's sequence number at the last sample
	primed   bool   // tallied is set: the next sample counts decisions
	info     *versionInfo
}

// New returns a dashboard over o; it samples only while Run runs.
func New(o Options) *Dashboard {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.MaxVersions <= 0 {
		o.MaxVersions = DefaultMaxVersions
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if m, ok := o.Signals.(*signals.Monitor); ok && m == nil {
		o.Signals = nil // app.App.Signals is nil when signals are disabled
	}
	n := max(int(o.Window/o.Interval), 1)
	return &Dashboard{o: o, samples: make([]Sample, 0, n)}
}

// Handler serves, all with GET:
//
//	/ui/                        the page (index.html, app.css, app.js)
//	/ui/api/weights             the heatmap: per model, a sources × clusters
//	                            matrix of weights and shares, shed fractions,
//	                            planned capacity and utilization per cluster
//	/ui/api/clusters            the clusters' state now (from the signals)
//	/ui/api/history?window=D&points=N
//	                            the samples of the last D (a Go duration;
//	                            default: all kept), oldest first; with
//	                            points, at most N (2..100000) spread evenly,
//	                            each counting the decisions of those it
//	                            stands for
//	/ui/api/versions?limit=N    the weights versions seen, newest first
//	                            (default 50, 1..1000)
//	/ui/api/decisions?limit=N   the N most recent decision records, newest
//	                            first (default 50, 1..1000)
//	/ui/api/decisions/{id}      the decision record of a request id
//
// JSON answers are UTF-8 with Cache-Control: no-store. A bad query
// parameter is a 400, an unknown id a 404, a missing component a 503; each
// with {"error":{"message":...,"parameter":...,"value":...}}.
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui/{file...}", serveStatic)
	mux.HandleFunc("GET /ui/api/weights", d.serveWeights)
	mux.HandleFunc("GET /ui/api/clusters", d.serveClusters)
	mux.HandleFunc("GET /ui/api/history", d.serveHistory)
	mux.HandleFunc("GET /ui/api/versions", d.serveVersions)
	mux.HandleFunc("GET /ui/api/decisions", d.serveDecisions)
	mux.HandleFunc("GET /ui/api/decisions/{id}", d.serveDecision)
	mux.HandleFunc("GET /ui/api/{rest...}", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such API: "+r.URL.Path, "", "")
	})
	return mux
}

// contentType is the type of a file of the page; false for any other
// name: nothing else is served.
func contentType(name string) (string, bool) {
	switch name {
	case "index.html":
		return "text/html; charset=utf-8", true
	case "app.css":
		return "text/css; charset=utf-8", true
	case "app.js":
		return "text/javascript; charset=utf-8", true
	}
	return "", false
}

// serveStatic serves a file of the page, revalidated on every load so a
// new binary's page is never mixed with an old script.
func serveStatic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	if name == "" {
		name = "index.html"
	}
	ct, ok := contentType(name)
	if !ok {
		http.NotFound(w, r)
		return
	}
	b, err := static.ReadFile("static/" + name)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(b)
}
