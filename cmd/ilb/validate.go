package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/weights"
	"github.com/ilbproject/ilb/xds"
)

// runValidate prints one problem per line and exits 1, or a one-line
// summary.
func runValidate(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "ILB configuration file (YAML)")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *cfgPath == "" {
		return errors.New("validate: --config is required")
	}
	data, err := os.ReadFile(*cfgPath)
	if err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	c, err := config.Parse(data)
	if err == nil {
		err = servable(c)
	}
	if err != nil {
		for _, p := range problems(err) {
			fmt.Fprintf(stdout, "%s: %s\n", *cfgPath, p)
		}
		return exitError{1}
	}
	endpoints := 0
	for _, e := range c.Clusters {
		endpoints += len(e.Endpoints)
	}
	fmt.Fprintf(stdout, "%s: ok: %d regions, %d sources, %d models, %d engine clusters (%d endpoints), policy %s\n",
		*cfgPath, len(c.Regions), len(c.Sources), len(c.Models), len(c.Clusters), endpoints, c.Controller.Policy)
	return nil
}

// servable builds what `ilb serve` would serve from c — the weights, every
// source's snapshot (ValidateAll, references, consistency) and bootstrap —
// so that "ok" means the server will start.
func servable(c *config.Config) error {
	w, err := weights.ComputeStatic(c)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range c.Sources {
		res, err := xds.Build(c, w, nil, s.Name)
		if err == nil {
			_, err = res.Snapshot()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("source %s: Envoy resources: %w", s.Name, err))
		}
		if _, err := envoy.Bootstrap(c, s.Name, envoy.BootstrapOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("source %s: %w", s.Name, err))
		}
	}
	return errors.Join(errs...)
}

// problems flattens joined errors into one message each.
func problems(err error) []string {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		var out []string
		for _, e := range joined.Unwrap() {
			out = append(out, problems(e)...)
		}
		return out
	}
	return []string{err.Error()}
}
