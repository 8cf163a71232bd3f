package decision

import "github.com/ilbproject/ilb/picker"

// ReplicaDecision is the replica ILB chose inside the chosen cluster, and
// why (clusters with replica_picking on).
type ReplicaDecision struct {
	// Chosen is the replica (host:port); "" when ILB left the choice to
	// Envoy (Skipped says why).
	Chosen string `json:"chosen,omitempty"`
	// Hosts is the override-host list sent to Envoy: Chosen, then the
	// replicas a retry takes.
	Hosts []string `json:"hosts,omitempty"`
	// Reason: prefix, session, load or only (package picker).
	Reason string `json:"reason,omitempty"`
	// PromptBlocks is how many hashes of the prompt's chain were taken
	// (picker.AppendBlocks: one per 256-byte block for the first 512,
	// then one per 2 KiB; at most picker.MaxBlocks).
	PromptBlocks int `json:"prompt_blocks"`
	// Terms are the chosen replica's: cached prefix, load, cost.
	Terms picker.Term `json:"terms"`
	// RunnerUp is the second best, and Lost why it was not chosen:
	// more_work (more work there) or tie (equal work; more
	// in flight, saturated, or later in rotation).
	RunnerUp *picker.Term `json:"runner_up,omitempty"`
	Lost     string       `json:"runner_up_lost,omitempty"`
	// Skipped says why ILB chose no replica: Envoy's least request did.
	Skipped string `json:"skipped,omitempty"`
	// Served is set from the response: "chosen" when Envoy's upstream
	// host is Chosen, "other" when it is another (a retry took the next
	// host, or Envoy fell back because the host had left its cluster).
	Served string `json:"served,omitempty"`
}

// size is the record memory the decision adds.
func (d *ReplicaDecision) size() int {
	n := 128 + len(d.Chosen) + len(d.Reason) + len(d.Lost) + len(d.Skipped) + len(d.Terms.Address)
	for _, h := range d.Hosts {
		n += 16 + len(h)
	}
	if d.RunnerUp != nil {
		n += 96 + len(d.RunnerUp.Address)
	}
	return n
}
