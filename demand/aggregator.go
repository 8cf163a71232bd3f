package demand

import (
	"cmp"
	"log/slog"
	"slices"
	"sync"
	"time"

	loadstatsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

// Aggregator sums the load reports of every reporter and turns them into
// rates for the controller. Safe for concurrent use.
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
}

// NewAggregator returns an aggregator whose first interval starts at now.
func NewAggregator(c *config.Config, log *slog.Logger, now time.Time) *Aggregator {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Aggregator{
		cfg: c, log: log, since: now,
		pending: map[Key]Counts{}, observed: map[[2]string]uint64{}, last: map[[2]string]float64{}, totals: map[Key]Counts{},
	}
}

// Report takes one load report: ILB's demand ClusterStats and Envoy's own
// per-cluster stats alike. Streams of unknown sources or models are
// dropped with a log line (they cannot be planned for).
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
		counts, errs := decodeILB(cs)
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

// Rates returns the demand since the last call as rates per second, and
// now as the time it was measured: the controller's DemandFunc.
func (a *Aggregator) Rates(now time.Time) (weights.Demand, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
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
	return out, now
}

// Status is what the aggregator has seen, for /debug.
type Status struct {
	Reports uint64 `json:"reports"`
	// Totals are ILB's demand counts since start, per stream.
	Totals []StreamTotal `json:"totals"`
	// Observed are Envoy's own reports: requests per second per (source,
	// engine cluster) over the last interval.
	Observed []ObservedRate `json:"observed,omitempty"`
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
	st := Status{Reports: a.reports}
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
