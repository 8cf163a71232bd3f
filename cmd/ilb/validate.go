package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/ilbproject/ilb/config"
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
	c, err := config.Load(*cfgPath)
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
