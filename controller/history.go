package controller

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/ilbproject/ilb/weights"
)

// DefaultHistorySize is how many versions a History keeps when it is
// given size < 1.
const DefaultHistorySize = 50

// History keeps the last published weights versions: a Sink that records
// each version when the controller commits it. Safe for concurrent use.
// It keeps the routing of every cell (targets and shed fractions), not the
// explanations, so old versions cost little memory.
type History struct {
	now  func() time.Time
	mu   sync.Mutex
	ring []VersionSummary // ring[next-1] is the newest
	next int
	n    int
}

var _ Sink = (*History)(nil)

// NewHistory returns a history of the last size versions (< 1: the
// default); now stamps each publication (nil: time.Now).
func NewHistory(size int, now func() time.Time) *History {
	if size < 1 {
		size = DefaultHistorySize
	}
	if now == nil {
		now = time.Now
	}
	return &History{now: now, ring: make([]VersionSummary, size)}
}

// VersionSummary is one published version.
type VersionSummary struct {
	Version   string    `json:"version"`
	Published time.Time `json:"published"`
	Computed  time.Time `json:"computed"`
	Policy    string    `json:"policy"`
	// Status is the note the weights carried when published ("" for
	// fresh weights; the fallback policy says why it ran).
	Status string `json:"status,omitempty"`
	// Cells are the routing of every cell, sorted by (source, model).
	Cells []CellRoute `json:"cells"`
}

// CellRoute is the routing content of one cell in one version.
type CellRoute struct {
	Source  string                `json:"source"`
	Model   string                `json:"model"`
	Targets []weights.Target      `json:"targets"`
	Shed    weights.ShedFractions `json:"shed"`
}

// Prepare records nothing and cannot fail; its commit records w as the
// newest version, stamped with the time of the commit.
func (h *History) Prepare(_ context.Context, w *weights.Weights) (func(), error) {
	s := VersionSummary{
		Version: w.Version(), Computed: w.Computed(), Policy: w.Policy(), Status: w.Status(),
		Cells: make([]CellRoute, 0, w.Len()),
	}
	for c := range w.All() { // the targets are immutable: shared
		s.Cells = append(s.Cells, CellRoute{Source: c.Source, Model: c.Model, Targets: c.Targets, Shed: c.Shed})
	}
	return func() { h.add(s) }, nil
}

func (h *History) add(s VersionSummary) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s.Published = h.now()
	h.ring[h.next] = s
	h.next = (h.next + 1) % len(h.ring)
	h.n = min(h.n+1, len(h.ring))
}

// Versions returns up to n most recent versions, newest first. The
// summaries share their slices with the history: do not modify them.
func (h *History) Versions(n int) []VersionSummary {
	h.mu.Lock()
	defer h.mu.Unlock()
	n = min(n, h.n)
	out := make([]VersionSummary, 0, max(n, 0))
	for i := 1; i <= n; i++ {
		out = append(out, h.ring[(h.next-i+len(h.ring))%len(h.ring)])
	}
	return out
}

// Cell returns the routing of (source, model) in v.
func (v VersionSummary) Cell(source, model string) (CellRoute, bool) {
	for _, c := range v.Cells {
		if c.Source == source && c.Model == model {
			return c, true
		}
	}
	return CellRoute{}, false
}

// CellDiff is what changed in one cell between two versions.
type CellDiff struct {
	Source string `json:"source"`
	Model  string `json:"model"`
	// Added: the cell is new in the later version; Removed: it is gone.
	Added   bool `json:"added,omitempty"`
	Removed bool `json:"removed,omitempty"`
	// Clusters lists every cluster whose weight moved, in the order of
	// the later version's targets, then the dropped ones.
	Clusters []WeightChange `json:"clusters,omitempty"`
	Shed     []ShedChange   `json:"shed,omitempty"`
}

// WeightChange is one cluster's weight before and after (0: not a target).
type WeightChange struct {
	Cluster string `json:"cluster"`
	Before  uint32 `json:"before"`
	After   uint32 `json:"after"`
}

// ShedChange is one priority's shed fraction before and after.
type ShedChange struct {
	Priority weights.Priority `json:"priority"`
	Before   float64          `json:"before"`
	After    float64          `json:"after"`
}

// Diff lists, per (source, model) cell, what changed from version a to
// version b, sorted by (source, model); cells that did not change are not
// listed. Any shed difference is a change (the version hash sees it too).
func Diff(a, b VersionSummary) []CellDiff {
	before := make(map[[2]string]CellRoute, len(a.Cells))
	for _, c := range a.Cells {
		before[[2]string{c.Source, c.Model}] = c
	}
	var out []CellDiff
	seen := make(map[[2]string]bool, len(b.Cells))
	for _, c := range b.Cells {
		k := [2]string{c.Source, c.Model}
		seen[k] = true
		prev, ok := before[k]
		d := diffCell(prev, c)
		d.Added = !ok
		if d.Added || len(d.Clusters) > 0 || len(d.Shed) > 0 {
			out = append(out, d)
		}
	}
	for _, c := range a.Cells {
		if !seen[[2]string{c.Source, c.Model}] {
			d := diffCell(c, CellRoute{Source: c.Source, Model: c.Model})
			d.Removed = true
			out = append(out, d)
		}
	}
	sortDiffs(out)
	return out
}

// diffCell compares the routing of one cell; b names it.
func diffCell(a, b CellRoute) CellDiff {
	d := CellDiff{Source: b.Source, Model: b.Model}
	was := make(map[string]uint32, len(a.Targets))
	for _, t := range a.Targets {
		was[t.Cluster] = t.Weight
	}
	for _, t := range b.Targets {
		if w := was[t.Cluster]; w != t.Weight {
			d.Clusters = append(d.Clusters, WeightChange{Cluster: t.Cluster, Before: w, After: t.Weight})
		}
		delete(was, t.Cluster)
	}
	for _, t := range a.Targets { // dropped, in a's order
		if w, ok := was[t.Cluster]; ok {
			d.Clusters = append(d.Clusters, WeightChange{Cluster: t.Cluster, Before: w})
		}
	}
	for _, p := range weights.Priorities {
		if x, y := a.Shed[p], b.Shed[p]; math.Float64bits(x) != math.Float64bits(y) {
			d.Shed = append(d.Shed, ShedChange{Priority: p, Before: x, After: y})
		}
	}
	return d
}

func sortDiffs(ds []CellDiff) {
	slices.SortStableFunc(ds, func(a, b CellDiff) int {
		return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Model, b.Model))
	})
}
