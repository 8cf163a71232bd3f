//go:build !serving

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/sim/loadgen"
	"github.com/ilbproject/ilb/sim/stack"
)

// demoOptions are the flags of `ilb demo`.
type demoOptions struct {
	config      string
	duration    time.Duration
	concurrency int
	seed        uint64
	envoyMode   string
	keepRunning bool
	logLevel    string
}

// runDemo runs the whole stack on loopback: one simulated engine per
// endpoint of the config, ILB, one Envoy per source (envoysim, or a real
// envoy binary), a short load from every source; then it reports.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o demoOptions
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.StringVar(&o.config, "config", "examples/demo/ilb.yaml", "ILB configuration of the demo world")
	fs.DurationVar(&o.duration, "duration", 8*time.Second, "how long to drive load")
	fs.IntVar(&o.concurrency, "concurrency", 8, "concurrent clients per source")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the request mix")
	fs.StringVar(&o.envoyMode, "envoy", "auto", `"sim" (envoysim), a path to an envoy binary, or "auto" (envoy on PATH, else sim)`)
	fs.BoolVar(&o.keepRunning, "keep-running", false, "after the report, keep everything up until interrupted")
	fs.StringVar(&o.logLevel, "log-level", "warn", "log level of the components")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if o.duration <= 0 || o.concurrency <= 0 {
		return errors.New("demo: --duration and --concurrency must be positive")
	}
	log, err := newLogger(stderr, o.logLevel)
	if err != nil {
		return err
	}
	c, err := config.Load(o.config)
	if err != nil {
		return err
	}
	envoyBin, err := envoyBinary(o.envoyMode)
	if err != nil {
		return err
	}

	st, err := stack.Start(ctx, c, stack.Options{EnvoyBin: envoyBin, Seed: o.seed, Logger: log})
	if err != nil {
		return err
	}
	d := &demo{Stack: st, envoyBin: envoyBin}
	d.printBanner(stdout)

	fmt.Fprintf(stdout, "\nDriving chat requests for %s (%d clients per source; 30%% with a session key, 30%% streamed)...\n", o.duration, o.concurrency)
	start := time.Now()
	results, err := loadgen.Run(ctx, loadgen.Options{
		Targets: d.targets(), Models: modelNames(st.Config), Duration: o.duration, Concurrency: o.concurrency,
		SessionShare: 0.3, StreamShare: 0.3, Sessions: 24, SessionContext: 4096, MaxTokens: 8, Seed: o.seed,
	})
	if err != nil {
		return errors.Join(err, st.Stop())
	}
	rep := d.report(ctx, stdout, results, time.Since(start))

	if o.keepRunning && ctx.Err() == nil {
		fmt.Fprintf(stdout, "\nEverything keeps running (Ctrl-C to stop). Try:\n  curl -si %s/v1/chat/completions -d '{\"model\":\"llama3-8b\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'\n  go run ./cmd/ilb explain --admin %s <x-request-id>\n",
			st.Envoys[0].URL, st.App.AdminAddr())
		<-ctx.Done()
	}
	if err := st.Stop(); err != nil && !errors.Is(err, context.Canceled) {
		return errors.Join(rep, fmt.Errorf("demo: shutdown: %w", err))
	}
	return rep
}

// demo is a running stack with the demo's reporting.
type demo struct {
	*stack.Stack
	envoyBin string
}

func (d *demo) targets() []loadgen.Target {
	var ts []loadgen.Target
	for _, e := range d.Envoys {
		ts = append(ts, loadgen.Target{Source: e.Source, URL: e.URL})
	}
	return ts
}

// envoyBinary resolves --envoy: "" means envoysim.
func envoyBinary(mode string) (string, error) {
	switch mode {
	case "sim":
		return "", nil
	case "auto":
		if p, err := exec.LookPath("envoy"); err == nil {
			return p, nil
		}
		return "", nil // no envoy on PATH: envoysim
	}
	p, err := exec.LookPath(mode)
	if err != nil {
		return "", fmt.Errorf("demo: --envoy %q: %w", mode, err)
	}
	return p, nil
}

func (d *demo) printBanner(w io.Writer) {
	c := d.Config
	fmt.Fprintf(w, "ILB demo: %d regions, %d sources, %d models, %d engine clusters\n", len(c.Regions), len(c.Sources), len(c.Models), len(c.Clusters))
	for _, e := range c.Clusters {
		fmt.Fprintf(w, "  engine cluster %-15s %-8s %-7s %v\n", e.Name, e.Region, e.Engine, e.Endpoints)
	}
	fmt.Fprintln(w, "  (every server listens on an ephemeral loopback port, whatever the config's listen addresses say, so the demo runs beside anything else)")
	fmt.Fprintf(w, "  ILB: xDS %s, ext_proc %s, admin http://%s (weights %s, policy %s)\n",
		d.App.XDSAddr(), d.App.ExtProcAddr(), d.App.AdminAddr(), d.App.Controller.Current().Version(), c.Controller.Policy)
	kind := "envoysim (the in-repo Envoy model)"
	if d.envoyBin != "" {
		kind = d.envoyBin
	}
	for _, e := range d.Envoys {
		fmt.Fprintf(w, "  source %-8s Envoy %s at %s\n", e.Source, kind, e.URL)
	}
}
