//go:build !serving

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/sim/experiment"
)

// runBenchReplicas compares the replica-level policies (Envoy's least
// request and round robin, a session hash, a GIE-style prefix scorer and
// ILB's replica picker) on the replica-picking workloads at several
// loads, averaged over seeds, and prints (or writes into a report
// section) one table per workload.
func runBenchReplicas(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench-replicas", flag.ContinueOnError)
	scen := fs.String("scenario", "all", "replica workloads, comma-separated, or all: "+strings.Join(experiment.ReplicaScenarioNames(), ", ")+" (and, not in all: "+strings.Join(experiment.LoRAScenarioNames(), ", ")+")")
	loadList := fs.String("loads", "0.5,0.7,0.9,1.1,1.3", "loads: fractions of the fleet's saturation throughput measured without prefix caching")
	seedList := fs.String("seeds", "1,2,3", "seeds: each load runs once per seed, figures are means")
	duration := fs.Duration("duration", 10*time.Minute, "simulated time per run")
	report := fs.String("report", "", "write the tables into this Markdown file's section (--section; e.g. docs/benchmarks.md) instead of stdout")
	section := fs.String("section", "replicas", "the report's section to rewrite")
	signalsEvery := fs.Duration("signals-interval", 0, "how often ILB's signals scrape the engines (signals.interval; 0: its default, 1s)")
	requests := fs.String("requests", "", "write every request of each run (its cluster decision, replica, adapter tier, outcome) as CSV into this directory: SCENARIO-POLICY-LOAD-seedN.csv")
	def := experiment.DefaultLoRASetup()
	maxLoras := fs.Int("max-loras", def.MaxLoras, "lora workload: every engine's adapter slots (vLLM's --max-loras)")
	cpuLoras := fs.Int("max-cpu-loras", 0, "lora workload: the adapters every engine keeps in CPU memory (vLLM's --max-cpu-loras; ILB's picker is told it); 0: twice --max-loras")
	zipf := fs.Float64("zipf", def.Zipf, "lora workload: the exponent s of the adapters' Zipf popularity")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	lora := experiment.LoRASetup{MaxLoras: *maxLoras, MaxCPULoras: *cpuLoras, Zipf: *zipf}
	if lora.MaxCPULoras == 0 {
		lora.MaxCPULoras = 2 * lora.MaxLoras
	}
	loads, errs := parseLoads(*loadList)
	var seeds []uint64
	for f := range strings.SplitSeq(*seedList, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("--seeds: %q is not a seed: want unsigned integers", f))
			continue
		}
		seeds = append(seeds, v)
	}
	names := experiment.ReplicaScenarioNames()
	if *scen != "all" {
		names = strings.Split(*scen, ",")
	}
	if *duration <= 0 {
		errs = append(errs, fmt.Errorf("--duration %s: want a positive duration", *duration))
	}
	hasLoRA := slices.ContainsFunc(names, func(n string) bool { return slices.Contains(experiment.LoRAScenarioNames(), strings.TrimSpace(n)) })
	var loraFlags []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "max-loras" || f.Name == "max-cpu-loras" || f.Name == "zipf" {
			loraFlags = append(loraFlags, fmt.Sprintf("--%s %s", f.Name, f.Value))
		}
	})
	if len(loraFlags) > 0 && !hasLoRA {
		errs = append(errs, fmt.Errorf("%s: only the lora workload has adapters: add --scenario lora", strings.Join(loraFlags, " ")))
	}
	if err := checkSignalsInterval(*signalsEvery); err != nil {
		errs = append(errs, err)
	}
	if err := lora.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--max-loras, --max-cpu-loras, --zipf: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	scrape := config.DefaultSignals().Interval.Std().String()
	if *signalsEvery > 0 {
		scrape = signalsEvery.String()
	}
	var b strings.Builder
	title := "Replica picking"
	if *section != "replicas" {
		title = "Replica picking: " + *section
	}
	fmt.Fprintf(&b, "## %s (%s simulated per run, seeds %s)\n\n", title, *duration, *seedList)
	b.WriteString("One region, two clusters of 6 H100 replicas (Llama-3-8B, vLLM-like, prefix caching on); ILB routes the clusters in every run, only the replica choice differs. " +
		"ILB's picker (package picker) sees what ext_proc sees: a request's end at its first token (ext_proc's stream ends there: an event stream's first event, or a JSON response's headers), the engines' queues, saturation and running requests through the " + scrape + " scrape. " +
		"The GIE-style scorer reads the engines' queues and KV usage live (its 50 ms scrape). " +
		"Load is the mean demand over the fleet's saturation throughput measured without prefix caching. " +
		"Figures are means over the seeds. Two SLOs, MLPerf Inference's for Llama-3.1-8B applied to each request: goodput and *within SLO* count requests whose time to first token is within 2 s (its server scenario); " +
		"*interactive* counts those within 500 ms to the first token and 30 ms per output token after it (its interactive scenario). TPOT p99 is the 99th percentile of requests' time per output token. Hit is the share of prompt tokens the engines' prefix caches held; " +
		"imbalance is the busiest replica's requests over its cluster's mean. Ratios are to Envoy's least request.\n\n")
	if hasLoRA {
		b.WriteString("With LoRA adapters, the GIE-style scorer adds GIE's lora-affinity-scorer (weight 1 beside queue 2, KV 2 and prefix 3: 1 when the adapter runs on the replica, 0.8 when it has a free adapter slot, 0.6 when the adapter only waits there, else 0), reading the engines' `vllm:lora_requests_info` live; ILB's picker reads it through the " + scrape + " scrape. " +
			"*Adapter load* is, per completed request of an adapter, the mean time its engine spent loading adapters (from disk, or into a GPU slot) in the steps that scheduled it; *slot wait* the mean time it waited for an adapter slot (vLLM's `max_loras`); *past a replica with it* the share of adapter requests sent to a replica whose engine did not hold the adapter in a GPU slot while another replica of the cluster did and was not saturated (read live at the decision).\n\n")
	}
	start := time.Now()
	for _, name := range names {
		s, err := experiment.LookupReplicaScenario(strings.TrimSpace(name), *duration)
		if strings.TrimSpace(name) == "lora" {
			s, err = experiment.LookupLoRAScenario(*duration, lora)
		}
		if err != nil {
			return err
		}
		s.SignalsInterval = *signalsEvery
		var rows []experiment.HostRow
		for _, seed := range seeds {
			rs, err := experiment.CompareHostsRecorded(ctx, s, loads, experiment.HostPolicies(), seed, *requests != "")
			if err != nil {
				return err
			}
			for _, r := range rs {
				if *requests == "" {
					break
				}
				if err := writeRecords(*requests, r.Result, "-seed"+strconv.FormatUint(seed, 10)); err != nil {
					return err
				}
				r.Result.Records = nil // written: the tables need only the figures
			}
			rows = append(rows, rs...)
		}
		fmt.Fprintf(&b, "### %s\n\n%s.\n\n", s.Name, s.Summary)
		writeHostTable(&b, loads, rows)
	}
	target := "bench-replicas"
	if *section != "replicas" {
		target = "bench-" + *section
	}
	repro := "make " + target
	if *signalsEvery > 0 {
		loraFlags = append(loraFlags, "--signals-interval "+signalsEvery.String())
	}
	if len(loraFlags) > 0 {
		repro = fmt.Sprintf("go run ./cmd/ilb bench-replicas --scenario %s --loads %s --seeds %s --duration %s %s", *scen, *loadList, *seedList, *duration, strings.Join(loraFlags, " "))
	}
	fmt.Fprintf(&b, "Reproduce: `%s` (%s here). The request-path cost of a decision: `go test ./picker -run '^$' -bench Decision`.\n", repro, time.Since(start).Round(time.Second))
	if *report == "" {
		_, err := io.WriteString(stdout, b.String())
		return err
	}
	return writeSection(*report, *section, b.String())
}

