// Command ilb is the Inference Load Balancer: one binary for the
// all-in-one server, the demo and the operator tools. See `ilb help`.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var ec exitError
		if !errors.As(err, &ec) {
			fmt.Fprintln(os.Stderr, "ilb:", err)
			os.Exit(1)
		}
		os.Exit(ec.code)
	}
}
