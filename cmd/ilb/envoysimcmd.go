//go:build !serving

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"

	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/sim/envoysim"
	"github.com/ilbproject/ilb/xds"
)

// runEnvoySim runs one Envoy model from a bootstrap (as `ilb envoy-config`
// prints it) until interrupted: the stack as separate processes, with
// envoysim where an Envoy would run.
func runEnvoySim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("envoysim", flag.ContinueOnError)
	path := fs.String("bootstrap", "", "Envoy bootstrap file (YAML or JSON), as `ilb envoy-config` prints it (required)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	ready := fs.Duration("ready-timeout", 30*time.Second, "how long to wait for the first configuration from the management server")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *path == "" {
		return errors.New("envoysim: --bootstrap is required")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("envoysim: unexpected argument %q", fs.Arg(0))
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return err
	}
	var b bootstrapv3.Bootstrap
	if err := envoy.LoadYAML(*path, &b); err != nil {
		return fmt.Errorf("envoysim: %w", err)
	}
	e, err := envoysim.New(envoysim.Options{Bootstrap: &b, Logger: log.With("node", b.GetNode().GetId())})
	if err != nil {
		return fmt.Errorf("envoysim: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, *ready)
	err = e.WaitReady(wctx)
	wcancel()
	if err != nil {
		cancel()
		return errors.Join(fmt.Errorf("envoysim: not configured within %s: %w", *ready, err), <-done)
	}
	listener := "no listener yet"
	if addr, ok := e.ListenerAddr(xds.ListenerName); ok {
		listener = "listening on http://" + addr
	}
	fmt.Fprintf(stdout, "envoysim %s (cluster %s) configured by its management server, %s; Ctrl-C to stop\n", b.GetNode().GetId(), b.GetNode().GetCluster(), listener)
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("envoysim: %w", err)
	}
	return nil
}
