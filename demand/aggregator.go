package demand

import (
	"cmp"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	loadstatsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

// Aggregator sums the load reports of every reporter and turns them into
// rates for the controller. It knows its demand reporters (the nodes that
// send ILB demand reports, heartbeats included) and when each last
// reported, so that a silent reporter makes the demand stale instead of
// looking like zero demand. Safe for concurrent use.
type Aggregator struct {
	cfg *config.Config
	log *slog.Logger

	mu       sync.Mutex
	pending  map[Key]Counts        // ILB demand since the last Rates
	observed map[[2]string]uint64  // Envoy reports: (source, engine cluster) -> issued requests since the last Rates
	last     map[[2]string]float64 // the rates of the last interval, for /debug
	since    time.Time
	totals   map[Key]Counts // since start, for /debug
	reports  uint64
	dropped  uint64                    // report entries skipped: malformed or bad values
	known    map[string]*reporterState // demand reporters by node id
}

// reporterState is what the aggregator knows of one demand reporter.
type reporterState struct {
	reported bool      // it reported since the last Rates
	last     time.Time // end of the last Rates interval in which it reported
}

// forgetFactor × controller.stale_after is how long a demand reporter
// may stay silent, with its stream open, before it is forgotten: until
// then the demand is stale and the controller holds the weights.
const forgetFactor = 10

// NewAggregator returns an aggregator whose first interval starts at now.
func NewAggregator(c *config.Config, log *slog.Logger, now time.Time) *Aggregator {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Aggregator{
		cfg: c, log: log, since: now,
		pending: map[Key]Counts{}, observed: map[[2]string]uint64{}, last: map[[2]string]float64{}, totals: map[Key]Counts{},
		known: map[string]*reporterState{},
	}
}

// Report takes one load report: ILB's demand ClusterStats and Envoy's own
// per-cluster stats alike. A node that sends ILB demand, even none (a
// heartbeat), is a demand reporter from then on. Streams of unknown
// sources or models are dropped with a log line (they cannot be planned
// for); entries without a priority or with NaN, infinite or negative
// token costs are dropped, logged and counted in Status.Dropped.
func (a *Aggregator) Report(req *loadstatsv3.LoadStatsRequest) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reports++
	source := req.GetNode().GetCluster()
	for _, cs := range req.GetClusterStats() {
		if cs.GetClusterName() != ClusterName {
			// Envoy's own report: issued requests per engine cluster.
			var n uint64
			for _, ls := range cs.GetUpstreamLocalityStats() {
				n += ls.GetTotalIssuedRequests()
			}
			a.observed[[2]string{source, cs.GetClusterName()}] += n
			continue
		}
		a.heard(req.GetNode().GetId())
		counts, errs := decodeILB(cs)
		a.dropped += uint64(len(errs))
		for _, err := range errs {
			a.log.Warn("demand report: entry skipped", "node", req.GetNode().GetId(), "err", err)
		}
		for k, c := range counts {
			if _, ok := a.cfg.Source(k.Source); !ok {
				a.log.Warn("demand report: unknown source", "source", k.Source)
				continue
			}
			m, ok := a.cfg.ResolveModel(k.Model)
			if !ok {
				a.log.Warn("demand report: unknown model", "model", k.Model)
				continue
			}
			k.Model = m
			sum := a.pending[k]
			sum.add(c)
			a.pending[k] = sum
			tot := a.totals[k]
			tot.add(c)
			a.totals[k] = tot
		}
	}
	return nil
}

// heard notes a demand report from node id.
func (a *Aggregator) heard(id string) {
	r := a.known[id]
	if r == nil {
		r = &reporterState{}
		a.known[id] = r
	}
	r.reported = true
}

// Disconnected forgets a demand reporter whose LRS stream ended: it is
// gone, or will report again on a new stream. Until then its silence no
// longer makes the demand stale.
func (a *Aggregator) Disconnected(node *corev3.Node) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.known, node.GetId())
}

// Rates returns the demand since the last call as rates per second, and
// how fresh it is: now when every known demand reporter has reported
// since the last call, else the end of the last interval in which the
// most silent one reported (the controller holds the weights when that is
// older than controller.stale_after). It is the controller's DemandFunc.
// A reporter silent for ten times stale_after is forgotten, with a log
// line.
func (a *Aggregator) Rates(now time.Time) (weights.Demand, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at := now
	forget := forgetFactor * a.cfg.Controller.StaleAfter.Std()
	for id, r := range a.known {
		if r.reported {
			r.reported, r.last = false, now
		}
		if silent := now.Sub(r.last); silent > forget {
			a.log.Warn("demand reporter forgotten: silent too long", "node", id, "silent", silent.Round(time.Second))
			delete(a.known, id)
			continue
		}
		if r.last.Before(at) {
			at = r.last
		}
	}
	secs := now.Sub(a.since).Seconds()
	out := weights.Demand{}
	if secs > 0 {
		for k, c := range a.pending {
			out[k] = weights.Rate{RequestsPerSecond: float64(c.Requests) / secs, CostPerSecond: c.TokenCost / secs}
		}
		a.last = make(map[[2]string]float64, len(a.observed))
		for k, n := range a.observed {
			a.last[k] = float64(n) / secs
		}
	}
	a.pending, a.observed, a.since = map[Key]Counts{}, map[[2]string]uint64{}, now
	return out, at
}

// Status is what the aggregator has seen, for /debug.
type Status struct {
	Reports uint64 `json:"reports"`
	// Dropped counts report entries skipped: without a priority, or with
	// NaN, infinite or negative token costs.
	Dropped uint64 `json:"dropped"`
	// Reporters are the known demand reporters, by node id.
	Reporters []ReporterStatus `json:"reporters,omitempty"`
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
	st := Status{Reports: a.reports, Dropped: a.dropped}
	for id, r := range a.known {
		st.Reporters = append(st.Reporters, ReporterStatus{Node: id, LastReport: r.last})
	}
	slices.SortFunc(st.Reporters, func(x, y ReporterStatus) int { return cmp.Compare(x.Node, y.Node) })
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
