//go:build !serving

package main

import (
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
	out, _, err := runCmd(t, "bench-replicas", "--scenario", "lora", "--loads", "0.5", "--seeds", "1", "--duration", "20s", "--max-loras", "2", "--zipf", "0")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"s = 0: the first takes 2% of them", "2 adapter slots (--max-loras 2)", "4 adapters cached in CPU memory (--max-cpu-loras 4", "| 0.5 | **ilb** |", "--max-loras 2 --zipf 0`"} {
		if !strings.Contains(out, w) {
			t.Errorf("lora report lacks %q:\n%s", w, out)
		}
	}
}
