//go:build !serving

package main

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchReplicas: bad flags are named, all at once; a short run writes
// its tables into the report's replicas section and keeps the rest.
func TestBenchReplicas(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{
			"bad loads, seeds and duration",
			[]string{"--loads", "0.5,x", "--seeds", "1,-2", "--duration", "0s"},
			[]string{`--loads: "x" is not a load`, `--seeds: "-2" is not a seed`, "--duration 0s: want a positive duration"},
		},
		{"unknown workload", []string{"--scenario", "chat"}, []string{`unknown replica scenario "chat"`}},
		{"adapter flags without adapters", []string{"--scenario", "rag", "--max-loras", "4", "--zipf", "1.2"}, []string{"--max-loras 4 --zipf 1.2: only the lora workload has adapters"}},
		{
			"adapter setup out of range",
			[]string{"--scenario", "lora", "--max-loras", "0", "--max-cpu-loras", "65", "--zipf", "-1"},
			[]string{"max_loras 0: want 1 to 64", "max_cpu_loras 65: want max_loras (0) to 64", "zipf -1: want 0 to 10"},
		},
		{"signals interval under signals.interval's minimum", []string{"--signals-interval", "5ms"}, []string{"--signals-interval 5ms: want a duration ≥ 10ms"}},
		{"CPU cache below the slots", []string{"--scenario", "lora", "--max-loras", "8", "--max-cpu-loras", "4"}, []string{"max_cpu_loras 4: want max_loras (8) to 64"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runCmd(t, append([]string{"bench-replicas"}, tc.args...)...)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	report := filepath.Join(t.TempDir(), "bench.md")
	if err := os.WriteFile(report, []byte("# head\n\n"+reportMarker+"\n\n"+sectionMarker+"other -->\n\nkept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCmd(t, "bench-replicas", "--scenario", "no-reuse", "--loads", "0.5", "--seeds", "1", "--duration", "30s", "--report", report); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(report)
	for _, w := range []string{"# head", "kept", sectionMarker + "replicas -->", "### no-reuse", "| 0.5 | **ilb** |"} {
		if !strings.Contains(string(b), w) {
			t.Errorf("report lacks %q:\n%s", w, b)
		}
	}
	// The adapter setup reaches the engines, the workload and the
	// report, whose reproduce line repeats it.
	dir := t.TempDir()
	out, _, err := runCmd(t, "bench-replicas", "--scenario", "lora", "--loads", "0.5", "--seeds", "1", "--duration", "20s", "--max-loras", "2", "--zipf", "0", "--requests", dir)
	if err != nil {
		t.Fatal(err)
	}
	// --requests: every request of every run, with its replica and, for
	// ILB's picker alone, the adapter tier it chose.
	for _, tc := range []struct {
		policy    string
		wantTiers bool
	}{{"ilb", true}, {"prefix_scorer", false}, {"least_request", false}} {
		f, err := os.Open(filepath.Join(dir, "lora-"+tc.policy+"-0.5-seed1.csv"))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(f).ReadAll()
		_ = f.Close()
		if err != nil || len(rows) < 2 {
			t.Fatalf("%s: %d rows, %v", tc.policy, len(rows), err)
		}
		col := map[string]int{}
		for i, name := range rows[0] {
			col[name] = i
		}
		tiers, adapters := 0, 0
		for _, r := range rows[1:] {
			if r[col["outcome"]] != "routed" {
				continue
			}
			if r[col["replica"]] == "" {
				t.Fatalf("%s: a routed request without its replica: %q", tc.policy, r)
			}
			if r[col["adapter"]] != "" {
				adapters++
			}
			if r[col["adapter_tier"]] != "" {
				tiers++
				if r[col["adapter"]] == "" {
					t.Fatalf("%s: an adapter tier for the base model: %q", tc.policy, r)
				}
			}
		}
		if adapters == 0 || tc.wantTiers != (tiers == adapters) || !tc.wantTiers && tiers > 0 {
			t.Errorf("%s: %d routed adapter requests, %d with an adapter tier; want tiers on all: %v", tc.policy, adapters, tiers, tc.wantTiers)
		}
	}
	for _, w := range []string{"s = 0: the first takes 2% of them", "2 adapter slots (--max-loras 2)", "4 adapters cached in CPU memory (--max-cpu-loras 4", "| 0.5 | **ilb** |", "--max-loras 2 --zipf 0`"} {
		if !strings.Contains(out, w) {
			t.Errorf("lora report lacks %q:\n%s", w, out)
		}
	}
}
