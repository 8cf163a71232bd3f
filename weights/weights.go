package weights

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"
	"time"
)

// Total is the sum of the integer weights of every (source, model) cell
// that has capacity. It is fixed, so a weight reads as basis points.
const Total = 10000

// Target is one engine cluster of a cell and its integer weight, > 0.
type Target struct {
	Cluster string `json:"cluster"`
	Weight  uint32 `json:"weight"`
}

// Cell is the routing of one model's traffic from one source.
type Cell struct {
	Source string `json:"source"`
	Model  string `json:"model"`
	// Targets are the clusters with a positive weight, in the order of the
	// configuration's cluster list: the order Envoy walks them. Their
	// weights sum to Total. Empty when no eligible cluster has capacity.
	Targets []Target `json:"targets"`
	// Shed is the fraction of this cell's requests to shed, per priority.
	Shed ShedFractions `json:"shed"`
	// Demand is the demand the cell was planned for and Served the part
	// of it routed, in token-cost units per second (0 for policies that
	// ignore demand).
	Demand float64 `json:"demand,omitempty"`
	Served float64 `json:"served,omitempty"`
	// Explanation says why the weights are what they are. Policies attach
	// it lazily (computing it for every cell of a large fleet costs more
	// than the solve): Weights.Explain and Weights.Explained fill it.
	Explanation *Explanation `json:"explanation,omitempty"`
	explain     func() Explanation
}

// Explanation of one cell's weights.
type Explanation struct {
	Policy  string `json:"policy"`
	Summary string `json:"summary"`
	// Terms holds one row per cluster serving the model, eligible or not,
	// in configuration order.
	Terms []Term `json:"terms"`
	// Changes says what moved since the previous version, and why.
	Changes []string `json:"changes,omitempty"`
}

// Term is what the policy saw of one cluster for one cell.
type Term struct {
	Cluster string `json:"cluster"`
	Region  string `json:"region"`
	// Capacity is the cluster's planned capacity in token-cost units per
	// second (ready replicas × per-replica capacity × target utilization).
	Capacity float64 `json:"capacity"`
	// Share is the exact share before quantization, in [0, 1].
	Share  float64 `json:"share"`
	Weight uint32  `json:"weight"`
	// PrevWeight is the cluster's weight in the previous version.
	PrevWeight uint32 `json:"prev_weight"`
	// Excluded is why the cluster gets nothing, or "" when eligible.
	Excluded string `json:"excluded,omitempty"`

	// The optimizer's cost terms, in ms-equivalent per token-cost unit:
	// the round trip, the egress price, and the marginal cost of the next
	// unit here (latency + egress + movement + the utilization band the
	// cluster's planned load falls in).
	LatencyMs    float64 `json:"latency_ms,omitempty"`
	EgressCost   float64 `json:"egress_cost,omitempty"`
	MarginalCost float64 `json:"marginal_cost,omitempty"`
	// Flow is the cell's planned load on the cluster (token-cost units
	// per second) and Utilization the cluster's planned utilization with
	// every cell's new weights (the predicted post-shift load).
	Flow        float64 `json:"flow,omitempty"`
	Utilization float64 `json:"utilization,omitempty"`
	// Binding names the constraint that shapes this weight: at capacity,
	// above target, step bound, deadband, capacity lost, dearer.
	Binding string `json:"binding,omitempty"`
}

// Weights is one version of the routing of every (source, model) cell. It
// is immutable: share it freely between goroutines, never modify what its
// methods return.
type Weights struct {
	version  string
	policy   string
	computed time.Time
	cells    []Cell // sorted by (Source, Model)
	status   string // why the routing is what it is when not freshly computed
}

// New builds a Weights from cells, checking that every cell's targets are
// positive and sum to Total (or are empty), that no cell repeats and that
// shed fractions are in [0, 1]. The version is a hash of the routing
// content (targets and shed fractions, not explanations or time), so the
// same routing always has the same version.
func New(policy string, computed time.Time, cells []Cell) (*Weights, error) {
	return newWeights(policy, computed, slices.Clone(cells))
}

// newWeights is New taking cs for its own (the caller keeps no
// reference): no copy, and no sort when cs is in order already.
func newWeights(policy string, computed time.Time, cs []Cell) (*Weights, error) {
	byName := func(a, b Cell) int {
		return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Model, b.Model))
	}
	if !slices.IsSortedFunc(cs, byName) {
		slices.SortFunc(cs, byName)
	}
	var errs []error
	for i, c := range cs {
		if i > 0 && cs[i-1].Source == c.Source && cs[i-1].Model == c.Model {
			errs = append(errs, fmt.Errorf("cell (%s, %s) appears twice", c.Source, c.Model))
		}
		if err := c.check(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("invalid weights: %w", err)
	}
	return &Weights{version: hashCells(cs), policy: policy, computed: computed, cells: cs}, nil
}

