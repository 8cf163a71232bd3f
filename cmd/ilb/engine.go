//go:build !serving

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/ilbproject/ilb/sim/engine"
	"github.com/ilbproject/ilb/sim/fleet"
	"github.com/ilbproject/ilb/sim/replica"
)

// runEngine serves one simulated engine replica (OpenAI API, vLLM-style
// /metrics and /health): the engines of examples/compose and of any
// setup that wants an inference engine without GPUs.
func runEngine(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("engine", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8000", "address to serve on, host:port")
	cluster := fs.String("cluster", "", "engine cluster this replica belongs to (metrics label, response header)")
	name := fs.String("name", "", "replica name (default CLUSTER/LISTEN)")
	models := fs.String("models", "", "served model names, comma-separated (canonical names and aliases)")
	profile := fs.String("profile", fleet.DefaultProfile, "timing model: a replica profile ("+profileNames()+"), or \"fixed\" for fixed timing")
	slots := fs.Int("max-running", engine.DefaultMaxRunning, "with --profile fixed: requests generating at once; more wait in a FIFO queue")
	itl := fs.Duration("inter-token-latency", engine.DefaultInterTokenLatency, "with --profile fixed: time between two tokens of one request")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	kind := fs.String("kind", "vllm", "engine kind whose metric names to export: "+strings.Join(engine.Kinds(), ", "))
	adapterList := fs.String("adapters", "", "LoRA adapters served on the first model, comma-separated (vLLM --lora-modules)")
	maxLoras := fs.Int("max-loras", fleet.DefaultLoRA.MaxLoras, "with --adapters and a replica profile: adapters one batch may use (vLLM --max-loras)")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	var problems []error
	if *cluster == "" {
		problems = append(problems, errors.New("--cluster is required"))
	}
	var served []string
	for m := range strings.SplitSeq(*models, ",") {
		if m = strings.TrimSpace(m); m != "" {
			served = append(served, m)
		}
	}
	if len(served) == 0 {
		problems = append(problems, fmt.Errorf("--models %q: want at least one model name", *models))
	}
	var adapters []string
	for a := range strings.SplitSeq(*adapterList, ",") {
		if a = strings.TrimSpace(a); a != "" {
			adapters = append(adapters, a)
		}
	}
	if *maxLoras < 1 {
		problems = append(problems, fmt.Errorf("--max-loras %d: want at least 1", *maxLoras))
	}
	if *slots < 1 {
		problems = append(problems, fmt.Errorf("--max-running %d: want at least 1", *slots))
	}
	if *itl < 0 {
		problems = append(problems, fmt.Errorf("--inter-token-latency %s: want a duration >= 0", *itl))
	}
	p, known := replica.LookupProfile(*profile)
	if !known && *profile != "fixed" {
		problems = append(problems, fmt.Errorf("--profile %q: want one of %s, or fixed", *profile, profileNames()))
	}
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	if *name == "" {
		*name = *cluster + "/" + *listen
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return err
	}
	var backend engine.Backend
	if known {
		var lora replica.LoRA
		if len(adapters) > 0 {
			lora = fleet.DefaultLoRA
			lora.MaxLoras, lora.MaxCPULoras = *maxLoras, max(*maxLoras, lora.MaxCPULoras)
		}
		b, err := replica.NewBackend(replica.Options{Profile: p, Name: *name, LoRA: lora}, replica.RealClock())
		if err != nil {
			return fmt.Errorf("engine: %w", err)
		}
		defer b.Close()
		backend = b
	} else {
		timing := engine.DefaultFixedTiming()
		timing.MaxRunning, timing.InterTokenLatency = *slots, *itl
		backend = engine.NewFixedBackend(timing)
	}
	srv, err := engine.New(engine.Options{
		Kind: *kind,
		Name: *name, Cluster: *cluster, Models: served, Adapters: adapters,
		Backend: backend, Logger: log,
	})
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", *listen)
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	fmt.Fprintf(stdout, "engine %s (cluster %s, timing %s) serving %s on http://%s\n", *name, *cluster, *profile, strings.Join(served, ", "), ln.Addr())
	return srv.Serve(ctx, ln)
}

// profileNames lists the replica profiles, comma-separated.
func profileNames() string {
	var names []string
	for _, p := range replica.Profiles() {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}
