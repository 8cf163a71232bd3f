//go:build !serving

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ilbproject/ilb/sim/experiment"
	"github.com/ilbproject/ilb/sim/workload"
)

// runSim runs routing experiments in virtual time and compares the
// policies: a table per scenario, optionally JSON, plots and a Markdown
// report; with --loads, a load sweep per scenario.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	scenario := fs.String("scenario", "diurnal", "scenarios, comma-separated: "+strings.Join(experiment.ScenarioNames(), ", ")+"; or all; or the tenants' "+strings.Join(experiment.TenantScenarioNames(), ", "))
	trace := fs.String("trace", "", "replay this trace (Azure CSV or JSONL) at every source instead of the scenario's synthetic workload")
	traceRate := fs.Float64("trace-rate", 0, "with --trace: the replay's total rate as a multiple of the trace's, split evenly over the sources (0: set by --load, 0.5 by default)")
	load := fs.Float64("load", 0, "scale the workload so its mean demand is this fraction of the fleet's measured saturation throughput (0: the scenario's own rates)")
	loads := fs.String("loads", "", "a load sweep: comma-separated loads (e.g. 0.3,0.5,0.7,0.9,1.0,1.1), each run like --load; reports each policy's maximum sustainable load")
	attain := fs.Float64("attain", 0.95, "with --loads: the share of requests within the SLO a load must keep to count as sustained")
	slo := fs.Duration("slo", 0, "time to first token a request must get to count as good (0: the scenario's, 2s)")
	seed := fs.Uint64("seed", 1, "seed of the workload and of every random draw")
	signalsEvery := fs.Duration("signals-interval", 0, "how often ILB's signals scrape the engines (signals.interval; 0: its default, 1s)")
	duration := fs.Duration("duration", time.Hour, "simulated duration; the scenario's daily cycle and events scale with it")
	policies := fs.String("policies", "", "comma-separated policies (default all: round_robin, proportional, waterfall, ilb, least_loaded (an oracle), least_loaded_seen (fed what ILB sees); also ilb-slow, ilb-prior)")
	asJSON := fs.Bool("json", false, "print the results as JSON instead of tables")
	plots := fs.String("plots", "", "write plots (time series per scenario) into this directory")
	format := fs.String("plot-format", "svg", "plot format: svg or png")
	report := fs.String("report", "", "write a Markdown report (tables, ratios, plot links) to this file")
	requests := fs.String("requests", "", "write every request of each run (its decision, the engines' view, its outcome) as CSV into this directory: SCENARIO-POLICY[-LOAD].csv")
	section := fs.String("report-section", "", "the section of the report this run rewrites, keeping the others (default: results, or sweep with --loads)")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	o := simOptions{trace: *trace, traceRate: *traceRate, load: *load, attain: *attain, slo: *slo, signalsEvery: *signalsEvery, seed: *seed, duration: *duration, requests: *requests}
	if err := o.check(*format, *loads); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	names, err := scenarioNames(*scenario)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	pols, err := pickPolicies(*policies)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if *trace != "" {
		if o.rows, err = workload.LoadTrace(*trace); err != nil {
			return fmt.Errorf("sim: %w", err)
		}
	}
	var all [][]*experiment.Result
	var sweeps []experiment.Sweep
	seen := map[string]string{}
	for _, name := range names {
		s, err := experiment.LookupScenario(name, *duration)
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		if o.slo > 0 {
			s.SLO = o.slo
		}
		s.SignalsInterval = o.signalsEvery
		if o.rows != nil {
			// With a trace, a scenario is its fleet and its events: two
			// scenarios alike in both are the same run.
			key := fmt.Sprint(s.Fleet, s.Changes)
			if first, ok := seen[key]; ok {
				fmt.Fprintf(stderr, "sim: scenario %s is the same run as %s with --trace (same fleet, no other events): skipped\n", name, first)
				continue
			}
			seen[key] = name
		}
		if len(o.loads) > 0 {
			sw, err := o.sweep(ctx, stdout, s, pols)
			if err != nil {
				return fmt.Errorf("sim: %w", err)
			}
			sweeps = append(sweeps, sw)
			continue
		}
		results, err := o.runOne(ctx, stdout, s, pols, o.load, !*asJSON)
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		all = append(all, results)
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
		var v any = all
		if len(o.loads) > 0 {
			v = sweeps
		}
		if err := enc.Encode(v); err != nil {
			return err
		}
	} else {
		for _, sw := range sweeps {
			fmt.Fprintf(stdout, "load sweep of %s: share within the SLO · p99 TTFT\n\n", sw.Workload)
			if err := experiment.WriteSweep(stdout, sw); err != nil {
				return err
			}
		}
	}
	if *report != "" {
		sec := *section
		if sec == "" {
			sec = "results"
			if len(o.loads) > 0 {
				sec = "sweep"
			}
		}
		if err := writeReport(*report, sec, *plots, *format, o, all, sweeps); err != nil {
			return fmt.Errorf("sim: %w", err)
		}
	}
	return nil
}

