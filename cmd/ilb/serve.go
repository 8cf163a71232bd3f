package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/ilbproject/ilb/app"
	"github.com/ilbproject/ilb/config"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "ILB configuration file (YAML)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *cfgPath == "" {
		return errors.New("serve: --config is required")
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return err
	}
	c, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	a, err := app.Start(ctx, app.Options{Config: c, Logger: log})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ilb serving: xds %s, extproc %s, admin http://%s (weights %s)\n",
		a.XDSAddr(), a.ExtProcAddr(), a.AdminAddr(), a.Controller.Current().Version())
	return a.Wait()
}
