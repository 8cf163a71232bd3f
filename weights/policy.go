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
		return Optimizer{}, nil
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
	var cells []Cell
	for _, s := range c.Sources {
		for _, m := range c.Models {
			cl := cell(c, in.Clusters, s, m.Name, policy, summary, share)
			cl.Explanation = nil // recomputed on demand: the same inputs give the same terms
			explainLazily(&cl, in.Previous, func() Explanation {
				return *cell(c, in.Clusters, s, m.Name, policy, summary, share).Explanation
			})
			cells = append(cells, cl)
		}
	}
	w, err := New(policy, in.Now, cells)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", policy, err)
	}
	return w, nil
}

func cell(c *config.Config, states map[string]ClusterState, s config.Source, model, policy, summary string, share func(ClusterState) float64) Cell {
	var terms []Term
	var raw []float64
	for _, e := range c.Clusters {
		if !e.Serves(model) {
			continue
		}
		st := states[e.Name]
		t := Term{Cluster: e.Name, Region: e.Region, Capacity: st.Capacity}
		switch {
		case !s.Allows(e.Region):
			t.Excluded = fmt.Sprintf("residency: region %s is not in the allowed regions of source %s", e.Region, s.Name)
		case st.Capacity <= 0:
			t.Excluded = "no capacity: no ready replica"
		}
		terms = append(terms, t)
		if t.Excluded == "" {
			raw = append(raw, share(st))
		} else {
			raw = append(raw, 0)
		}
	}
	weights := Quantize(raw, Total)
	var sum float64
	for _, r := range raw {
		if ok(r) {
			sum += r
		}
	}
	out := Cell{Source: s.Name, Model: model, Explanation: &Explanation{Policy: policy}}
	eligible := 0
	for i := range terms {
		if ok(raw[i]) {
			terms[i].Share = raw[i] / sum
			eligible++
		}
		terms[i].Weight = weights[i]
		if weights[i] > 0 {
			out.Targets = append(out.Targets, Target{Cluster: terms[i].Cluster, Weight: weights[i]})
		}
	}
	out.Explanation.Terms = terms
	if eligible == 0 {
		out.Explanation.Summary = "no eligible cluster has capacity: requests get 503"
	} else {
		out.Explanation.Summary = fmt.Sprintf(summary, eligible)
	}
	return out
}
