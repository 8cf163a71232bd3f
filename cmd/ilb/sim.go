package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ilbproject/ilb/sim/experiment"
	"github.com/ilbproject/ilb/sim/workload"
)

// runSim runs routing experiments in virtual time and compares the
// policies: a table per scenario, optionally JSON, plots and a Markdown
// report.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	scenario := fs.String("scenario", "diurnal", "scenario: "+strings.Join(experiment.ScenarioNames(), ", ")+", or all")
	trace := fs.String("trace", "", "replay this trace (Azure CSV or JSONL) at every source instead of the scenario's synthetic workload")
	traceScale := fs.Float64("trace-rate", 10, "with --trace: the rate multiplier of the replay at each source")
	seed := fs.Uint64("seed", 1, "seed of the workload and of every random draw")
	duration := fs.Duration("duration", time.Hour, "simulated duration; the scenario's daily cycle and events scale with it")
	policies := fs.String("policies", "", "comma-separated policies (default all: round_robin, proportional, waterfall, ilb, least_loaded; also ilb-slow)")
	asJSON := fs.Bool("json", false, "print the results as JSON instead of tables")
	plots := fs.String("plots", "", "write plots (time series per scenario) into this directory")
	format := fs.String("plot-format", "svg", "plot format: svg or png")
	report := fs.String("report", "", "write a Markdown report (tables, ratios, plot links) to this file")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *format != "svg" && *format != "png" {
		return fmt.Errorf("sim: --plot-format: format %q: want png or svg", *format)
	}
	names := []string{*scenario}
	if *scenario == "all" {
		names = experiment.ScenarioNames()
	}
	pols, err := pickPolicies(*policies)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	var rows []workload.Row
	if *trace != "" {
		if rows, err = workload.LoadTrace(*trace); err != nil {
			return fmt.Errorf("sim: %w", err)
		}
	}
	var all [][]*experiment.Result
	for _, name := range names {
		s, err := experiment.LookupScenario(name, *duration)
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		var reqs []workload.Request
		if rows != nil {
			if reqs, err = replayAtEverySource(s, rows, *traceScale, *seed); err != nil {
				return fmt.Errorf("sim: %w", err)
			}
		}
		start := time.Now()
		results, err := experiment.Compare(ctx, s, pols, *seed, reqs)
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		all = append(all, results)
		if !*asJSON {
			summary := s.Summary
			if note := traceNote(*trace, *traceScale); note != "" {
				summary = note
			}
			fmt.Fprintf(stdout, "scenario %s (%s simulated, seed %d, %d requests, ran in %s): %s\n\n", s.Name, s.Duration, *seed,
				results[0].Totals.Requests, time.Since(start).Round(100*time.Millisecond), summary)
			if err := experiment.WriteTable(stdout, results); err != nil {
				return err
			}
			fmt.Fprintln(stdout)
		}
		if *plots != "" {
			paths, err := experiment.Plot(*plots, *format, results)
			if err != nil {
				return fmt.Errorf("sim: %w", err)
			}
			if !*asJSON {
				fmt.Fprintf(stdout, "plots: %s\n\n", strings.Join(paths, ", "))
			}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(all); err != nil {
			return err
		}
	}
	if *report != "" {
		if err := writeReport(*report, *plots, *format, *duration, *seed, traceNote(*trace, *traceScale), all); err != nil {
			return fmt.Errorf("sim: %w", err)
		}
	}
	return nil
}

func pickPolicies(list string) ([]experiment.Policy, error) {
	if list == "" {
		return experiment.Policies(), nil
	}
	var out []experiment.Policy
	var errs []error
	for name := range strings.SplitSeq(list, ",") {
		p, ok := experiment.LookupPolicy(strings.TrimSpace(name))
		if !ok {
			errs = append(errs, fmt.Errorf("--policies: unknown policy %q", name))
			continue
		}
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

// replayAtEverySource replays the trace at each source of the scenario,
// rate-scaled, each source a third of a pass later than the previous,
// with the standard priority mix.
func replayAtEverySource(s experiment.Scenario, rows []workload.Row, scale float64, seed uint64) ([]workload.Request, error) {
	if len(rows) == 0 {
		return nil, errors.New("--trace: the trace is empty")
	}
	span := rows[len(rows)-1].At
	var streams [][]workload.Request
	for i, src := range s.Fleet.Sources {
		rp := workload.Replay{
			Rows: rows, Source: src.Name, Model: s.Fleet.Models[0], RateScale: scale,
			// The replay compresses time by scale, so one pass of the trace
			// lasts span/scale: shift by a third of that per source.
			Shift:      time.Duration(float64(i) * float64(span) / (float64(len(s.Fleet.Sources)) * scale)),
			Priorities: []workload.Share{{Name: "critical", Weight: 0.2}, {Name: "standard", Weight: 0.5}, {Name: "sheddable", Weight: 0.3}},
			Seed:       seed + uint64(i),
		}
		reqs, err := rp.Requests(s.Duration)
		if err != nil {
			return nil, fmt.Errorf("--trace at %s: %w", src.Name, err)
		}
		streams = append(streams, reqs)
	}
	return workload.Merge(streams...), nil
}

// traceNote describes a trace replay that replaces the scenarios'
// workloads; "" without a trace.
func traceNote(trace string, scale float64) string {
	if trace == "" {
		return ""
	}
	return fmt.Sprintf("the fleet and events of this scenario; its workload replaced by %s replayed at ×%g at every source", trace, scale)
}

// reportMarker separates the hand-written part of a report file, kept when
// the file is regenerated, from the generated results.
const reportMarker = "<!-- ilb sim: generated results below; edit above this line -->"

// writeReport writes the Markdown report of every scenario into path,
// keeping what the file holds up to reportMarker.
func writeReport(path, plots, format string, d time.Duration, seed uint64, note string, all [][]*experiment.Result) error {
	var head string
	switch old, err := os.ReadFile(path); {
	case err == nil:
		if i := strings.Index(string(old), reportMarker); i >= 0 {
			head = string(old[:i])
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	var b strings.Builder
	b.WriteString(head)
	b.WriteString(reportMarker + "\n\n")
	fmt.Fprintf(&b, "## Results (%s simulated per scenario, seed %d)\n\n", d, seed)
	b.WriteString("ILB's ratios to each baseline (goodput: higher is better; p99 TTFT: lower is better):\n\n")
	if err := experiment.WriteSummary(&b, all); err != nil {
		return err
	}
	for _, results := range all {
		name := results[0].Scenario
		s, err := experiment.LookupScenario(name, d)
		if err != nil {
			return err
		}
		summary := s.Summary
		if note != "" {
			summary = note
		}
		fmt.Fprintf(&b, "### %s\n\n%s. %d requests; SLO: time to first token within %s.\n\n", name, summary, results[0].Totals.Requests, s.SLO)
		if err := experiment.WriteMarkdown(&b, results); err != nil {
			return err
		}
		if plots != "" {
			rel, err := filepath.Rel(filepath.Dir(path), plots)
			if err != nil {
				rel = plots
			}
			for _, kind := range []string{"ttft", "utilization", "weights"} {
				fmt.Fprintf(&b, "![%s %s](%s)\n\n", name, kind, filepath.ToSlash(filepath.Join(rel, fmt.Sprintf("%s-%s.%s", name, kind, format))))
			}
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
