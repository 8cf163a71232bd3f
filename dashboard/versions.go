package dashboard

import (
	"time"

	"github.com/ilbproject/ilb/weights"
)

// Version is one weights version as the dashboard saw it.
type Version struct {
	Version  string    `json:"version"`
	Policy   string    `json:"policy"`
	Computed time.Time `json:"computed"`
	// Seen is when the sampler first saw it in force.
	Seen   time.Time     `json:"seen"`
	Status string        `json:"status,omitempty"`
	Cells  []VersionCell `json:"cells"`
}

// VersionCell is the routing of one (source, model) in a version.
type VersionCell struct {
	Source  string                `json:"source"`
	Model   string                `json:"model"`
	Targets []weights.Target      `json:"targets"`
	Shed    weights.ShedFractions `json:"shed"`
	Demand  float64               `json:"demand,omitempty"`
	Served  float64               `json:"served,omitempty"`
	// Changes say what moved since the previous version, and why (the
	// controller's explanation).
	Changes []string `json:"changes,omitempty"`
}

// versionInfo is what the dashboard derives once per weights version: the
// cells with their explanations, and per cluster the planned capacity and
// utilization.
type versionInfo struct {
	w     *weights.Weights
	cells []weights.Cell // explained
	// capacity and util are per cluster, from the explanations' terms
	// (the largest value any cell reports); absent when none does.
	capacity, util map[string]float64
}

// versionInfo returns the derived view of w, computing the explanations
// only when w is not the weights last asked for. Nil for nil.
func (d *Dashboard) versionInfo(w *weights.Weights) *versionInfo {
	if w == nil {
		return nil
	}
	d.mu.Lock()
	// Keyed by the object, not the version: an unchanged tick publishes a
	// new Weights with the same version and fresh demand, explanation and
	// computed time.
	if vi := d.info; vi != nil && vi.w == w {
		d.mu.Unlock()
		return vi
	}
	d.mu.Unlock()
	// Explaining every cell can cost more than a solve: once per version,
	// outside the lock (two callers may both compute; either result is
	// the same).
	vi := &versionInfo{w: w, cells: w.Explained(nil), capacity: map[string]float64{}, util: map[string]float64{}}
	for _, c := range vi.cells {
		if c.Explanation == nil {
			continue
		}
		for _, t := range c.Explanation.Terms {
			// Zero counts: a cluster that lost every replica shows 0,
			// not "unknown".
			vi.capacity[t.Cluster] = max(vi.capacity[t.Cluster], t.Capacity)
			vi.util[t.Cluster] = max(vi.util[t.Cluster], t.Utilization)
		}
	}
	d.mu.Lock()
	d.info = vi
	d.mu.Unlock()
	return vi
}

// explanation returns the explanation of one cell of the version, or nil.
func (vi *versionInfo) explanation(source, model string) *weights.Explanation {
	for _, c := range vi.cells {
		if c.Source == source && c.Model == model {
			return c.Explanation
		}
	}
	return nil
}

// newVersion is the history entry of vi, seen at now.
func newVersion(vi *versionInfo, now time.Time) Version {
	v := Version{
		Version: vi.w.Version(), Policy: vi.w.Policy(), Computed: vi.w.Computed(), Seen: now,
		Status: vi.w.Status(), Cells: make([]VersionCell, 0, len(vi.cells)),
	}
	for _, c := range vi.cells {
		vc := VersionCell{Source: c.Source, Model: c.Model, Targets: c.Targets, Shed: c.Shed, Demand: c.Demand, Served: c.Served}
		if c.Explanation != nil {
			vc.Changes = c.Explanation.Changes
		}
		v.Cells = append(v.Cells, vc)
	}
	return v
}

// currentVersion is the entry of the weights in force, for a dashboard
// whose sampler has not recorded any.
func (d *Dashboard) currentVersion() []Version {
	if d.o.Weights == nil {
		return nil
	}
	vi := d.versionInfo(d.o.Weights.Current())
	if vi == nil {
		return nil
	}
	return []Version{newVersion(vi, d.o.Now())}
}
