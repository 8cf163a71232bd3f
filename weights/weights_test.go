package weights_test

import (
	"encoding/json"
	"errors"
	"flag"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/internal/configtest"
	"github.com/ilbproject/ilb/weights"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func load(t *testing.T) *config.Config { return configtest.SmallWorld(t) }

func TestQuantize(t *testing.T) {
	tests := []struct {
		name   string
		shares []float64
		total  uint32
		want   []uint32
	}{
		{"thirds: remainder to the first", []float64{1, 1, 1}, 10000, []uint32{3334, 3333, 3333}},
		{"proportional", []float64{600, 100, 100}, 10000, []uint32{7500, 1250, 1250}},
		{"largest remainder wins", []float64{0.104, 0.2, 0.696}, 100, []uint32{10, 20, 70}},
		{"ties go to the earlier index", []float64{0.5, 0.5}, 3, []uint32{2, 1}},
		{"remainders", []float64{1, 2, 4}, 10, []uint32{1, 3, 6}},
		{"zeros keep zero", []float64{0, 1, 0}, 10000, []uint32{0, 10000, 0}},
		{"bad shares count as zero", []float64{math.NaN(), -1, math.Inf(1), 2}, 10, []uint32{0, 0, 0, 10}},
		{"nothing positive", []float64{0, 0}, 10, []uint32{0, 0}},
		{"empty", nil, 10, []uint32{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := weights.Quantize(tt.shares, tt.total)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Quantize(%v, %d) = %v; want %v", tt.shares, tt.total, got, tt.want)
			}
		})
	}
}

func FuzzQuantize(f *testing.F) {
	f.Add(1.0, 2.0, 3.0, uint32(10000))
	f.Add(0.0, 0.0, 1e-300, uint32(7))
	f.Fuzz(func(t *testing.T, a, b, c float64, total uint32) {
		total %= 1 << 20
		got := weights.Quantize([]float64{a, b, c}, total)
		var sum uint64
		for _, g := range got {
			sum += uint64(g)
		}
		anyPositive := false
		for _, s := range []float64{a, b, c} {
			anyPositive = anyPositive || (s > 0 && !math.IsInf(s, 0) && !math.IsNaN(s))
		}
		if anyPositive && (a+b+c < math.MaxFloat64) && sum != uint64(total) {
			t.Fatalf("Quantize(%v,%v,%v; %d) = %v sums to %d", a, b, c, total, got, sum)
		}
		if sum > uint64(total) {
			t.Fatalf("sum %d > total %d", sum, total)
		}
	})
}

func targets(t *testing.T, w *weights.Weights, source, model string) []weights.Target {
	t.Helper()
	c, ok := w.Cell(source, model)
	if !ok {
		t.Fatalf("no cell (%s, %s)", source, model)
	}
	return c.Targets
}

func TestPolicies(t *testing.T) {
	c := load(t)
	tests := []struct {
		name   string
		policy config.Policy
		source string
		model  string
		want   []weights.Target
	}{
		{
			"round robin over three", config.PolicyRoundRobin, "edge-us", "m1",
			[]weights.Target{{"us-a", 3334}, {"us-b", 3333}, {"eu-a", 3333}},
		},
		{
			"round robin skips clusters not serving the model", config.PolicyRoundRobin, "edge-us", "m2",
			[]weights.Target{{"us-a", 5000}, {"eu-a", 5000}},
		},
		{
			"proportional to capacity", config.PolicyProportional, "edge-us", "m1",
			[]weights.Target{{"us-a", 7500}, {"us-b", 1250}, {"eu-a", 1250}},
		},
		{
			"residency keeps edge-eu in eu", config.PolicyProportional, "edge-eu", "m1",
			[]weights.Target{{"eu-a", 10000}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := weights.NewPolicy(tt.policy)
			if err != nil {
				t.Fatal(err)
			}
			w, err := p.Compute(weights.Input{Config: c, Clusters: weights.StaticState(c)})
			if err != nil {
				t.Fatal(err)
			}
			if got := targets(t, w, tt.source, tt.model); !slices.Equal(got, tt.want) {
				t.Errorf("targets = %v; want %v", got, tt.want)
			}
		})
	}
}

