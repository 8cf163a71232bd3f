//go:build !serving

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/sim/fleet"
)

// runEngines serves a simulated engine replica on every endpoint of a
// configuration (each cluster's engine kind and models, aliases
// included): the engines of the stack as separate processes, in one.
func runEngines(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("engines", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "ILB configuration file (YAML) whose endpoints to serve")
	profile := fs.String("profile", fleet.DefaultProfile, "timing model of every replica: "+profileNames())
	level := fs.String("log-level", "warn", "log level: debug, info, warn, error")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *cfgPath == "" || fs.NArg() > 0 {
		return fmt.Errorf("engines: want --config FILE and no arguments")
	}
	c, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return err
	}
	f, err := fleet.Start(ctx, c, fleet.Options{Profile: *profile, Logger: log})
	if err != nil {
		return fmt.Errorf("engines: %w", err)
	}
	eps := make([]string, 0, len(f.Replicas))
	for ep := range f.Replicas {
		eps = append(eps, ep)
	}
	slices.Sort(eps)
	fmt.Fprintf(stdout, "engines of %s (timing %s) serving on %s\n", *cfgPath, *profile, strings.Join(eps, ", "))
	if err := f.Wait(); err != nil {
		return fmt.Errorf("engines: %w", err)
	}
	return nil
}