// hostMean is one policy's figures at one load, summed over seeds.
type hostMean struct {
	n                                                      int
	goodput, share, strict, p50, p99, tpot, hit, imbalance float64
	adapterReqs, adapterMisses                             int
	adapterCost, adapterWait                               float64
}

// writeHostTable writes one row per load and policy: the means over
// seeds and ILB's ratios to least request.
func writeHostTable(b *strings.Builder, loads []float64, rows []experiment.HostRow) {
	type key struct {
		load float64
		hp   experiment.HostPolicy
	}
	sum := map[key]*hostMean{}
	for _, r := range rows {
		k := key{r.Load, r.Hosts}
		m := sum[k]
		if m == nil {
			m = &hostMean{}
			sum[k] = m
		}
		f := r.Result.Totals
		m.n++
		m.goodput += f.Goodput
		m.share += f.GoodShare
		m.strict += f.StrictShare
		m.tpot += f.TPOTp99
		m.p50 += f.TTFTp50
		m.p99 += f.TTFTp99
		m.hit += r.Result.Replicas.PrefixHit
		m.imbalance += r.Result.Replicas.Imbalance
		m.adapterReqs += r.Result.Replicas.AdapterRequests
		m.adapterMisses += r.Result.Replicas.AdapterMisses
		m.adapterCost += r.Result.Replicas.AdapterCost
		m.adapterWait += r.Result.Replicas.AdapterWait
	}
	lora := false
	for _, m := range sum {
		lora = lora || m.adapterReqs > 0
	}
	head := "| load | policy | goodput/s | within SLO | interactive | TTFT p50 | TTFT p99 | TPOT p99 | prefix hit | imbalance | goodput ÷ LR | interactive ÷ LR | p50 ÷ LR |"
	rule := "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
	if lora {
		head += " adapter load | slot wait | past a replica with it |"
		rule += "---|---|---|"
	}
	b.WriteString(head + "\n" + rule + "\n")
	for _, l := range loads {
		lr := sum[key{l, experiment.HostLeastRequest}]
		for _, hp := range experiment.HostPolicies() {
			m := sum[key{l, hp}]
			if m == nil || lr == nil {
				continue
			}
			n := float64(m.n)
			name := string(hp)
			if hp == experiment.HostILB {
				name = "**ilb**"
			}
			strictRatio := "–"
			if lr.strict > 0 {
				strictRatio = fmt.Sprintf("%.2f", (m.strict/n)/(lr.strict/float64(lr.n)))
			}
			fmt.Fprintf(b, "| %g | %s | %.2f | %.1f%% | %.1f%% | %.3f s | %.3f s | %.1f ms | %.1f%% | %.2f | %.2f | %s | %.2f |", l, name,
				m.goodput/n, 100*m.share/n, 100*m.strict/n, m.p50/n, m.p99/n, 1000*m.tpot/n, 100*m.hit/n, m.imbalance/n, m.goodput/lr.goodput, strictRatio, (m.p50/n)/(lr.p50/float64(lr.n)))
			if lora {
				fmt.Fprintf(b, " %.1f ms | %.1f ms | %.2f%% |", 1000*m.adapterCost/n, 1000*m.adapterWait/n, 100*float64(m.adapterMisses)/float64(max(m.adapterReqs, 1)))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n")
}
