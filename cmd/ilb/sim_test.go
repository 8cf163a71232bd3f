package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/sim/experiment"
)

func TestSimCommand(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "bench.md")
	head := "# Benchmarks\n\nHand-written analysis.\n\n" + reportMarker + "\nold results\n"
	if err := os.WriteFile(report, []byte(head), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, _, err := runCmd(t, "sim", "--scenario", "outage", "--duration", "1m", "--policies", "round_robin,ilb",
		"--json", "--plots", filepath.Join(dir, "plots"), "--report", report)
	if err != nil {
		t.Fatal(err)
	}
	var all [][]*experiment.Result
	if err := json.Unmarshal([]byte(stdout), &all); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout)
	}
	if len(all) != 1 || len(all[0]) != 2 || all[0][0].Policy != "round_robin" || all[0][1].Policy != "ilb" {
		t.Fatalf("results: %d scenarios; want outage with round_robin and ilb", len(all))
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{"Hand-written analysis.", "| scenario | vs round_robin: goodput, p99 TTFT |", "| outage | ", "### outage", "| ilb |", "![outage ttft](plots/outage-ttft.svg)"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "old results") {
		t.Error("report kept the old results below the marker")
	}
	if _, err := os.Stat(filepath.Join(dir, "plots", "outage-weights.svg")); err != nil {
		t.Error(err)
	}
}

func TestSimCommandTrace(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	var b strings.Builder
	for i := range 200 {
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": %d}`+"\n", i*50, 500+i, 100)
	}
	if err := os.WriteFile(trace, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, _, err := runCmd(t, "sim", "--scenario", "diurnal", "--duration", "30s", "--policies", "ilb", "--trace", trace, "--trace-rate", "2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, "scenario diurnal") || !strings.Contains(stdout, "ilb") {
		t.Errorf("output:\n%s", stdout)
	}
}

func TestSimCommandErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown scenario", []string{"--scenario", "nope"}, `unknown scenario "nope"`},
		{"unknown policy", []string{"--policies", "ilb,fastest"}, `--policies: unknown policy "fastest"`},
		{"bad plot format", []string{"--duration", "10s", "--policies", "ilb", "--plots", t.TempDir(), "--plot-format", "gif"}, `format "gif": want png or svg`},
		{"missing trace", []string{"--trace", "/nonexistent/trace.csv"}, "/nonexistent/trace.csv"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runCmd(t, append([]string{"sim"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v; want it to contain %q", err, tt.want)
			}
		})
	}
}
