package weights

import (
	"encoding/json"
	"time"
)

// weightsJSON is the wire form of Weights, served by /debug/weights.
type weightsJSON struct {
	Version  string    `json:"version"`
	Policy   string    `json:"policy"`
	Computed time.Time `json:"computed"`
	Status   string    `json:"status,omitempty"`
	Cells    []Cell    `json:"cells"`
}

// MarshalJSON writes version, policy, computation time and every cell.
func (w *Weights) MarshalJSON() ([]byte, error) {
	return json.Marshal(weightsJSON{Version: w.version, Policy: w.policy, Computed: w.computed, Status: w.status, Cells: w.cells})
}

// View is the JSON form of a weights version with a chosen subset of its
// cells, explained (what /debug/weights?explain=1 serves).
func (w *Weights) View(keep func(Cell) bool) any {
	return weightsJSON{Version: w.version, Policy: w.policy, Computed: w.computed, Status: w.status, Cells: w.Explained(keep)}
}

// UnmarshalJSON reads the form MarshalJSON writes, re-checking every cell
// and recomputing the version; a document whose version does not match its
// content is rejected.
func (w *Weights) UnmarshalJSON(b []byte) error {
	var j weightsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	nw, err := New(j.Policy, j.Computed, j.Cells)
	if err != nil {
		return err
	}
	if j.Version != "" && j.Version != nw.version {
		return &VersionMismatchError{Claimed: j.Version, Content: nw.version}
	}
	nw.status = j.Status
	*w = *nw
	return nil
}

// VersionMismatchError reports a weights document whose version is not the
// hash of its content.
type VersionMismatchError struct{ Claimed, Content string }

func (e *VersionMismatchError) Error() string {
	return "weights version " + e.Claimed + " does not match its content (hash " + e.Content + ")"
}
