package weights_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/weights"
)

// tickStep changes the input of the next tick of a scenario; it reports
// false when the change does not apply to the world (the step is then
// recorded as skipped).
type tickStep struct {
	name   string
	change func(in *weights.Input, r *rand.Rand) bool
}

// tickSteps is the sequence every scenario goes through, one tick per
// step, each tick planned from the previous tick's weights: a cold start,
// a steady tick, demand jumps and drops, a cluster losing and regaining
// its capacity, and topology changes (a cluster removed from the
// configuration, a source added).
var tickSteps = []tickStep{
	{"cold", func(in *weights.Input, _ *rand.Rand) bool { in.Previous = nil; return true }},
	{"steady", func(*weights.Input, *rand.Rand) bool { return true }},
	{"demand-jump", func(in *weights.Input, r *rand.Rand) bool {
		scaleDemand(in, r, 4)
		return true
	}},
	{"zero-capacity", func(in *weights.Input, r *rand.Rand) bool {
		in.Clusters = maps.Clone(in.Clusters)
		e := in.Config.Clusters[r.IntN(len(in.Config.Clusters))]
		in.Clusters[e.Name] = weights.ClusterState{Unhealthy: 2}
		return true
	}},
	{"demand-drop", func(in *weights.Input, r *rand.Rand) bool {
		scaleDemand(in, r, 0)
		return true
	}},
	{"cluster-removed", func(in *weights.Input, r *rand.Rand) bool {
		c := *in.Config
		c.Clusters = slices.Delete(slices.Clone(c.Clusters), 0, 1)
		if c.Validate() != nil {
			return false
		}
		in.Config = &c
		return true
	}},
	{"source-added", func(in *weights.Input, r *rand.Rand) bool {
		c := *in.Config
		s := c.Sources[r.IntN(len(c.Sources))]
		s.Name = "zz-added"
		c.Sources = append(slices.Clone(c.Sources), s)
		if c.Validate() != nil {
			return false
		}
		in.Config = &c
		in.Demand = maps.Clone(in.Demand)
		for i, m := range c.Models {
			in.Demand[weights.DemandKey{Source: s.Name, Model: m.Name, Priority: weights.Priorities[i%3]}] = weights.Rate{RequestsPerSecond: 1, CostPerSecond: 50 + r.Float64()*100}
		}
		return true
	}},
	{"capacity-back", func(in *weights.Input, r *rand.Rand) bool {
		in.Clusters = maps.Clone(in.Clusters)
		for _, e := range in.Config.Clusters {
			if in.Clusters[e.Name].Capacity == 0 {
				in.Clusters[e.Name] = weights.NewClusterState(100, 1+r.IntN(3), nil, 0, 0)
			}
		}
		return true
	}},
	{"steady-again", func(*weights.Input, *rand.Rand) bool { return true }},
}

// scaleDemand multiplies the demand of one source (drawn with r) by f,
// and of every other stream by a factor in [0.8, 1.2).
func scaleDemand(in *weights.Input, r *rand.Rand, f float64) {
	src := in.Config.Sources[r.IntN(len(in.Config.Sources))].Name
	d := make(weights.Demand, len(in.Demand))
	for _, k := range in.Demand.Keys() { // fixed order: the same draws every run
		v := in.Demand[k]
		if k.Source == src {
			v.CostPerSecond *= f
		} else {
			v.CostPerSecond *= 0.8 + 0.4*r.Float64()
		}
		d[k] = v
	}
	in.Demand = d
}

type tickScenario struct {
	name string
	in   weights.Input
	// explain: hash the explanations too (too costly for the large case).
	explain bool
}

// tickScenarios are random small worlds and benchmark fleets of several
// sizes; the largest only without -short.
func tickScenarios(t *testing.T) []tickScenario {
	var out []tickScenario
	r := rand.New(rand.NewPCG(2024, 14))
	for i := 0; len(out) < 25; i++ {
		wd := genWorld(r, i%3 == 0)
		if wd == nil {
			continue
		}
		out = append(out, tickScenario{fmt.Sprintf("gen-%d", i), wd.input(nil), true})
	}
	out = append(out,
		tickScenario{"fleet-10x20x5", benchWorld(t, 10, 20, 5, 5), true},
		tickScenario{"fleet-60x200x10", benchWorld(t, 60, 200, 10, 8), true},
	)
	if !testing.Short() {
		out = append(out, tickScenario{"fleet-100x500x20", benchWorld(t, 100, 500, 20, 10), false})
	}
	return out
}

// runTicks plays tickSteps on sc with policy p and returns one line per
// tick: the step, the weights version and a hash of the explained cells.
func runTicks(t *testing.T, p weights.Policy, sc tickScenario) []string {
	t.Helper()
	r := rand.New(rand.NewPCG(7, uint64(len(sc.name))))
	in := sc.in
	var lines []string
	var prev *weights.Weights
	for _, st := range tickSteps {
		in.Previous = prev
		if !st.change(&in, r) {
			lines = append(lines, fmt.Sprintf("%s %s skipped", sc.name, st.name))
			continue
		}
		w, err := p.Compute(in)
		if err != nil {
			t.Fatalf("%s %s: %v", sc.name, st.name, err)
		}
		explain := "-"
		if sc.explain {
			doc, err := json.Marshal(w.Explained(nil))
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(doc)
			explain = hex.EncodeToString(sum[:8])
		}
		lines = append(lines, fmt.Sprintf("%s %s %s %s", sc.name, st.name, w.Version(), explain))
		prev = w
	}
	return lines
}

// TestOptimizerGolden pins what the optimizer computes, bit for bit: the
// weights version (a hash of every cell's targets and shed fractions) and
// a hash of every explanation, over sequences of ticks on random worlds
// and benchmark fleets (testdata/optimizer-ticks.golden). Making the
// controller faster must not change a bit of it; a deliberate change of
// the routing policy or its cost model regenerates the file
// (go test ./weights -run TestOptimizerGolden -update) and says why in
// its commit.
func TestOptimizerGolden(t *testing.T) {
	var got []string
	for _, sc := range tickScenarios(t) {
		got = append(got, runTicks(t, weights.Optimizer{}, sc)...)
	}
	path := filepath.Join("testdata", "optimizer-ticks.golden")
	if *update {
		if testing.Short() {
			t.Fatal("-update needs the large case: run without -short")
		}
		if err := os.WriteFile(path, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if testing.Short() {
		want = slices.DeleteFunc(want, func(l string) bool { return strings.HasPrefix(l, "fleet-100x500x20 ") })
	}
	if len(got) != len(want) {
		t.Fatalf("%d ticks, golden has %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("tick %d: got %q, golden %q", i, got[i], want[i])
		}
	}
}
