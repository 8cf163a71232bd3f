package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/weights"
)

// runSolve computes one tick offline from a demand file.
func runSolve(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("solve", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "ILB configuration file (YAML)")
	demandPath := fs.String("demand", "", "demand file (YAML; see docs/controller.md)")
	prevPath := fs.String("previous", "", "previous weights (JSON, as `ilb solve --json` or /debug/weights write them)")
	policy := fs.String("policy", "", "policy (default: the configuration's controller.policy)")
	asJSON := fs.Bool("json", false, "print the weights with their explanations as JSON")
	source := fs.String("source", "", "print only this source")
	model := fs.String("model", "", "print only this model")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *cfgPath == "" || *demandPath == "" {
		return errors.New("solve: --config and --demand are required")
	}
	c, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(*demandPath)
	if err != nil {
		return fmt.Errorf("solve: %w", err)
	}
	demand, states, err := controller.ParseDemandFile(c, data)
	if err != nil {
		return fmt.Errorf("solve: %s: %w", *demandPath, err)
	}
	in := weights.Input{Config: c, Clusters: states, Demand: demand, Now: time.Now()}
	if *prevPath != "" {
		b, err := os.ReadFile(*prevPath)
		if err != nil {
			return fmt.Errorf("solve: %w", err)
		}
		var prev weights.Weights
		if err := json.Unmarshal(b, &prev); err != nil {
			return fmt.Errorf("solve: previous weights %s: %w", *prevPath, err)
		}
		in.Previous = &prev
	}
	name := c.Controller.Policy
	if *policy != "" {
		name = config.Policy(*policy)
	}
	p, err := weights.NewPolicy(name)
	if err != nil {
		return fmt.Errorf("solve: --policy: %w", err)
	}
	w, err := p.Compute(in)
	if err != nil {
		return fmt.Errorf("solve: %w", err)
	}
	if _, ok := c.Source(*source); *source != "" && !ok {
		return fmt.Errorf("solve: --source: unknown source %q; known sources: %s", *source, listOrNone(sourceNames(c)))
	}
	if *model != "" {
		m, ok := c.ResolveModel(*model)
		if !ok {
			return fmt.Errorf("solve: --model: unknown model %q; known models: %s", *model, listOrNone(modelNames(c)))
		}
		*model = m
	}
	keep := func(cl weights.Cell) bool {
		return (*source == "" || cl.Source == *source) && (*model == "" || cl.Model == *model)
	}
	if *asJSON {
		b, err := json.MarshalIndent(w.View(keep), "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	cost := weights.Evaluate(in, w)
	fmt.Fprintf(stdout, "weights %s (policy %s)\n", w.Version(), w.Policy())
	fmt.Fprintf(stdout, "cost (ms-equivalent/s): total %.0f = latency %.0f + egress %.0f + utilization %.0f + overflow %.0f + movement %.0f + shed %.0f\n",
		cost.Total, cost.Latency, cost.Egress, cost.Utilization, cost.Overflow, cost.Movement, cost.Shed)
	printCells(stdout, w.Explained(keep), true)
	return nil
}

// sourceNames are the configuration's sources.
func sourceNames(c *config.Config) []string {
	out := make([]string, 0, len(c.Sources))
	for _, s := range c.Sources {
		out = append(out, s.Name)
	}
	return out
}

// modelNames are the configuration's models, each with its aliases.
func modelNames(c *config.Config) []string {
	var out []string
	for _, m := range c.Models {
		out = append(out, m.Name)
		out = append(out, m.Aliases...)
	}
	return out
}
