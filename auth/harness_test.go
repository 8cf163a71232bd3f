package auth_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/ilbproject/ilb/auth"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/internal/logtest"
	"github.com/ilbproject/ilb/internal/promtest"
	"github.com/ilbproject/ilb/internal/serve"
)

const trustDomain = "ilb.test"

// pki is a development CA and ILB's server certificate, written to a
// temporary directory as ILB's configuration names them.
type pki struct {
	dir                       string
	ca                        *auth.DevCA
	server                    *auth.Leaf
	certFile, keyFile, caFile string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	ca, err := auth.NewDevCA(trustDomain)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.IssueServer()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := &pki{
		dir: dir, ca: ca, server: srv,
		certFile: filepath.Join(dir, "ilb.pem"), keyFile: filepath.Join(dir, "ilb-key.pem"), caFile: filepath.Join(dir, "ca.pem"),
	}
	if err := srv.WriteFiles(p.certFile, p.keyFile); err != nil {
		t.Fatal(err)
	}
	if err := auth.WriteFileAtomic(p.caFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// issue is a client certificate of spec.
func (p *pki) issue(t *testing.T, spec auth.LeafSpec) tls.Certificate {
	t.Helper()
	l, err := p.ca.Issue(spec)
	if err != nil {
		t.Fatal(err)
	}
	return l.TLSCertificate()
}

// envoy is the client certificate of an Envoy of source.
func (p *pki) envoy(t *testing.T, source string) tls.Certificate {
	t.Helper()
	l, err := p.ca.IssueEnvoy(source, "gw-1")
	if err != nil {
		t.Fatal(err)
	}
	return l.TLSCertificate()
}

// config is a configuration with the sources edge-us and edge-eu, TLS
// from p (with the client CA) and peers.
func (p *pki) config(peers ...config.Peer) *config.Config {
	return &config.Config{
		Sources: []config.Source{{Name: "edge-us"}, {Name: "edge-eu"}},
		Security: config.Security{
			TLS:   config.TLS{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile},
			Peers: peers,
		},
	}
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fixture is an Auth over c with its registry, logs and clock.
type fixture struct {
	a    *auth.Auth
	reg  *prometheus.Registry
	logs *logtest.Buffer
	clk  *clock
}

func newFixture(t *testing.T, c *config.Config) *fixture {
	t.Helper()
	f := &fixture{reg: prometheus.NewRegistry(), logs: &logtest.Buffer{}, clk: &clock{t: time.Now()}}
	a, err := auth.New(auth.Options{
		Config: c, Registry: f.reg, Now: f.clk.Now,
		Logger: slog.New(slog.NewTextHandler(f.logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	f.a = a
	return f
}

// metric is the line of the registry's exposition that starts with
// series, "" when there is none.
func (f *fixture) metric(t *testing.T, series string) string {
	t.Helper()
	for line := range strings.Lines(string(promtest.Exposition(t, f.reg))) {
		if strings.HasPrefix(line, series+" ") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// waitMetric waits until series has value: the servers count on their
// own goroutines, after the client has seen the outcome.
func (f *fixture) waitMetric(t *testing.T, series, value string) {
	t.Helper()
	want := series + " " + value
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := f.metric(t, series)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("metric %q, want %q", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkMethod is the method of serveGRPC's checking service.
const checkMethod = "/ilb.test.Auth/Check"

// serveGRPC runs on loopback a gRPC server built as app builds ILB's:
// with f's server options, the health service, and a service that
// authorizes each stream for the source of its x-ilb-source metadata on
// port and then answers it.
func serveGRPC(t *testing.T, a *auth.Auth, port auth.Port) string {
	t.Helper()
	z := a.Authorizer(port)
	opts := append(a.GRPCServerOptions(port), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		var source string
		if md, ok := metadata.FromIncomingContext(stream.Context()); ok && len(md.Get("x-ilb-source")) > 0 {
			source = md.Get("x-ilb-source")[0]
		}
		if err := stream.RecvMsg(&emptypb.Empty{}); err != nil {
			return err
		}
		if err := z.Authorize(stream.Context(), source); err != nil {
			return err
		}
		return stream.SendMsg(&emptypb.Empty{})
	}))
	g := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(g, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve.GRPC(ctx, g, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// dial connects to addr over TLS trusting roots, presenting cert when
// it is not nil.
func dial(t *testing.T, addr string, roots *x509.CertPool, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// check calls the checking service as source over conn.
func check(t *testing.T, conn *grpc.ClientConn, source string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-ilb-source", source)
	return conn.Invoke(ctx, checkMethod, &emptypb.Empty{}, &emptypb.Empty{})
}
