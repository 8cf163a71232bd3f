package demand

import (
	"cmp"
	"math"
	"slices"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	loadstatsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ilbproject/ilb/weights"
)

// Names of ILB's demand report.
const (
	ClusterName      = "ilb.demand"
	MetricTokenCost  = "ilb.token_cost" // estimated token-cost units of the requests
	MetricShed       = "ilb.shed"       // requests answered 429/503 by ILB; value: their token cost
	reporterNodeType = "ilb-extproc"
)

// Key names a demand stream.
type Key = weights.DemandKey

// Counts are what a meter saw of one stream over an interval. TokenCost
// may exceed what Requests alone would explain: cost confirmed by
// [Meter.AddCost] belongs to requests counted earlier, possibly in an
// earlier interval. Sums saturate (at math.MaxUint64 and
// math.MaxFloat64) instead of overflowing.
type Counts struct {
	Requests  uint64  `json:"requests"`
	TokenCost float64 `json:"token_cost"`
	Shed      uint64  `json:"shed"`
	ShedCost  float64 `json:"shed_cost"`
}

// add sums o into c, saturating.
func (c *Counts) add(o Counts) {
	c.Requests = addUint(c.Requests, o.Requests)
	c.TokenCost = addFloat(c.TokenCost, o.TokenCost)
	c.Shed = addUint(c.Shed, o.Shed)
	c.ShedCost = addFloat(c.ShedCost, o.ShedCost)
}

// addUint is a + b, or math.MaxUint64 when that overflows.
func addUint(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// addFloat is a + b, or math.MaxFloat64 when that overflows: two of the
// largest finite doubles never make +Inf. A NaN stays NaN (only a caller
// bug makes one; the aggregator refuses it with a reason).
func addFloat(a, b float64) float64 {
	if s := a + b; !math.IsInf(s, 1) {
		return s
	}
	return math.MaxFloat64
}

// finite clamps a value derived from validated counts for the
// controller and for JSON: +Inf becomes math.MaxFloat64 (-Inf its
// negative), and NaN, which validated counts never produce, 0.
func finite(v float64) float64 {
	switch {
	case math.IsNaN(v):
		return 0
	case math.IsInf(v, 1):
		return math.MaxFloat64
	case math.IsInf(v, -1):
		return -math.MaxFloat64
	}
	return v
}

// valid reports whether v is a finite number >= 0.
func valid(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 }

// Encode packs counts measured over interval into a LoadStatsRequest from
// node, localities in a fixed order.
func Encode(node *corev3.Node, counts map[Key]Counts, interval time.Duration) *loadstatsv3.LoadStatsRequest {
	keys := make([]Key, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b Key) int {
		return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Model, b.Model), cmp.Compare(a.Priority, b.Priority))
	})
	cs := &endpointv3.ClusterStats{ClusterName: ClusterName, LoadReportInterval: durationpb.New(interval)}
	for _, k := range keys {
		c := counts[k]
		cs.UpstreamLocalityStats = append(cs.UpstreamLocalityStats, &endpointv3.UpstreamLocalityStats{
			Locality:                &corev3.Locality{Region: k.Source, Zone: k.Model, SubZone: k.Priority.String()},
			TotalIssuedRequests:     c.Requests,
			TotalSuccessfulRequests: c.Requests - min(c.Shed, c.Requests),
			TotalErrorRequests:      c.Shed,
			LoadMetricStats: []*endpointv3.EndpointLoadMetricStats{
				{MetricName: MetricTokenCost, NumRequestsFinishedWithMetric: c.Requests, TotalMetricValue: c.TokenCost},
				{MetricName: MetricShed, NumRequestsFinishedWithMetric: c.Shed, TotalMetricValue: c.ShedCost},
			},
		})
	}
	return &loadstatsv3.LoadStatsRequest{Node: node, ClusterStats: []*endpointv3.ClusterStats{cs}}
}

// claimed is the interval a ClusterStats says it covers; 0 when it is
// missing, malformed or negative.
func claimed(cs *endpointv3.ClusterStats) time.Duration {
	d := cs.GetLoadReportInterval()
	if d == nil || d.CheckValid() != nil || d.AsDuration() < 0 {
		return 0
	}
	return d.AsDuration()
}

// claimedReport is the longest interval any ClusterStats of req claims.
func claimedReport(req *loadstatsv3.LoadStatsRequest) time.Duration {
	var d time.Duration
	for _, cs := range req.GetClusterStats() {
		d = max(d, claimed(cs))
	}
	return d
}
