package stack

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"golang.org/x/sync/errgroup"

	"github.com/ilbproject/ilb/envoy"
)

// startRealEnvoy runs an envoy binary with bootstrap b (plus an admin
// listener on a free port) and waits until its admin /ready answers LIVE
// and the listener accepts connections. The process is killed when ctx
// is done. index makes --base-id unique per process.
func startRealEnvoy(ctx context.Context, g *errgroup.Group, bin string, b *bootstrapv3.Bootstrap, listener string, index int) (string, error) {
	adminAddr, err := freePort(ctx)
	if err != nil {
		return "", err
	}
	host, port, _ := net.SplitHostPort(adminAddr)
	p, _ := strconv.ParseUint(port, 10, 32)
	b.Admin = &bootstrapv3.Admin{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)},
	}}}}
	y, err := envoy.MarshalYAML(b)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "ilb-demo-envoy-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "bootstrap.yaml")
	if err := os.WriteFile(path, y, 0o600); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, bin, "-c", path, "--base-id", strconv.Itoa(1000+index), "-l", "warning")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", bin, err)
	}
	g.Go(func() error {
		_ = cmd.Wait() // killed by ctx at the end of the demo
		_ = os.RemoveAll(dir)
		return nil
	})
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if envoyReady(ctx, adminAddr) && dialOK(ctx, listener) {
			return listener, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("%s: not ready within 20s (admin %s, listener %s)", bin, adminAddr, listener)
}

func envoyReady(ctx context.Context, admin string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/ready", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func dialOK(ctx context.Context, addr string) bool {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// freePort returns a loopback address with a port that was free a moment
// ago (for processes that cannot report an ephemeral port back).
func freePort(ctx context.Context) (string, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}
