package weights_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

// benchWorld builds a fleet of ns sources, nc clusters and nm models over
// nr regions: every cluster serves three models, every model is served in
// most regions, a fifth of the sources are held to two regions, and
// demand (all three priorities) is 70% of capacity overall but skewed
// toward some regions, so the optimizer must spill between regions.
func benchWorld(b testing.TB, ns, nc, nm, nr int) weights.Input {
	r := rand.New(rand.NewPCG(uint64(ns), uint64(nc)))
	c := config.Default()
	c.Profiles = []config.Profile{{Name: "p", CapacityPerReplica: 1000}}
	for i := range nr {
		c.Regions = append(c.Regions, config.Region{Name: fmt.Sprintf("r%d", i)})
	}
	for i := range nr {
		for j := range nr {
			if i != j {
				d := i - j
				if d < 0 {
					d = -d
				}
				c.Network = append(c.Network, config.Link{From: fmt.Sprintf("r%d", i), To: fmt.Sprintf("r%d", j), RTTMs: float64(10 + 15*d), EgressUSDPerGB: 0.02})
			}
		}
	}
	for i := range nm {
		c.Models = append(c.Models, config.Model{Name: fmt.Sprintf("m%d", i), PromptTokenCost: 1, OutputTokenCost: 4})
	}
	for i := range nc {
		region := i % nr
		ms := []string{fmt.Sprintf("m%d", i%nm), fmt.Sprintf("m%d", (i/nr+1)%nm), fmt.Sprintf("m%d", (i/nr+2)%nm)}
		if ms[1] == ms[0] || ms[2] == ms[0] || ms[1] == ms[2] {
			ms = ms[:1]
		}
		c.Clusters = append(c.Clusters, config.EngineCluster{
			Name: fmt.Sprintf("c%d", i), Region: fmt.Sprintf("r%d", region), Engine: config.EngineVLLM,
			Models: ms, Profile: "p", Endpoints: []string{fmt.Sprintf("10.%d.%d.1:80", i/250, i%250)},
		})
	}
	for i := range ns {
		s := config.Source{Name: fmt.Sprintf("s%d", i), Region: fmt.Sprintf("r%d", i%nr), FailMode: config.FailOpen, DefaultModel: "m0"}
		if i%5 == 4 {
			s.AllowedRegions = []string{fmt.Sprintf("r%d", i%nr), fmt.Sprintf("r%d", (i+1)%nr)}
		}
		c.Sources = append(c.Sources, s)
	}
	states := map[string]weights.ClusterState{}
	var capacity float64
	for _, e := range c.Clusters {
		states[e.Name] = weights.NewClusterState(1000, 1+r.IntN(8), nil, 0, 0)
		capacity += states[e.Name].Capacity
	}
	demand := weights.Demand{}
	var raw float64
	for _, s := range c.Sources {
		skew := 0.3 + 1.4*float64(s.Region[1]-'0')/9 // later regions busier
		for _, m := range c.Models {
			for _, p := range weights.Priorities {
				v := skew * r.Float64()
				demand[weights.DemandKey{Source: s.Name, Model: m.Name, Priority: p}] = weights.Rate{RequestsPerSecond: v, CostPerSecond: v}
				raw += v
			}
		}
	}
	for k, v := range demand {
		v.CostPerSecond *= 0.7 * capacity / raw
		demand[k] = v
	}
	// Keep only configurations in which every source reaches every model.
	var keep []config.Source
	for _, s := range c.Sources {
		ok := true
		for _, m := range c.Models {
			ok = ok && len(c.Eligible(s, m.Name)) > 0
		}
		if ok {
			keep = append(keep, s)
		}
	}
	c.Sources = keep
	for k := range demand {
		if _, ok := c.Source(k.Source); !ok {
			delete(demand, k)
		}
	}
	return weights.Input{Config: parseWorld(b, c), Clusters: states, Demand: demand}
}

// parseWorld passes the lists of c through config.Parse, as a file would
// be: Parse fills the per-item defaults (discovery, metrics paths, source
// routing and fail mode) that a Config built in Go lacks, and validates.
func parseWorld(b testing.TB, c *config.Config) *config.Config {
	b.Helper()
	data, err := json.Marshal(struct {
		Regions  []config.Region        `json:"regions"`
		Network  []config.Link          `json:"network"`
		Sources  []config.Source        `json:"sources"`
		Models   []config.Model         `json:"models"`
		Profiles []config.Profile       `json:"profiles"`
		Clusters []config.EngineCluster `json:"clusters"`
	}{c.Regions, c.Network, c.Sources, c.Models, c.Profiles, c.Clusters})
	if err != nil {
		b.Fatal(err)
	}
	out, err := config.Parse(data) // JSON is YAML
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// benchSizes are the fleets of BenchmarkOptimizer: sources, clusters,
// models, regions.
var benchSizes = []struct{ s, c, m, r int }{
	{10, 20, 5, 5},
	{100, 500, 20, 10},
	{1000, 2000, 50, 20},
}

// benchInputs holds the worlds already built: the largest takes seconds.
var benchInputs = map[[4]int]weights.Input{}

func benchInput(b *testing.B, s, c, m, r int) weights.Input {
	key := [4]int{s, c, m, r}
	in, ok := benchInputs[key]
	if !ok {
		in = benchWorld(b, s, c, m, r)
		benchInputs[key] = in
	}
	return in
}

// BenchmarkOptimizer is one controller tick at steady state (the
// previous weights in play: movement costs, step bounds, deadband) with
// the optimizer the controller keeps (NewPolicy: NewOptimizer), so its
// working memory is reused from tick to tick.
func BenchmarkOptimizer(b *testing.B) {
	benchOptimizer(b, weights.NewOptimizer)
}

// BenchmarkOptimizerFresh is BenchmarkOptimizer with the zero Optimizer,
// which allocates its working memory every tick.
func BenchmarkOptimizerFresh(b *testing.B) {
	benchOptimizer(b, func() weights.Optimizer { return weights.Optimizer{} })
}

func benchOptimizer(b *testing.B, policy func() weights.Optimizer) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("sources=%d/clusters=%d/models=%d", size.s, size.c, size.m), func(b *testing.B) {
			in := benchInput(b, size.s, size.c, size.m, size.r)
			o := policy()
			first, err := o.Compute(in)
			if err != nil {
				b.Fatal(err)
			}
			in.Previous = first // steady state: movement costs and step bounds in play
			if _, err := o.Compute(in); err != nil {
				b.Fatal(err)
			}
			runtime.GC() // building the world left garbage: collect it outside the timed ticks
			b.ReportAllocs()
			for b.Loop() {
				if _, err := o.Compute(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
