package weights_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

const smallWorld = `
regions: [{name: us}, {name: eu}]
network:
  - {from: us, to: eu, rtt_ms: 80, egress_usd_per_gb: 0.05}
  - {from: eu, to: us, rtt_ms: 80, egress_usd_per_gb: 0.05}
sources:
  - {name: edge-us, region: us}
  - {name: edge-eu, region: eu, allowed_regions: [eu]}
models: [{name: m1}, {name: m2}]
profiles: [{name: big, capacity_per_replica: 300}, {name: small, capacity_per_replica: 100}]
clusters:
  - {name: us-a, region: us, engine: vllm, models: [m1, m2], profile: big, endpoints: ["10.0.0.1:80", "10.0.0.2:80"]}
  - {name: us-b, region: us, engine: vllm, models: [m1], profile: small, endpoints: ["10.0.0.3:80"]}
  - {name: eu-a, region: eu, engine: tgi, models: [m1, m2], profile: small, endpoints: ["10.1.0.1:80"]}
`

func load(t *testing.T) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(smallWorld))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

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

type recordingSink struct {
	got []string
	err error
}

func (s *recordingSink) Prepare(_ context.Context, w *weights.Weights) (func(), error) {
	if s.err != nil {
		return nil, s.err
	}
	return func() { s.got = append(s.got, w.Version()) }, nil
}

var _ weights.Sink = (*recordingSink)(nil)

func TestControllerPublishes(t *testing.T) {
	c := load(t)
	state := weights.StaticState(c)
	first, second := &recordingSink{}, &recordingSink{}
	reg := prometheus.NewRegistry()
	ctl, err := weights.NewController(weights.ControllerOptions{
		Config: c, Policy: weights.Proportional{}, Sinks: []weights.Sink{first, second},
		State: func() (map[string]weights.ClusterState, time.Time) { return state, time.Now() }, Registry: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ctl.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	v1 := ctl.Current().Version()
	if err := ctl.Tick(ctx); err != nil { // same input: no new version
		t.Fatal(err)
	}
	if len(first.got) != 1 || len(second.got) != 1 {
		t.Fatalf("sinks got %v and %v; want one version each", first.got, second.got)
	}

	// A sink that rejects the next version keeps the last good one current
	// in every sink, including those that would have accepted it.
	state = map[string]weights.ClusterState{"us-a": state["us-a"]}
	second.err = errors.New("snapshot inconsistent")
	if err := ctl.Tick(ctx); err == nil || !strings.Contains(err.Error(), "snapshot inconsistent") {
		t.Fatalf("Tick error = %v; want the sink's error", err)
	}
	if ctl.Current().Version() != v1 || len(first.got) != 1 || len(second.got) != 1 {
		t.Errorf("after a rejected version: current %s (want %s), sinks got %v and %v", ctl.Current().Version(), v1, first.got, second.got)
	}
	second.err = nil
	if err := ctl.Tick(ctx); err != nil || ctl.Current().Version() == v1 {
		t.Errorf("after recovery: err %v, version %s", err, ctl.Current().Version())
	}
	for result, want := range map[string]float64{"published": 2, "unchanged": 1, "failed": 1} {
		if got := counterValue(t, reg, "ilb_controller_ticks_total", result); got != want {
			t.Errorf("ticks{result=%q} = %v; want %v", result, got, want)
		}
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%q}", name, label)
	return 0
}

// TestControllerAdopts: a version adopted from elsewhere (an HA leader's
// predecessor) is the one the controller holds and plans from: a tick
// whose result is that same version publishes nothing; one that differs
// is published.
func TestControllerAdopts(t *testing.T) {
	c := load(t)
	state := weights.StaticState(c)
	in := weights.Input{Config: c, Clusters: state}
	same, err := weights.Proportional{}.Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	other, err := weights.RoundRobin{}.Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		adopt       *weights.Weights
		wantPublish bool
	}{
		{"the tick computes the adopted version: nothing published", same, false},
		{"the tick computes another: published", other, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sink := &recordingSink{}
			ctl, err := weights.NewController(weights.ControllerOptions{
				Config: c, Policy: weights.Proportional{}, Sinks: []weights.Sink{sink},
				State: func() (map[string]weights.ClusterState, time.Time) { return state, time.Now() },
			})
			if err != nil {
				t.Fatal(err)
			}
			ctl.Adopt(tc.adopt)
			if ctl.Current() != tc.adopt {
				t.Fatalf("Current %v after Adopt; want the adopted version", ctl.Current())
			}
			if err := ctl.Tick(context.Background()); err != nil {
				t.Fatal(err)
			}
			if published := len(sink.got) > 0; published != tc.wantPublish {
				t.Errorf("published %v; want %v", sink.got, tc.wantPublish)
			}
		})
	}
}
