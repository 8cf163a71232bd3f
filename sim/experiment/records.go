package experiment

import (
	"encoding/csv"
	"io"
	"strconv"
	"time"

	"github.com/ilbproject/ilb/route"
)

// Record is one request of a run as the benchmark saw it, for diagnosis
// (`ilb sim --requests DIR`): where ILB's decision drew it and sent it,
// the engines' view of that cluster at the decision, and what came of it.
type Record struct {
	At       time.Duration // arrival
	Source   string
	Tenant   string // "" none
	Priority string
	Prompt   int
	Output   int
	// Drawn is the cluster the weighted draw took ("" for least_loaded
	// or a refusal before the draw); Cluster the one it went to ("" when
	// refused).
	Drawn, Cluster string
	// Steered: moved by the fast loop's steering; Keep is the probability
	// it had of staying on Drawn (1 when no steering applied).
	Steered bool
	Keep    float64
	// Balanced: moved by balancing to the cluster that begins it
	// soonest; WaitDrawn and WaitAlternative the waits it compared
	// (seconds; 0 when it compared none).
	Balanced                   bool
	WaitDrawn, WaitAlternative float64
	// WithinTarget: moved because the cluster it was going to would have
	// given its first token past the TTFT target (route's reach); FirstAt
	// is that prediction (seconds; 0 when not moved).
	WithinTarget bool
	FirstAt      float64
	// Predicted is the chosen cluster's predicted TTFT at the decision
	// (seconds; -1 unknown), Awaiting ILB's requests that awaited their
	// first token there, FirstTokensPerSecond its engines' rate over the
	// last signals interval, Overloaded its SLO overload mark.
	Predicted            float64
	Awaiting             int
	FirstTokensPerSecond float64
	Overloaded           bool
	// Outcome is routed, shed (planned), overloaded, no_capacity or
	// failed; TTFT is the time to first token of a routed request.
	Outcome string
	TTFT    time.Duration
	Good    bool
	// Replica is the replica it was sent to ("" when refused, or none
	// was up); Adapter its LoRA adapter ("" the base model); AdapterTier
	// ILB's picker's adapter tier of that replica (picker.Decision.Adapter;
	// "" for another host policy or the base model); PastHolder: sent to
	// a replica whose engine did not hold the adapter in a GPU slot while
	// another replica of the cluster did and was not saturated (read live
	// at the decision: the replica benchmark's "past a replica with it").
	Replica, Adapter, AdapterTier string
	PastHolder                    bool
}

var outcomeNames = [...]string{routed: "routed", shedPlanned: "shed", shedSat: "overloaded", noCapacity: "no_capacity", failed: "failed"}

// WriteRecords writes records as CSV with a header line.
func WriteRecords(w io.Writer, recs []Record) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"at_s", "source", "tenant", "priority", "prompt", "output", "drawn", "cluster", "steered", "keep", "balanced", "wait_drawn_s", "wait_alternative_s", "predicted_ttft_s", "awaiting", "first_tokens_per_s", "overloaded", "outcome", "ttft_s", "good", "replica", "adapter", "adapter_tier", "past_holder", "within_target", "first_at_s"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, r := range recs {
		_ = cw.Write([]string{
			f(r.At.Seconds()), r.Source, r.Tenant, r.Priority, strconv.Itoa(r.Prompt), strconv.Itoa(r.Output), r.Drawn, r.Cluster,
			strconv.FormatBool(r.Steered), f(r.Keep), strconv.FormatBool(r.Balanced), f(r.WaitDrawn), f(r.WaitAlternative), f(r.Predicted), strconv.Itoa(r.Awaiting), f(r.FirstTokensPerSecond),
			strconv.FormatBool(r.Overloaded), r.Outcome, f(r.TTFT.Seconds()), strconv.FormatBool(r.Good),
			r.Replica, r.Adapter, r.AdapterTier, strconv.FormatBool(r.PastHolder), strconv.FormatBool(r.WithinTarget), f(r.FirstAt),
		})
	}
	cw.Flush()
	return cw.Error()
}

// noteDecision keeps what ILB's decision saw of request i (rc nil: no
// cell for it).
func (r *runner) noteDecision(i int, d route.Decision, rc *routeCell) {
	x := &r.records[i]
	if rc == nil {
		return
	}
	if d.Drawn >= 0 {
		x.Drawn = r.clusterNames[rc.clusters[d.Drawn]]
	}
	x.Steered, x.Keep = d.Steered, d.Keep
	x.Balanced, x.WaitDrawn, x.WaitAlternative = d.Balanced, d.WaitFirst, d.WaitAlternative
	x.WithinTarget, x.FirstAt = d.Reached, d.FirstAt
	if d.Chosen < 0 {
		return
	}
	ci := rc.clusters[d.Chosen]
	l := r.live[ci]
	x.Awaiting, x.FirstTokensPerSecond, x.Overloaded = r.clusters[ci].awaiting, l.FirstTokensPerSecond, l.Overloaded
	if l.TTFTKnown {
		x.Predicted = l.Signal(int64(x.Awaiting), r.clusters[ci].awaitingWork, r.clusters[ci].awaitingPrompt).TTFT
	}
}