func TestExplanation(t *testing.T) {
	c := load(t)
	st := weights.StaticState(c)
	st["us-b"] = weights.ClusterState{}
	w, err := weights.Proportional{}.Compute(weights.Input{Config: c, Clusters: st})
	if err != nil {
		t.Fatal(err)
	}
	cell := explained(t, w, "edge-eu", "m1")
	ex := map[string]string{}
	for _, term := range cell.Explanation.Terms {
		ex[term.Cluster] = term.Excluded
	}
	if !strings.Contains(ex["us-a"], "residency") || ex["us-b"] != "residency: region us is not in the allowed regions of source edge-eu" || ex["eu-a"] != "" {
		t.Errorf("exclusions = %q", ex)
	}
	cell = explained(t, w, "edge-us", "m1")
	for _, term := range cell.Explanation.Terms {
		if term.Cluster == "us-b" && (term.Excluded != "no capacity: no ready replica" || term.Weight != 0) {
			t.Errorf("us-b term = %+v; want excluded for no ready replica", term)
		}
		if term.Cluster == "us-a" && math.Abs(term.Share-600.0/(600+100)) > 1e-12 {
			t.Errorf("us-a share = %v", term.Share)
		}
	}
}

func TestNoCapacityGivesEmptyTargets(t *testing.T) {
	c := load(t)
	w, err := weights.Proportional{}.Compute(weights.Input{Config: c, Clusters: map[string]weights.ClusterState{}})
	if err != nil {
		t.Fatal(err)
	}
	cell := explained(t, w, "edge-us", "m1")
	if len(cell.Targets) != 0 || !strings.Contains(cell.Explanation.Summary, "503") {
		t.Errorf("cell = %+v; want no targets and a 503 summary", cell)
	}
}

func TestVersionIsContentHash(t *testing.T) {
	c := load(t)
	in := weights.Input{Config: c, Clusters: weights.StaticState(c), Now: time.Unix(1, 0)}
	a, _ := weights.Proportional{}.Compute(in)
	in.Now = time.Unix(99, 0)
	b, _ := weights.Proportional{}.Compute(in)
	if a.Version() != b.Version() || len(a.Version()) != 16 {
		t.Errorf("same routing, versions %q and %q; want equal 16-hex versions", a.Version(), b.Version())
	}
	r, _ := weights.RoundRobin{}.Compute(in)
	if r.Version() == a.Version() {
		t.Errorf("different routing, same version %q", a.Version())
	}
}

func TestNewRejects(t *testing.T) {
	tests := []struct {
		name  string
		cells []weights.Cell
		want  string
	}{
		{"bad sum", []weights.Cell{{Source: "s", Model: "m", Targets: []weights.Target{{"a", 10}}}}, "weights sum to 10, want 10000"},
		{"zero weight", []weights.Cell{{Source: "s", Model: "m", Targets: []weights.Target{{"a", 10000}, {"b", 0}}}}, `cluster "b" has weight 0`},
		{"duplicate cluster", []weights.Cell{{Source: "s", Model: "m", Targets: []weights.Target{{"a", 5000}, {"a", 5000}}}}, `cluster "a" appears twice`},
		{"duplicate cell", []weights.Cell{{Source: "s", Model: "m"}, {Source: "s", Model: "m"}}, "cell (s, m) appears twice"},
		{"bad shed", []weights.Cell{{Source: "s", Model: "m", Shed: weights.ShedFractions{0, 0, 1.5}}}, "shed fraction 1.5 for sheddable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := weights.New("p", time.Time{}, tt.cells)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New error = %v; want %q", err, tt.want)
			}
		})
	}
}

func TestJSONRoundTrip(t *testing.T) {
	c := load(t)
	w, _ := weights.Proportional{}.Compute(weights.Input{Config: c, Clusters: weights.StaticState(c)})
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	var back weights.Weights
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Version() != w.Version() {
		t.Errorf("round trip version %q; want %q", back.Version(), w.Version())
	}
	tampered := strings.Replace(string(b), `"weight":7500`, `"weight":7400`, 1)
	tampered = strings.Replace(tampered, `"weight":1250`, `"weight":1350`, 1)
	var mm *weights.VersionMismatchError
	if err := json.Unmarshal([]byte(tampered), &back); !errors.As(err, &mm) {
		t.Errorf("tampered document: err = %v; want VersionMismatchError", err)
	}
}
