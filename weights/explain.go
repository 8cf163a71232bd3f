package weights

import (
	"fmt"
	"math"
)

// prevCell is what an explanation needs of the previous version of a
// cell: its weights and shed fractions (not the cell itself, which would
// keep every older version's explanation alive).
type prevCell struct {
	targets []Target
	shed    ShedFractions
}

// explainLazily attaches build to cell: the explanation is computed when
// asked for, then completed with each term's previous weight and the list
// of changes since prev (nil at start), so every policy explains itself
// the same way.
func explainLazily(cell *Cell, prev *Weights, build func() Explanation) {
	var pc *prevCell
	if prev != nil {
		if c, ok := prev.Cell(cell.Source, cell.Model); ok {
			pc = &prevCell{targets: c.Targets, shed: c.Shed}
		}
	}
	targets, shed := cell.Targets, cell.Shed
	cell.explain = func() Explanation {
		e := build()
		withChanges(&e, targets, shed, pc)
		return e
	}
}

// withChanges fills previous weights and the changes since pc.
func withChanges(e *Explanation, targets []Target, shed ShedFractions, pc *prevCell) {
	if pc == nil {
		return
	}
	before := make(map[string]uint32, len(pc.targets))
	for _, t := range pc.targets {
		before[t.Cluster] = t.Weight
	}
	now := make(map[string]uint32, len(targets))
	for _, t := range targets {
		now[t.Cluster] = t.Weight
	}
	for _, p := range Priorities {
		if d := shed[p] - pc.shed[p]; math.Abs(d) >= 0.005 {
			e.Changes = append(e.Changes, fmt.Sprintf("shed %s %.1f%% -> %.1f%%", p, 100*pc.shed[p], 100*shed[p]))
		}
	}
	for j := range e.Terms {
		t := &e.Terms[j]
		t.PrevWeight = before[t.Cluster]
		if t.PrevWeight == now[t.Cluster] {
			continue
		}
		why := t.Binding
		if why == "" {
			why = t.Excluded
		}
		line := fmt.Sprintf("%s %.1f%% -> %.1f%%", t.Cluster, pct(t.PrevWeight), pct(now[t.Cluster]))
		if why != "" {
			line += " (" + why + ")"
		}
		e.Changes = append(e.Changes, line)
	}
}

func pct(w uint32) float64 { return 100 * float64(w) / Total }
