//go:build !serving

package main

import (
	"encoding/csv"
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
	trace := writeTrace(t)
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
		{"bad load", []string{"--load", "-1"}, "--load -1: want a fraction of the saturation throughput in (0, 100]"},
		{"bad loads", []string{"--loads", "0.5,lots"}, `--loads: "lots" is not a load`},
		{"load and loads", []string{"--load", "0.5", "--loads", "0.3"}, "--load and --loads: give one"},
		{"trace-rate without trace", []string{"--trace-rate", "2"}, "--trace-rate needs --trace"},
		{"trace-rate and load", []string{"--trace-rate", "2", "--load", "0.5"}, "--trace-rate and --load/--loads: give one"},
		{"bad attain", []string{"--attain", "1.5"}, "--attain 1.5: want a share in (0, 1]"},
		{"bad slo", []string{"--slo", "-1s"}, "--slo -1s: want a duration > 0"},
		{"bad signals interval", []string{"--signals-interval", "1ms"}, "--signals-interval 1ms: want a duration ≥ 10ms"},
		{"every problem at once", []string{"--load", "-1", "--attain", "0"}, "--attain 0"},
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

func TestSimCommandSweep(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "bench.md")
	head := "# Benchmarks\n\n" + reportMarker + "\n"
	if err := os.WriteFile(report, []byte(head), 0o644); err != nil {
		t.Fatal(err)
	}
	// A scenario run fills the results section; a sweep then adds its own
	// and keeps it.
	if _, _, err := runCmd(t, "sim", "--scenario", "drain", "--duration", "1m", "--policies", "waterfall,ilb", "--report", report); err != nil {
		t.Fatal(err)
	}
	stdout, _, err := runCmd(t, "sim", "--scenario", "long-prompt", "--duration", "2m", "--policies", "proportional,waterfall,ilb",
		"--loads", "0.5,0.3", "--slo", "3s", "--signals-interval", "500ms", "--report", report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"load sweep of long-prompt", "| policy | load 0.30 | load 0.50 | max load ≥ 95% good |", "| ilb | ", "ILB max sustainable load"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{"# Benchmarks", sectionMarker + "results -->", "### drain", sectionMarker + "sweep -->", "## Results (1m0s simulated per scenario, seed 1)\n", "### Load sweep: long-prompt (2m0s simulated per load, seed 1, signals.interval 500ms)"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "### drain") > strings.Index(got, "### Load sweep") {
		t.Error("sections out of order")
	}

	var sweeps []experiment.Sweep
	out, _, err := runCmd(t, "sim", "--scenario", "long-prompt", "--duration", "1m", "--policies", "ilb", "--loads", "0.4", "--slo", "3s", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &sweeps); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if len(sweeps) != 1 || len(sweeps[0].Results) != 1 || sweeps[0].Results[0][0].Load != 0.4 || sweeps[0].Results[0][0].SLO != 3 {
		t.Errorf("sweeps %+v; want one load 0.4 at SLO 3s", sweeps)
	}
}

func TestSimCommandTraceSameRuns(t *testing.T) {
	trace := writeTrace(t)
	stdout, stderr, err := runCmd(t, "sim", "--scenario", "diurnal,diurnal-peak,outage", "--duration", "30s", "--policies", "ilb", "--trace", trace, "--load", "0.3")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "scenario diurnal-peak is the same run as diurnal with --trace") {
		t.Errorf("stderr lacks the skip note:\n%s", stderr)
	}
	if !strings.Contains(stdout, "scenario diurnal ") || !strings.Contains(stdout, "scenario outage ") || strings.Contains(stdout, "scenario diurnal-peak") {
		t.Errorf("stdout:\n%s", stdout)
	}
	if !strings.Contains(stdout, "at load 0.30") {
		t.Errorf("stdout does not say the load:\n%s", stdout)
	}
}

// writeTrace writes a JSONL trace of 200 requests, one every 50 ms.
func writeTrace(t *testing.T) string {
	t.Helper()
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	var b strings.Builder
	for i := range 200 {
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": %d}`+"\n", i*50, 500+i, 100)
	}
	if err := os.WriteFile(trace, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return trace
}

// TestSimCommandRequests: --requests writes every request of each run,
// and its rows agree with the run's figures.
func TestSimCommandRequests(t *testing.T) {
	dir := t.TempDir()
	stdout, _, err := runCmd(t, "sim", "--scenario", "outage", "--duration", "1m", "--policies", "waterfall,ilb", "--json", "--requests", dir)
	if err != nil {
		t.Fatal(err)
	}
	var all [][]*experiment.Result
	if err := json.Unmarshal([]byte(stdout), &all); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout)
	}
	for _, res := range all[0] {
		f, err := os.Open(filepath.Join(dir, "outage-"+res.Policy+".csv"))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(f).ReadAll()
		_ = f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != res.Totals.Requests+1 || rows[0][0] != "at_s" {
			t.Fatalf("%s: %d rows with header %q; want %d requests and a header", res.Policy, len(rows)-1, rows[0], res.Totals.Requests)
		}
		col := map[string]int{}
		for i, name := range rows[0] {
			col[name] = i
		}
		good, steered := 0, 0
		for _, r := range rows[1:] {
			if r[col["good"]] == "true" {
				good++
				if r[col["outcome"]] != "routed" || r[col["cluster"]] == "" {
					t.Fatalf("%s: a good request not routed: %q", res.Policy, r)
				}
			}
			if r[col["steered"]] == "true" {
				steered++
			}
		}
		if good != res.Totals.Good {
			t.Errorf("%s: %d good rows; the run counted %d", res.Policy, good, res.Totals.Good)
		}
		if res.Policy == "waterfall" && steered > 0 {
			t.Errorf("waterfall: %d steered rows; it has no fast loop", steered)
		}
	}
}

// TestWriteSectionIsStable: rewriting a report's sections keeps the
// hand-written head and the other sections byte for byte, however often
// (blank lines once grew by one per section and rewrite).
func TestWriteSectionIsStable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.md")
	if err := os.WriteFile(path, []byte("# Head\n\nhand-written\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct{ name, body string }{{"a", "## A\n\nfirst\n\n\n"}, {"b", "\n## B\n"}} {
		if err := writeSection(path, s.name, s.body); err != nil {
			t.Fatal(err)
		}
	}
	first, _ := os.ReadFile(path)
	for range 3 { // the other sections are kept as read
		if err := writeSection(path, "b", "\n## B\n"); err != nil {
			t.Fatal(err)
		}
	}
	again, _ := os.ReadFile(path)
	if string(again) != string(first) {
		t.Fatalf("the report changed on rewriting the same sections:\n%q\nthen\n%q", first, again)
	}
	for _, want := range []string{"# Head\n\nhand-written\n", "## A\n\nfirst\n", "## B\n"} {
		if !strings.Contains(string(again), want) {
			t.Errorf("the report lost %q:\n%s", want, again)
		}
	}
}
