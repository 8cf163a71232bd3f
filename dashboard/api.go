package dashboard

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/internal/bound"
	"github.com/ilbproject/ilb/signals"
)

// maxLimit bounds ?limit= of the list endpoints.
const maxLimit = 1000

// ClustersNow is the /ui/api/clusters document.
type ClustersNow struct {
	// At is when the signals monitor built its snapshot (zero without one).
	At       time.Time       `json:"at"`
	Clusters []ClusterSample `json:"clusters"`
	// Replicas are the replicas as last seen, sorted by cluster then
	// address; empty without a signals monitor.
	Replicas []ReplicaNow `json:"replicas"`
}

// ReplicaNow is one replica in /ui/api/clusters.
type ReplicaNow struct {
	Cluster   string    `json:"cluster"`
	Address   string    `json:"address"`
	State     string    `json:"state"`
	Reason    string    `json:"reason,omitempty"`
	Since     time.Time `json:"since"`
	Saturated bool      `json:"saturated"`
	Waiting   float64   `json:"waiting"`
	Running   float64   `json:"running"`
	KVUsage   *float64  `json:"kv_usage"`
	LastError string    `json:"last_error,omitempty"`
}

func (d *Dashboard) snapshot() *signals.Snapshot {
	if d.o.Signals == nil {
		return nil
	}
	return d.o.Signals.Snapshot()
}

func (d *Dashboard) serveWeights(w http.ResponseWriter, _ *http.Request) {
	if d.o.Weights == nil {
		writeError(w, http.StatusServiceUnavailable, "this process computes no weights", "", "")
		return
	}
	vi := d.versionInfo(d.o.Weights.Current())
	if vi == nil {
		writeError(w, http.StatusServiceUnavailable, "no weights have been computed yet", "", "")
		return
	}
	writeJSON(w, d.heatmap(vi))
}

func (d *Dashboard) serveClusters(w http.ResponseWriter, _ *http.Request) {
	var vi *versionInfo
	if d.o.Weights != nil {
		vi = d.versionInfo(d.o.Weights.Current())
	}
	out := ClustersNow{Clusters: d.clusterSamples(vi), Replicas: []ReplicaNow{}}
	if snap := d.snapshot(); snap != nil {
		out.At = snap.At
		for _, r := range snap.Replicas {
			rn := ReplicaNow{
				Cluster: r.Cluster, Address: r.Address, State: string(r.State), Reason: r.Reason, Since: r.Since,
				Saturated: r.Saturated, Waiting: r.Metrics.Waiting, Running: r.Metrics.Running, LastError: r.LastError,
			}
			if r.Metrics.KVKnown {
				kv := r.Metrics.KVUsage
				rn.KVUsage = &kv
			}
			out.Replicas = append(out.Replicas, rn)
		}
	}
	writeJSON(w, out)
}

func (d *Dashboard) serveHistory(w http.ResponseWriter, r *http.Request) {
	var since time.Time
	if s := r.URL.Query().Get("window"); s != "" {
		win, err := time.ParseDuration(s)
		if err != nil || win <= 0 {
			writeError(w, http.StatusBadRequest, "window "+bound.Quote(s, bound.Excerpt)+" is not a positive duration such as 5m or 90s", "window", s)
			return
		}
		since = d.o.Now().Add(-win)
	}
	ss := d.history(since)
	if p := r.URL.Query().Get("points"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 2 || n > 100000 {
			writeError(w, http.StatusBadRequest, "points "+bound.Quote(p, bound.Excerpt)+" is not a number in 2..100000", "points", p)
			return
		}
		ss = downsample(ss, n)
	}
	writeJSON(w, map[string]any{
		"interval_seconds": d.o.Interval.Seconds(),
		"window_seconds":   d.o.Window.Seconds(),
		"samples":          ss,
	})
}

func (d *Dashboard) serveVersions(w http.ResponseWriter, r *http.Request) {
	n, ok := limit(w, r, 50)
	if !ok {
		return
	}
	vs := d.versionList(n)
	if len(vs) == 0 {
		vs = d.currentVersion()
	}
	if vs == nil {
		vs = []Version{}
	}
	writeJSON(w, vs)
}

func (d *Dashboard) serveDecisions(w http.ResponseWriter, r *http.Request) {
	n, ok := limit(w, r, 50)
	if !ok {
		return
	}
	if d.o.Decisions == nil {
		writeError(w, http.StatusServiceUnavailable, "this process keeps no decision log", "", "")
		return
	}
	// Completed requests only: under load the newest records are of
	// requests still in flight, which have nothing to show yet.
	recs := d.o.Decisions.Find(decision.Filter{Complete: true}, n)
	if recs == nil {
		writeJSON(w, []struct{}{})
		return
	}
	writeJSON(w, recs)
}

func (d *Dashboard) serveDecision(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if d.o.Decisions == nil {
		writeError(w, http.StatusServiceUnavailable, "this process keeps no decision log", "", "")
		return
	}
	rec, ok := d.o.Decisions.Get(id)
	if !ok {
		writeError(w, http.StatusNotFound, "no decision record for request id "+bound.Quote(id, bound.Excerpt)+" (unknown; evicted from the log, which keeps the latest records; or never seen by ILB: Envoy answers without ext_proc when it cannot reach it — a fail-open source by its default weights, a fail-closed one with 503 routing_unavailable)", "id", id)
		return
	}
	writeJSON(w, rec)
}

// limit reads ?limit= (default def, 1..maxLimit); on a bad value it
// answers 400 and returns false.
func limit(w http.ResponseWriter, r *http.Request, def int) (int, bool) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return def, true
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 || v > maxLimit {
		writeError(w, http.StatusBadRequest, "limit "+bound.Quote(s, bound.Excerpt)+" is not a number in 1.."+strconv.Itoa(maxLimit), "limit", s)
		return 0, false
	}
	return v, true
}

// APIError is the body of every error answer: {"error": APIError}.
type APIError struct {
	Message   string `json:"message"`
	Parameter string `json:"parameter,omitempty"`
	Value     string `json:"value,omitempty"`
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encode: "+err.Error(), "", "")
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n'))
}

// writeError answers an API error; the value the client sent is echoed
// as a bounded excerpt, in the message too.
func writeError(w http.ResponseWriter, status int, msg, param, value string) {
	msg, value = bound.String(msg, bound.Message), bound.String(value, bound.Excerpt)
	b, _ := json.Marshal(map[string]APIError{"error": {Message: msg, Parameter: param, Value: value}})
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
