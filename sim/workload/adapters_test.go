package workload

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestAdapters: a share of the requests names an adapter of its model,
// by Zipf popularity; a session keeps its adapter; an adapter's prefix
// hashes are its own; the other draws do not move.
func TestAdapters(t *testing.T) {
	plain := baseSource("edge", 50)
	plain.SessionShare, plain.SessionTurns, plain.SharedPrefixTokens = 0.3, 4, 256
	lora := plain
	lora.Adapters = AdapterSpec{Share: 0.8, Count: 20, Zipf: 1}
	spec := func(src SourceSpec) Spec {
		return Spec{Seed: 7, Duration: 20 * time.Minute, Sources: []SourceSpec{src}}
	}
	base, reqs := generate(t, spec(plain)), generate(t, spec(lora))
	if len(base) != len(reqs) {
		t.Fatalf("%d requests with adapters, %d without: arrivals moved", len(reqs), len(base))
	}
	count := map[string]int{}
	session := map[string]string{}
	named := 0
	for i, r := range reqs {
		b := base[i]
		if r.At != b.At || r.Prompt != b.Prompt || r.Output != b.Output || r.Session != b.Session || r.Model != b.Model {
			t.Fatalf("request %d: %+v, without adapters %+v: other draws moved", i, r, b)
		}
		if r.Adapter == "" {
			if !slices.Equal(r.Prefix, b.Prefix) {
				t.Fatalf("request %d: base model's prefix changed", i)
			}
			continue
		}
		named++
		count[r.Adapter]++
		if len(r.Prefix) > 0 && r.Prefix[0] == b.Prefix[0] {
			t.Fatalf("request %d of %s shares the base model's prefix hashes", i, r.Adapter)
		}
		if r.Session != "" {
			if a, ok := session[r.Session]; ok && a != r.Adapter {
				t.Fatalf("session %s changed adapter %s -> %s", r.Session, a, r.Adapter)
			}
			session[r.Session] = r.Adapter
		}
	}
	// Sessions keep their first turn's coin, so the share is near, not exact.
	near(t, "share of requests with an adapter", float64(named)/float64(len(reqs)), 0.8, 0.05)
	first, tenth := count[AdapterName(plain.Models[0].Name, 0)], count[AdapterName(plain.Models[0].Name, 9)]
	if ratio := float64(first) / float64(max(tenth, 1)); math.Abs(ratio-10) > 3.5 {
		t.Errorf("adapter 0 drew %d, adapter 9 %d (ratio %.1f): want about 10 (Zipf 1)", first, tenth, ratio)
	}
}

func TestAdapterSpecValidate(t *testing.T) {
	src := baseSource("edge", 1)
	src.Adapters = AdapterSpec{Share: 1.5, Count: -1, Zipf: math.NaN()}
	err := Spec{Seed: 1, Duration: time.Minute, Sources: []SourceSpec{src}}.Validate()
	for _, want := range []string{"adapters.share: 1.5", "adapters.count: -1", "adapters.zipf: NaN"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v: want %q", err, want)
		}
	}
}
