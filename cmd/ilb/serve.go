package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ilbproject/ilb/app"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/telemetry"
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
	// Tracing is configured by the standard OTEL_* variables; unset, it
	// is off and costs nothing.
	tp, shutdown, err := telemetry.NewTracerProvider(ctx, telemetry.TracingOptions{Getenv: os.Getenv})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer func() {
		// Flush the spans still buffered, with a deadline of its own: ctx
		// is done by now.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.WarnContext(sctx, "tracing shutdown", "err", err)
		}
	}()
	a, err := app.Start(ctx, app.Options{Config: c, Logger: log, TracerProvider: tp})
	if err != nil {
		return err
	}
	version := a.Controller.Current().Version()
	if a.HA != nil { // a replica serves the version in force in its HA backend
		version = a.HA.Current().Version()
	}
	fmt.Fprintf(stdout, "ilb serving: xds %s, extproc %s, admin %s (weights %s)\n",
		a.XDSAddr(), a.ExtProcAddr(), a.AdminURL(), version)
	return a.Wait()
}
