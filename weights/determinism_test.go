package weights_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
	// explainEvery: hash the explanations of one cell in explainEvery
	// (drawn by name), 1 for all, 0 for none (explaining every cell of a
	// large fleet is costly under the race detector).
	explainEvery uint32
}

// tickScenarios are 25 random small worlds and benchmark fleets of
// several sizes, the largest only when large and not -short.
func tickScenarios(t *testing.T, large bool) []tickScenario {
	var out []tickScenario
	r := rand.New(rand.NewPCG(2024, 14))
	for i := 0; len(out) < 25; i++ {
		wd := genWorld(r, i%3 == 0)
		if wd == nil {
			continue
		}
		out = append(out, tickScenario{fmt.Sprintf("gen-%d", i), wd.input(nil), 1})
	}
	out = append(out,
		tickScenario{"fleet-10x20x5", benchWorld(t, 10, 20, 5, 5), 1},
		tickScenario{"fleet-60x200x10", benchWorld(t, 60, 200, 10, 8), 8},
	)
	if large && !testing.Short() {
		out = append(out, tickScenario{"fleet-100x500x20", benchWorld(t, 100, 500, 20, 10), 0})
	}
	return out
}

// runTicks plays tickSteps on sc with policy p and returns one line per
// tick: the step, the weights version and a hash of the explained cells
// (or of a sample of them: explainEvery).
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
		if sc.explainEvery > 0 {
			doc, err := json.Marshal(w.Explained(func(c weights.Cell) bool {
				h := fnv.New32a()
				h.Write([]byte(c.Source + "\x00" + c.Model))
				return h.Sum32()%sc.explainEvery == 0
			}))
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
// a hash of the explanations, over sequences of ticks on random worlds
// and benchmark fleets (testdata/optimizer-ticks.golden). Making the
// controller faster must not change a bit of it; a deliberate change of
// the routing policy or its cost model regenerates the file
// (go test ./weights -run TestOptimizerGolden -update) and says why in
// its commit.
//
// One NewOptimizer plays every scenario, in reverse order (the largest
// fleet first, then smaller ones), as the controller keeps its policy:
// memory kept between ticks and networks of changing sizes must not
// change a bit. A new Optimizer each tick plays the random worlds and the
// smallest fleet again.
func TestOptimizerGolden(t *testing.T) {
	scenarios := tickScenarios(t, true)
	path := filepath.Join("testdata", "optimizer-ticks.golden")
	if *update {
		if testing.Short() {
			t.Fatal("-update needs the large case: run without -short")
		}
		var lines []string
		for _, sc := range scenarios {
			lines = append(lines, runTicks(t, weights.Optimizer{}, sc)...)
		}
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	golden := map[string][]string{}
	for l := range strings.Lines(string(data)) {
		name, _, _ := strings.Cut(l, " ")
		golden[name] = append(golden[name], strings.TrimSuffix(l, "\n"))
	}
	if want := len(scenarios); len(golden) < want {
		t.Fatalf("the golden file has %d scenarios, the test %d", len(golden), want)
	}
	check := func(how string, sc tickScenario, got []string) {
		t.Helper()
		if want := golden[sc.name]; !slices.Equal(got, want) {
			t.Errorf("%s by %s:\n%s\ngolden:\n%s", sc.name, how, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	kept := weights.NewOptimizer()
	for _, sc := range slices.Backward(scenarios) {
		check("a kept NewOptimizer", sc, runTicks(t, kept, sc))
	}
	for _, sc := range scenarios {
		if sc.explainEvery == 1 { // not the larger fleets: seconds under the race detector
			check("a new Optimizer each tick", sc, runTicks(t, weights.Optimizer{}, sc))
		}
	}
}

// TestKeptOptimizerConcurrent computes on one NewOptimizer from several
// goroutines at once (the race detector watches its working memory): each
// gets exactly what a new Optimizer computes.
func TestKeptOptimizerConcurrent(t *testing.T) {
	scenarios := tickScenarios(t, false)
	scenarios = append(scenarios[:6], scenarios[len(scenarios)-2]) // a few random worlds and the smallest fleet
	want := map[string][]string{}
	for _, sc := range scenarios {
		want[sc.name] = runTicks(t, weights.Optimizer{}, sc)
	}
	kept := weights.NewOptimizer()
	got := make([][]string, 4*len(scenarios))
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i] = runTicks(t, kept, scenarios[i%len(scenarios)]) })
	}
	wg.Wait()
	for i, lines := range got {
		if sc := scenarios[i%len(scenarios)]; !slices.Equal(lines, want[sc.name]) {
			t.Errorf("%s, goroutine %d: computed\n%s\nwant\n%s", sc.name, i, strings.Join(lines, "\n"), strings.Join(want[sc.name], "\n"))
		}
	}
}