func (c Cell) check() error {
	var sum uint64
	var seen map[string]bool // only for long lists: most cells have a few targets
	if len(c.Targets) > 16 {
		seen = make(map[string]bool, len(c.Targets))
	}
	for i, t := range c.Targets {
		if t.Weight == 0 {
			return fmt.Errorf("cell (%s, %s): cluster %q has weight 0: drop it instead", c.Source, c.Model, t.Cluster)
		}
		dup := seen[t.Cluster]
		if seen == nil {
			for _, u := range c.Targets[:i] {
				dup = dup || u.Cluster == t.Cluster
			}
		} else {
			seen[t.Cluster] = true
		}
		if dup {
			return fmt.Errorf("cell (%s, %s): cluster %q appears twice", c.Source, c.Model, t.Cluster)
		}
		sum += uint64(t.Weight)
	}
	if len(c.Targets) > 0 && sum != Total {
		return fmt.Errorf("cell (%s, %s): weights sum to %d, want %d", c.Source, c.Model, sum, Total)
	}
	for _, p := range Priorities {
		if f := c.Shed[p]; math.IsNaN(f) || f < 0 || f > 1 {
			return fmt.Errorf("cell (%s, %s): shed fraction %v for %s is not in [0, 1]", c.Source, c.Model, f, p)
		}
	}
	return nil
}

// hashCells hashes the routing content in a fixed, unambiguous encoding.
// The encoding is gathered in a buffer and hashed in chunks: the hash of
// a byte stream does not depend on how it is split.
func hashCells(cs []Cell) string {
	h := sha256.New()
	buf := make([]byte, 0, 64<<10)
	str := func(s string) {
		buf = binary.BigEndian.AppendUint64(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	num := func(v uint64) { buf = binary.BigEndian.AppendUint64(buf, v) }
	for _, c := range cs {
		str(c.Source)
		str(c.Model)
		num(uint64(len(c.Targets)))
		for _, t := range c.Targets {
			str(t.Cluster)
			num(uint64(t.Weight))
		}
		for _, f := range c.Shed {
			num(math.Float64bits(f))
		}
		if len(buf) > 60<<10 {
			h.Write(buf)
			buf = buf[:0]
		}
	}
	h.Write(buf)
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// WithStatus returns a copy of w that carries status (for example why the
// controller kept these weights); the version does not change.
func (w *Weights) WithStatus(status string) *Weights {
	c := *w
	c.status = status
	return &c
}

// Status is the note WithStatus attached, "" for fresh weights.
func (w *Weights) Status() string { return w.status }

// Version is the content hash: 16 hex digits.
func (w *Weights) Version() string { return w.version }

// Policy names the policy that computed these weights.
func (w *Weights) Policy() string { return w.policy }

// Computed is when the weights were computed.
func (w *Weights) Computed() time.Time { return w.computed }

// Cell returns the cell of (source, model).
func (w *Weights) Cell(source, model string) (Cell, bool) {
	i, ok := slices.BinarySearchFunc(w.cells, [2]string{source, model}, func(c Cell, k [2]string) int {
		return cmp.Or(cmp.Compare(c.Source, k[0]), cmp.Compare(c.Model, k[1]))
	})
	if !ok {
		return Cell{}, false
	}
	return w.cells[i], true
}

// Cells returns every cell, sorted by source then model, without their
// explanations (see Explained). The slice is a copy; the cells' slices are
// shared and must not be modified.
func (w *Weights) Cells() []Cell { return slices.Clone(w.cells) }

// Len is the number of cells.
func (w *Weights) Len() int { return len(w.cells) }

// All yields the cells in (source, model) order without copying them.
func (w *Weights) All() iter.Seq[Cell] { return slices.Values(w.cells) }

// Explain returns the explanation of one cell, computing it if the policy
// attached it lazily.
func (w *Weights) Explain(source, model string) (Explanation, bool) {
	c, ok := w.Cell(source, model)
	if !ok {
		return Explanation{}, false
	}
	return c.explanation(), true
}

// Explained returns the cells that match keep (nil: all) with their
// explanations filled.
func (w *Weights) Explained(keep func(Cell) bool) []Cell {
	var out []Cell
	for _, c := range w.cells {
		if keep != nil && !keep(c) {
			continue
		}
		e := c.explanation()
		c.Explanation = &e
		out = append(out, c)
	}
	return out
}

func (c Cell) explanation() Explanation {
	switch {
	case c.Explanation != nil:
		return *c.Explanation
	case c.explain != nil:
		return c.explain()
	}
	return Explanation{}
}
