package weights_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

// world is a generated topology with its inputs.
type world struct {
	cfg    *config.Config
	states map[string]weights.ClusterState
	demand weights.Demand
}

// genWorld builds a random valid world: 1–4 regions, 1–4 sources with
// random residency, 1–3 models, 1–8 clusters, random capacities, some
// clusters without capacity, random demand (some zero) of every priority.
// It returns nil when the draw is not a valid configuration.
func genWorld(r *rand.Rand, shedCritical bool) *world {
	var b strings.Builder
	nr := 1 + r.IntN(4)
	b.WriteString("regions:\n")
	for i := range nr {
		fmt.Fprintf(&b, "  - {name: r%d}\n", i)
	}
	b.WriteString("network:\n")
	for i := range nr {
		for j := range nr {
			if i != j {
				fmt.Fprintf(&b, "  - {from: r%d, to: r%d, rtt_ms: %d, egress_usd_per_gb: %.2f}\n", i, j, 5+r.IntN(150), r.Float64()*0.1)
			}
		}
	}
	nm := 1 + r.IntN(3)
	b.WriteString("models:\n")
	for i := range nm {
		fmt.Fprintf(&b, "  - {name: m%d}\n", i)
	}
	b.WriteString("profiles: [{name: p, capacity_per_replica: 100}]\nclusters:\n")
	nc := 1 + r.IntN(8)
	for i := range nc {
		var ms []string
		for j := range nm {
			if r.IntN(2) == 0 || j == i%nm {
				ms = append(ms, fmt.Sprintf("m%d", j))
			}
		}
		fmt.Fprintf(&b, "  - {name: c%d, region: r%d, engine: vllm, models: [%s], profile: p, endpoints: [\"10.0.%d.1:80\"]}\n", i, r.IntN(nr), strings.Join(ms, ", "), i)
	}
	b.WriteString("sources:\n")
	ns := 1 + r.IntN(4)
	for i := range ns {
		allowed := ""
		if r.IntN(3) == 0 {
			var rs []string
			for j := range nr {
				if r.IntN(2) == 0 {
					rs = append(rs, fmt.Sprintf("r%d", j))
				}
			}
			if len(rs) > 0 {
				allowed = ", allowed_regions: [" + strings.Join(rs, ", ") + "]"
			}
		}
		fmt.Fprintf(&b, "  - {name: s%d, region: r%d%s}\n", i, r.IntN(nr), allowed)
	}
	fmt.Fprintf(&b, "controller: {shedding: {shed_critical: %v}}\n", shedCritical)
	c, err := config.Parse([]byte(b.String()))
	if err != nil {
		return nil
	}
	w := &world{cfg: c, states: map[string]weights.ClusterState{}, demand: weights.Demand{}}
	for _, e := range c.Clusters {
		switch r.IntN(5) {
		case 0:
			w.states[e.Name] = weights.ClusterState{Unhealthy: 1}
		default:
			w.states[e.Name] = weights.NewClusterState(100, 1+r.IntN(4), []float64{r.Float64()}, 0, 0)
		}
	}
	for _, s := range c.Sources {
		for _, m := range c.Models {
			for _, p := range weights.Priorities {
				if r.IntN(3) > 0 {
					w.demand[weights.DemandKey{Source: s.Name, Model: m.Name, Priority: p}] = weights.Rate{RequestsPerSecond: 1, CostPerSecond: float64(r.IntN(400))}
				}
			}
		}
	}
	return w
}

func (w *world) input(prev *weights.Weights) weights.Input {
	return weights.Input{Config: w.cfg, Clusters: w.states, Demand: w.demand, Previous: prev}
}

func mustSolve(t *testing.T, in weights.Input) *weights.Weights {
	t.Helper()
	out, err := weights.Optimizer{}.Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
