//go:build !serving

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/sim/xdsload"
)

// runBenchXDS is the xDS fleet benchmark: ILB's xDS server in a child
// process (this binary, --serve), N simulated Envoys in this one, each on
// its own connection and ADS stream, ACKing as Envoy does.
func runBenchXDS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench-xds", flag.ContinueOnError)
	cfgPath := fs.String("config", "examples/demo/ilb.yaml", "ILB configuration whose sources and clusters the xDS server serves")
	streams := fs.String("streams", "100,1000,10000", "Envoy counts to measure, comma-separated")
	modes := fs.String("modes", "sotw,delta", "ADS variants to measure: sotw, delta, or both, comma-separated")
	changes := fs.Int("changes", 5, "weights versions and EDS changes timed per run")
	waves := fs.Int("waves", 0, "instead: this many waves of --streams (the first count) Envoys with new node ids, one after another; reports what ILB keeps after each")
	timeout := fs.Duration("timeout", 2*time.Minute, "bound on each wait")
	serve := fs.Bool("serve", false, "internal: run the server role on stdin/stdout")
	profile := fs.String("cpuprofile", "", "write the xDS server's CPU profile (its whole life) to this file")
	heap := fs.String("heapprofile", "", "write the xDS server's heap profile, once every Envoy has its configuration, to this file")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return fmt.Errorf("bench-xds: %w", err)
	}
	if *serve {
		if *profile != "" {
			f, err := os.Create(*profile)
			if err != nil {
				return fmt.Errorf("bench-xds: %w", err)
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return fmt.Errorf("bench-xds: %w", err)
			}
			defer pprof.StopCPUProfile()
		}
		return xdsload.Serve(ctx, cfg, os.Stdin, stdout, stderr)
	}
	counts, err := xdsload.ParseCounts(*streams)
	var problems []error
	if err != nil {
		problems = append(problems, fmt.Errorf("--streams: %w", err))
	}
	var ms []xdsload.Mode
	for m := range strings.SplitSeq(*modes, ",") {
		mode, err := xdsload.ParseMode(strings.TrimSpace(m))
		if err != nil {
			problems = append(problems, fmt.Errorf("--modes: %w", err))
			continue
		}
		ms = append(ms, mode)
	}
	if *changes < 1 {
		problems = append(problems, fmt.Errorf("--changes %d: want at least 1", *changes))
	}
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("bench-xds: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench-xds: %w", err)
	}
	spawn := func() *exec.Cmd {
		args := []string{"bench-xds", "--serve", "--config", *cfgPath}
		if *profile != "" {
			args = append(args, "--cpuprofile", *profile)
		}
		c := exec.CommandContext(ctx, exe, args...)
		c.Env = append(os.Environ(), "GOMAXPROCS=1")
		return c
	}
	var sources []string
	for _, s := range cfg.Sources {
		sources = append(sources, s.Name)
	}
	o := xdsload.RunOptions{Sources: sources, Changes: *changes, Timeout: *timeout, HeapProfile: *heap}
	if *waves > 0 {
		o.Streams, o.Mode = counts[0], ms[0]
		fmt.Fprintf(stdout, "%d waves of %d Envoys (%s) with new node ids; after each wave left:\n\n", *waves, o.Streams, o.Mode)
		fmt.Fprintln(stdout, "| wave | nodes known | connected | heap in use | RSS |")
		fmt.Fprintln(stdout, "|---:|---:|---:|---:|---:|")
		return xdsload.RunWaves(ctx, spawn, o, *waves, func(w xdsload.Wave) {
			fmt.Fprintf(stdout, "| %d | %d | %d | %.1f MiB | %.1f MiB |\n", w.Wave, w.Nodes, w.Connected, mib(w.HeapInuse), mib(w.RSS))
		})
	}
	fmt.Fprintf(stdout, "ILB's xDS server on one core (GOMAXPROCS=1, its own process), %d sources, %d clusters; Envoys in another process, one connection each; EDS changes pushed at once (eds_min_interval 0).\n\n", len(cfg.Sources), len(cfg.Clusters))
	fmt.Fprintln(stdout, "| mode | Envoys | full config at connect | ILB CPU at connect | weights version: last ACK (median / max) | ILB CPU per version | EDS change: last ACK (median / max) | ILB CPU per EDS change | heap per Envoy | RSS per Envoy | warnings |")
	fmt.Fprintln(stdout, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, mode := range ms {
		for _, n := range counts {
			o.Streams, o.Mode = n, mode
			r, err := xdsload.Run(ctx, spawn, o)
			if err != nil {
				return fmt.Errorf("bench-xds: %s, %d Envoys: %w", mode, n, err)
			}
			fmt.Fprintf(stdout, "| %s | %d | %s | %s | %s / %s | %s | %s / %s | %s | %.1f KiB | %.1f KiB | %d |\n",
				r.Mode, r.Streams, ms3(r.Connect), ms3(r.CPUConnect),
				ms3(median(r.Publish)), ms3(slices.Max(r.Publish)), ms3(r.CPUPublish),
				ms3(median(r.EDS)), ms3(slices.Max(r.EDS)), ms3(r.CPUEDS),
				r.HeapPerEnvoy/1024, r.RSSPerEnvoy/1024, r.Warnings)
			if r.Warnings > 0 {
				fmt.Fprintf(stderr, "bench-xds: %s, %d Envoys: ILB logged %d warnings; the last: %s\n", mode, n, r.Warnings, r.LastWarn)
			}
		}
	}
	return nil
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms3(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	default:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