// simOptions are the workload settings of a sim run.
type simOptions struct {
	trace     string
	rows      []workload.Row
	traceRate float64
	load      float64
	loads     []float64
	attain    float64
	slo       time.Duration
	// signalsEvery is signals.interval (0: its default).
	signalsEvery time.Duration
	seed         uint64
	duration     time.Duration
	requests     string // directory of per-request CSVs ("": none)
}

// check reports every bad flag at once, and fills the defaults that
// depend on others.
func (o *simOptions) check(format, loads string) error {
	var errs []error
	if format != "svg" && format != "png" {
		errs = append(errs, fmt.Errorf("--plot-format: format %q: want png or svg", format))
	}
	if loads != "" {
		var bad []error
		o.loads, bad = parseLoads(loads)
		errs = append(errs, bad...)
	}
	if o.load < 0 || o.load > 100 || math.IsNaN(o.load) {
		errs = append(errs, fmt.Errorf("--load %v: want a fraction of the saturation throughput in (0, 100], or 0 for the scenario's rates", o.load))
	}
	if o.load > 0 && loads != "" {
		errs = append(errs, errors.New("--load and --loads: give one"))
	}
	if o.traceRate < 0 || math.IsNaN(o.traceRate) || math.IsInf(o.traceRate, 0) {
		errs = append(errs, fmt.Errorf("--trace-rate %v: want a rate multiple > 0", o.traceRate))
	}
	if o.traceRate > 0 && (o.load > 0 || loads != "") {
		errs = append(errs, errors.New("--trace-rate and --load/--loads: give one (a load sets the rate)"))
	}
	if o.traceRate > 0 && o.trace == "" {
		errs = append(errs, errors.New("--trace-rate needs --trace"))
	}
	if !(o.attain > 0 && o.attain <= 1) {
		errs = append(errs, fmt.Errorf("--attain %v: want a share in (0, 1]", o.attain))
	}
	if o.slo < 0 {
		errs = append(errs, fmt.Errorf("--slo %v: want a duration > 0, or 0 for the scenario's", o.slo))
	}
	if err := checkSignalsInterval(o.signalsEvery); err != nil {
		errs = append(errs, err)
	}
	if o.trace != "" && o.traceRate == 0 && o.load == 0 && loads == "" {
		o.load = 0.5 // a trace's own rate says nothing of this fleet's size
	}
	return errors.Join(errs...)
}

// checkSignalsInterval checks --signals-interval: 0, or what
// signals.interval accepts.
func checkSignalsInterval(d time.Duration) error {
	if d != 0 && d < 10*time.Millisecond {
		return fmt.Errorf("--signals-interval %v: want a duration ≥ 10ms (signals.interval's minimum), or 0 for its default", d)
	}
	return nil
}

