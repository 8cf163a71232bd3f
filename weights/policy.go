package weights

import (
	"fmt"

	"github.com/ilbproject/ilb/config"
)

// Policy computes weights from an input. Implementations must be
// deterministic: the same Input gives the same Weights version.
type Policy interface {
	Name() string
	Compute(in Input) (*Weights, error)
}

// ComputeStatic computes the weights of c with its configured policy on
// StaticState: what ILB serves before any live signal, and what offline
// commands (validate, envoy-config) show.
func ComputeStatic(c *config.Config) (*Weights, error) {
	p, err := NewPolicy(c.Controller.Policy)
	if err != nil {
		return nil, err
	}
	return p.Compute(Input{Config: c, Clusters: StaticState(c)})
}

// NewPolicy returns the policy named name.
func NewPolicy(name config.Policy) (Policy, error) {
	switch name {
	case config.PolicyRoundRobin:
		return RoundRobin{}, nil
	case config.PolicyProportional:
		return Proportional{}, nil
	case config.PolicyOptimizer:
		return NewOptimizer(), nil
	case config.PolicyWaterfall:
		return Waterfall{}, nil
	}
	return nil, fmt.Errorf("unknown policy %q", name)
}

// RoundRobin gives every eligible cluster of a cell an equal share.
type RoundRobin struct{}

var _ Policy = RoundRobin{}

// Name returns "round_robin".
func (RoundRobin) Name() string { return string(config.PolicyRoundRobin) }

// Compute splits each cell equally over its eligible clusters.
func (p RoundRobin) Compute(in Input) (*Weights, error) {
	return computeShares(in, p.Name(), "equal shares over %d eligible clusters", func(ClusterState) float64 { return 1 })
}

// Proportional gives every eligible cluster a share proportional to its
// capacity. Clusters serving several models count their whole capacity in
// each model's cell.
type Proportional struct{}

var _ Policy = Proportional{}

// Name returns "proportional".
func (Proportional) Name() string { return string(config.PolicyProportional) }

// Compute splits each cell in proportion to the clusters' capacity.
func (p Proportional) Compute(in Input) (*Weights, error) {
	return computeShares(in, p.Name(), "shares proportional to capacity over %d eligible clusters", func(s ClusterState) float64 { return s.Capacity })
}

// computeShares builds every cell of the configuration with share(state)
// as the unnormalised share of each eligible cluster.
func computeShares(in Input, policy, summary string, share func(ClusterState) float64) (*Weights, error) {
	if err := in.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", policy, err)
	}
	c := in.Config
	demand := floorDemand(c, in.Demand)
	var rows []baselineRow
	for _, s := range c.Sources {
		for _, m := range c.Models {
			shares := make([]float64, len(c.Clusters))
			var sum float64
			eligible := 0
			for i, e := range c.Clusters {
				st := in.Clusters[e.Name]
				if e.Serves(m.Name) && s.Allows(e.Region) && st.Capacity > 0 {
					shares[i] = share(st)
					if ok(shares[i]) {
						sum += shares[i]
						eligible++
					}
				}
			}
			for i := range shares {
				if sum > 0 && ok(shares[i]) {
					shares[i] /= sum
				} else {
					shares[i] = 0
				}
			}
			rows = append(rows, baselineRow{source: s, model: m.Name, demand: cellDemand(demand, s.Name, m.Name), shares: shares, summary: fmt.Sprintf(summary, eligible)})
		}
	}
	w, err := New(policy, in.Now, finishBaseline(in, policy, rows))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", policy, err)
	}
	return w, nil
}

func cellDemand(d Demand, source, model string) float64 {
	var t float64
	for _, p := range Priorities {
		t += d[DemandKey{source, model, p}].CostPerSecond
	}
	return t
}
