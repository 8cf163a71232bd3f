// Package serve runs ILB's gRPC and HTTP servers under a context: serve
// until the context is done, then stop gracefully within a grace period and
// force the rest closed. Long-lived streams (xDS) would otherwise hold a
// graceful stop forever.
package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"
)

// Grace is how long a stop waits for in-flight calls before forcing.
const Grace = 5 * time.Second

// GRPC serves g on ln until ctx is done. It returns nil after a stop
// caused by ctx, or the error that ended serving.
func GRPC(ctx context.Context, g *grpc.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("grpc serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(stopped)
	}()
	t := time.NewTimer(Grace)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		g.Stop()
		<-stopped
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("grpc serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// HTTP serves s on ln until ctx is done, then shuts it down within Grace.
func HTTP(ctx context.Context, s *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), Grace)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		_ = s.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http serve %s: %w", ln.Addr(), err)
	}
	return nil
}
