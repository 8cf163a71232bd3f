package demand

import (
	"cmp"
	"fmt"
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

// Counts are what a meter saw of one stream over an interval.
type Counts struct {
	Requests  uint64  `json:"requests"`
	TokenCost float64 `json:"token_cost"`
	Shed      uint64  `json:"shed"`
	ShedCost  float64 `json:"shed_cost"`
}

func (c *Counts) add(o Counts) {
	c.Requests += o.Requests
	c.TokenCost += o.TokenCost
	c.Shed += o.Shed
	c.ShedCost += o.ShedCost
}

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

// decodeILB reads ILB's demand ClusterStats; entries that do not name a
// priority, or whose token costs are NaN, infinite or negative, are
// reported and skipped: one such value summed into the demand would
// poison the controller's moving average.
func decodeILB(cs *endpointv3.ClusterStats) (map[Key]Counts, []error) {
	out := map[Key]Counts{}
	var errs []error
	for _, ls := range cs.GetUpstreamLocalityStats() {
		loc := ls.GetLocality()
		p, err := weights.ParsePriority(loc.GetSubZone())
		if err != nil {
			errs = append(errs, fmt.Errorf("locality %s/%s: %w", loc.GetRegion(), loc.GetZone(), err))
			continue
		}
		k := Key{Source: loc.GetRegion(), Model: loc.GetZone(), Priority: p}
		c := Counts{Requests: ls.GetTotalIssuedRequests()}
		for _, m := range ls.GetLoadMetricStats() {
			switch m.GetMetricName() {
			case MetricTokenCost:
				c.TokenCost = m.GetTotalMetricValue()
			case MetricShed:
				c.Shed, c.ShedCost = m.GetNumRequestsFinishedWithMetric(), m.GetTotalMetricValue()
			}
		}
		if !valid(c.TokenCost) || !valid(c.ShedCost) {
			errs = append(errs, fmt.Errorf("locality %s/%s/%s: token cost %v, shed cost %v: want finite numbers >= 0",
				loc.GetRegion(), loc.GetZone(), loc.GetSubZone(), c.TokenCost, c.ShedCost))
			continue
		}
		sum := out[k]
		sum.add(c)
		out[k] = sum
	}
	return out, errs
}

// valid reports whether v is a finite number >= 0.
func valid(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 }
