package weights

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ilbproject/ilb/config"
)

// Input is everything a policy may use. Config must have passed Validate.
type Input struct {
	Config *config.Config
	// Clusters is the live state per engine cluster name. A cluster
	// missing from the map has no capacity.
	Clusters map[string]ClusterState
	// Demand is the (smoothed) demand per (source, model, priority).
	// Cells without demand are planned for Config.Controller.MinCellDemand.
	Demand Demand
	// Previous is the last published weights, nil at start.
	Previous *Weights
	// Now stamps the result.
	Now time.Time
}

// DemandKey names one demand stream.
type DemandKey struct {
	Source   string   `json:"source"`
	Model    string   `json:"model"`
	Priority Priority `json:"priority"`
}

// Rate is a demand stream's size.
type Rate struct {
	RequestsPerSecond float64 `json:"requests_per_second"`
	// CostPerSecond is in token-cost units per second (see RateOf).
	CostPerSecond float64 `json:"cost_per_second"`
}

// RateOf is the rate of rps requests per second of model m with the given
// mean prompt and output token counts: cost = prompt × prompt_token_cost
// + output × output_token_cost per request.
func RateOf(m config.Model, rps, promptTokens, outputTokens float64) Rate {
	return Rate{RequestsPerSecond: rps, CostPerSecond: rps * m.TokenCost(promptTokens, outputTokens)}
}

// Demand is demand per stream.
type Demand map[DemandKey]Rate

// Keys returns the keys in a fixed order (source, model, priority).
func (d Demand) Keys() []DemandKey {
	ks := make([]DemandKey, 0, len(d))
	for k := range d {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, compareKeys)
	return ks
}

// compareKeys orders demand keys by source, model, then priority.
func compareKeys(a, b DemandKey) int {
	return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Model, b.Model), cmp.Compare(a.Priority, b.Priority))
}

// Total is the sum of CostPerSecond.
func (d Demand) Total() float64 {
	var t float64
	for _, k := range d.Keys() { // fixed order: the same float sum every time
		t += d[k].CostPerSecond
	}
	return t
}

// ClusterState is what the controller knows of an engine cluster now.
type ClusterState struct {
	// Ready is the number of replicas that take full traffic.
	Ready int `json:"ready"`
	// Warming holds, per replica ramping up, the fraction of a ready
	// replica's capacity it counts for, in [0, 1].
	Warming []float64 `json:"warming,omitempty"`
	// Draining and Unhealthy replicas count zero.
	Draining  int `json:"draining,omitempty"`
	Unhealthy int `json:"unhealthy,omitempty"`
	// Capacity is the full capacity, at 100% utilization, in token-cost
	// units per second: (Ready + Σ Warming) × the profile's capacity per
	// replica. The controller plans to fill TargetUtilization of it.
	Capacity float64 `json:"capacity"`
	// Saturation is the throughput the cluster serves at saturation (its
	// engines queueing), in token-cost units per second; 0 when unknown.
	// Above Capacity, the bands of the cost curve above the target
	// utilization are stretched to it (shedding is planned against what
	// the engines can serve); at or below, it changes nothing.
	Saturation float64 `json:"saturation,omitempty"`
}

// NewClusterState fills Capacity from the replica counts and the capacity
// of one replica.
func NewClusterState(perReplica float64, ready int, warming []float64, draining, unhealthy int) ClusterState {
	n := float64(ready)
	for _, w := range warming {
		n += min(max(w, 0), 1)
	}
	return ClusterState{Ready: ready, Warming: warming, Draining: draining, Unhealthy: unhealthy, Capacity: n * perReplica}
}

// StaticState derives the cluster states from the configuration alone:
// every configured endpoint counts as a ready replica. It is the state
// used until live engine signals are available.
func StaticState(c *config.Config) map[string]ClusterState {
	out := make(map[string]ClusterState, len(c.Clusters))
	for _, e := range c.Clusters {
		p, _ := c.Profile(e.Profile)
		out[e.Name] = NewClusterState(p.CapacityPerReplica, len(e.Endpoints), nil, 0, 0)
	}
	return out
}

// ErrBadInput reports inputs no policy may use: NaN, infinite or negative
// numbers, or names the configuration does not know.
var ErrBadInput = errors.New("bad input")

// bad reports whether v is not a valid amount: NaN, infinite or negative.
func bad(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) || v < 0 }

// CheckDemand rejects demand with NaN, Inf or negative rates, or for
// unknown (source, model, priority) streams, naming every offender; nil
// when d is usable. The controller checks raw demand with it before the
// demand reaches its moving average, which one bad value would poison.
// It looks each distinct source and model name up once, and orders only
// the offenders (in Keys order) for the error.
func CheckDemand(c *config.Config, d Demand) error {
	knownSource := map[string]bool{}
	canonical := map[string]bool{}
	var offenders []DemandKey
	for k, r := range d {
		okS, seen := knownSource[k.Source]
		if !seen {
			_, okS = c.Source(k.Source)
			knownSource[k.Source] = okS
		}
		okM, seen := canonical[k.Model]
		if !seen {
			m, ok := c.ResolveModel(k.Model)
			okM = ok && m == k.Model
			canonical[k.Model] = okM
		}
		if bad(r.RequestsPerSecond) || bad(r.CostPerSecond) || !okS || !okM || k.Priority >= numPriorities {
			offenders = append(offenders, k)
		}
	}
	if len(offenders) == 0 {
		return nil
	}
	slices.SortFunc(offenders, compareKeys)
	var errs []error
	for _, k := range offenders {
		if r := d[k]; bad(r.RequestsPerSecond) || bad(r.CostPerSecond) {
			errs = append(errs, fmt.Errorf("%w: demand of (%s, %s, %s) is %+v", ErrBadInput, k.Source, k.Model, k.Priority, r))
		}
		if !knownSource[k.Source] || !canonical[k.Model] || k.Priority >= numPriorities {
			errs = append(errs, fmt.Errorf("%w: demand for unknown (%s, %s, %s): want a configured source, a canonical model name and a priority", ErrBadInput, k.Source, k.Model, k.Priority))
		}
	}
	return errors.Join(errs...)
}

// check rejects inputs with NaN, Inf or negative values, or unknown
// names, naming every offender.
func (in Input) check() error {
	errs := []error{CheckDemand(in.Config, in.Demand)}
	for _, e := range in.Config.Clusters {
		st, ok := in.Clusters[e.Name]
		if !ok {
			continue
		}
		if bad(st.Capacity) || bad(st.Saturation) || st.Ready < 0 || st.Draining < 0 || st.Unhealthy < 0 || slices.ContainsFunc(st.Warming, func(w float64) bool { return bad(w) || w > 1 }) {
			errs = append(errs, fmt.Errorf("%w: state of cluster %s is %+v", ErrBadInput, e.Name, st))
		}
	}
	return errors.Join(errs...)
}
