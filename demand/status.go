package demand

import (
	"cmp"
	"slices"
	"time"

	"github.com/ilbproject/ilb/weights"
)

// Status is what the aggregator has seen, for /debug. Every number in it
// is finite (sums saturate), so it always encodes as JSON.
type Status struct {
	// Reports counts the reports taken (their node accepted and, over
	// LRS, authorized), including those with refused entries.
	Reports uint64 `json:"reports"`
	// Dropped counts report entries refused: bad or implausible values,
	// unknown sources, models, priorities or clusters, or an unknown node.
	Dropped uint64 `json:"dropped"`
	// Expired counts demand reporters forgotten after staying silent for
	// more than three report intervals.
	Expired uint64 `json:"expired"`
	// Reporters are the demand reporters alive, by node id.
	Reporters []ReporterStatus `json:"reporters,omitempty"`
	// LastReport is the end of the last interval (between two Rates) in
	// which any demand reporter reported; zero before.
	LastReport time.Time `json:"last_report,omitzero"`
	// Refusals are the last reports with refused entries, oldest first.
	Refusals []Refusal `json:"refusals,omitempty"`
	// Totals are ILB's demand counts since start, per stream.
	Totals []StreamTotal `json:"totals"`
	// Observed are Envoy's own reports: requests per second per (source,
	// engine cluster) over the last interval.
	Observed []ObservedRate `json:"observed,omitempty"`
}

// ReporterStatus is one demand reporter. LastReport is the end of the
// last interval (between two Rates) in which it reported; zero while its
// first interval is open.
type ReporterStatus struct {
	Node       string    `json:"node"`
	LastReport time.Time `json:"last_report"`
}

// StreamTotal is one stream's counts since start.
type StreamTotal struct {
	Key
	Counts
}

// ObservedRate is a request rate Envoy reported.
type ObservedRate struct {
	Source            string  `json:"source"`
	Cluster           string  `json:"cluster"`
	RequestsPerSecond float64 `json:"requests_per_second"`
}

// Status returns a copy of what the aggregator has seen.
func (a *Aggregator) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := Status{Reports: a.reports, Dropped: a.dropped, Expired: a.expired, LastReport: a.lastHeard}
	for id, r := range a.known {
		st.Reporters = append(st.Reporters, ReporterStatus{Node: id, LastReport: r.last})
	}
	slices.SortFunc(st.Reporters, func(x, y ReporterStatus) int { return cmp.Compare(x.Node, y.Node) })
	for _, r := range a.refusals {
		r.Reasons = slices.Clone(r.Reasons)
		st.Refusals = append(st.Refusals, r)
	}
	for _, k := range toDemand(a.totals).Keys() {
		st.Totals = append(st.Totals, StreamTotal{Key: k, Counts: a.totals[k]})
	}
	for k, r := range a.last {
		st.Observed = append(st.Observed, ObservedRate{Source: k[0], Cluster: k[1], RequestsPerSecond: r})
	}
	slices.SortFunc(st.Observed, func(x, y ObservedRate) int {
		return cmp.Or(cmp.Compare(x.Source, y.Source), cmp.Compare(x.Cluster, y.Cluster))
	})
	return st
}

func toDemand(m map[Key]Counts) weights.Demand {
	d := make(weights.Demand, len(m))
	for k := range m {
		d[k] = weights.Rate{}
	}
	return d
}