// scenarioNames parses --scenario.
func scenarioNames(list string) ([]string, error) {
	if list == "all" {
		return experiment.ScenarioNames(), nil
	}
	var out []string
	for n := range strings.SplitSeq(list, ",") {
		n = strings.TrimSpace(n)
		if !slices.Contains(experiment.ScenarioNames(), n) && !slices.Contains(experiment.TenantScenarioNames(), n) {
			return nil, fmt.Errorf("unknown scenario %q: want one of %v, or all; or %v", n, experiment.ScenarioNames(), experiment.TenantScenarioNames())
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// generator gives the scenario's workload (the trace replay with --trace)
// with every rate multiplied by a factor.
func (o *simOptions) generator(s experiment.Scenario) func(float64) ([]workload.Request, error) {
	if o.rows != nil {
		base := o.traceRate
		if base == 0 {
			base = 1
		}
		return func(f float64) ([]workload.Request, error) { return replayAtEverySource(s, o.rows, base*f, o.seed) }
	}
	return func(f float64) ([]workload.Request, error) {
		sc, err := s.Scaled(f)
		if err != nil {
			return nil, err
		}
		return sc.Workload(o.seed)
	}
}

// runOne runs the policies on s at load (0: its own rates), printing the
// table when show.
func (o *simOptions) runOne(ctx context.Context, stdout io.Writer, s experiment.Scenario, pols []experiment.Policy, load float64, show bool) ([]*experiment.Result, error) {
	var reqs []workload.Request
	note := ""
	gen := o.generator(s)
	switch {
	case load > 0:
		l, err := experiment.AtLoad(s.Fleet, s.Duration, load, gen)
		if err != nil {
			return nil, fmt.Errorf("scenario %s at load %v: %w", s.Name, load, err)
		}
		reqs = l.Requests
		note = fmt.Sprintf("; at load %.2f: mean demand %.0f token-cost/s of the fleet's measured %.0f (rates ×%.3g)", load, l.Demand, l.Saturation, l.Factor)
	case o.rows != nil:
		var err error
		if reqs, err = gen(1); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	results, err := experiment.CompareRecorded(ctx, s, pols, o.seed, reqs, o.requests != "")
	if err != nil {
		return nil, err
	}
	for _, r := range results {
		r.Load = load
		if o.requests != "" {
			if err := writeRecords(o.requests, r, ""); err != nil {
				return nil, err
			}
			r.Records = nil
		}
	}
	if show {
		summary := s.Summary
		if n := o.traceNote(); n != "" {
			summary = n
		}
		fmt.Fprintf(stdout, "scenario %s (%s simulated, seed %d, %d requests, SLO %s, ran in %s): %s%s\n\n", s.Name, s.Duration, o.seed,
			results[0].Totals.Requests, s.SLO, time.Since(start).Round(100*time.Millisecond), summary, note)
		if err := experiment.WriteTable(stdout, results); err != nil {
			return nil, err
		}
		fmt.Fprintln(stdout)
	}
	return results, nil
}

// sweep runs s at every load of the sweep.
func (o *simOptions) sweep(ctx context.Context, stdout io.Writer, s experiment.Scenario, pols []experiment.Policy) (experiment.Sweep, error) {
	label := s.Name
	if o.trace != "" {
		label = filepath.Base(o.trace) + " on the " + s.Name + " fleet"
	}
	sw := experiment.Sweep{Workload: label, Loads: o.loads, Attain: o.attain}
	for _, l := range o.loads {
		rs, err := o.runOne(ctx, stdout, s, pols, l, false)
		if err != nil {
			return sw, err
		}
		sw.Results = append(sw.Results, rs)
	}
	return sw, nil
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
// each at total/N times the trace's rate (N sources: total is the whole
// replay's multiple), each source a 1/N of a pass later than the
// previous, with the standard priority mix.
func replayAtEverySource(s experiment.Scenario, rows []workload.Row, total float64, seed uint64) ([]workload.Request, error) {
	if len(rows) == 0 {
		return nil, errors.New("--trace: the trace is empty")
	}
	scale := total / float64(len(s.Fleet.Sources))
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
func (o *simOptions) traceNote() string {
	if o.trace == "" {
		return ""
	}
	rate := "scaled to the load"
	if o.traceRate > 0 {
		rate = fmt.Sprintf("at ×%g the trace's rate in total", o.traceRate)
	}
	return fmt.Sprintf("the fleet and events of this scenario; its workload replaced by %s replayed at every source (%s)", filepath.Base(o.trace), rate)
}

// parseLoads parses --loads, a comma-separated list of fractions of the
// saturation throughput in (0, 100], sorted and without repeats; every
// entry that is not one is an error.
func parseLoads(list string) ([]float64, []error) {
	var out []float64
	var errs []error
	for f := range strings.SplitSeq(list, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0) || v > 100 {
			errs = append(errs, fmt.Errorf("--loads: %q is not a load: want fractions of the saturation throughput in (0, 100]", f))
			continue
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return slices.Compact(out), errs
}
