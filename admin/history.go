package admin

import (
	"net/http"
	"time"

	"github.com/ilbproject/ilb/controller"
)

// historyEntry is one version of /debug/weights/history.
type historyEntry struct {
	Version   string    `json:"version"`
	Published time.Time `json:"published"`
	Computed  time.Time `json:"computed"`
	Policy    string    `json:"policy"`
	Status    string    `json:"status,omitempty"`
	// Previous is the version published before this one, "" when the
	// history keeps none (then Changes is empty).
	Previous string `json:"previous,omitempty"`
	// Changes lists the cells (of the filter) that changed since Previous.
	Changes []controller.CellDiff `json:"changes"`
	// Cells is the routing of the filter's cells in this version.
	Cells []controller.CellRoute `json:"cells"`
}

// serveHistory answers GET /debug/weights/history (see Handler).
func serveHistory(w http.ResponseWriter, r *http.Request, h History) {
	if h == nil {
		writeError(w, http.StatusNotFound, "this process keeps no weights history")
		return
	}
	q := r.URL.Query()
	n, err := intParam(q, "limit", 10, 1000)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	source, model := q.Get("source"), q.Get("model")
	keep := func(v controller.VersionSummary) controller.VersionSummary {
		cells := []controller.CellRoute{}
		for _, c := range v.Cells {
			if (source == "" || c.Source == source) && (model == "" || c.Model == model) {
				cells = append(cells, c)
			}
		}
		v.Cells = cells
		return v
	}
	vs := h.Versions(n + 1) // one more: the last shown has a predecessor
	out := []historyEntry{}
	for i := 0; i < len(vs) && i < n; i++ {
		v := keep(vs[i])
		e := historyEntry{
			Version: v.Version, Published: v.Published, Computed: v.Computed,
			Policy: v.Policy, Status: v.Status, Cells: v.Cells, Changes: []controller.CellDiff{},
		}
		if i+1 < len(vs) {
			prev := keep(vs[i+1])
			e.Previous = prev.Version
			if d := controller.Diff(prev, v); d != nil {
				e.Changes = d
			}
		}
		out = append(out, e)
	}
	writeJSON(w, out)
}
