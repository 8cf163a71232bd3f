package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	loadstatsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ilbproject/ilb/auth"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/internal/logtest"
	"github.com/ilbproject/ilb/internal/promtest"
	"github.com/ilbproject/ilb/weights"
)

// securePKI writes a development CA, ILB's certificate and an admin
// token to a temporary directory and returns the CA and a demo
// configuration that uses them: mutual TLS on the gRPC ports, each
// source's Envoys allowed their source only, admin over TLS with the
// token.
func securePKI(t *testing.T) (*auth.DevCA, *config.Config) {
	t.Helper()
	ca, err := auth.NewDevCA("ilb.test")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.IssueServer()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Signals.Disabled = true
	c.Listen = config.Listen{XDS: "127.0.0.1:0", ExtProc: "127.0.0.1:0", Admin: "127.0.0.1:0"}
	c.Security = config.Security{
		TLS: config.TLS{CertFile: filepath.Join(dir, "ilb.pem"), KeyFile: filepath.Join(dir, "ilb-key.pem"), ClientCAFile: filepath.Join(dir, "ca.pem")},
		Peers: []config.Peer{
			{Identity: "spiffe://ilb.test/envoy/edge-us/*", Sources: []string{"edge-us"}},
			{Identity: "spiffe://ilb.test/envoy/edge-eu/*", Sources: []string{"edge-eu"}},
		},
		Admin: config.AdminSecurity{TLS: true, TokenFile: filepath.Join(dir, "admin.token")},
	}
	if err := srv.WriteFiles(c.Security.TLS.CertFile, c.Security.TLS.KeyFile); err != nil {
		t.Fatal(err)
	}
	if err := auth.WriteFileAtomic(c.Security.TLS.ClientCAFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := auth.WriteFileAtomic(c.Security.Admin.TokenFile, []byte("tok3n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return ca, c
}

// dialTLS connects to addr trusting roots, with the client certificate
// of leaf (nil: none).
func dialTLS(t *testing.T, addr string, roots *x509.CertPool, leaf *auth.Leaf) *grpc.ClientConn {
	t.Helper()
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if leaf != nil {
		cfg.Certificates = []tls.Certificate{leaf.TLSCertificate()}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// subscribe opens an ADS stream as a node of source and returns the
// first answer to a CDS request, or the error that ended the stream.
func subscribe(t *testing.T, conn *grpc.ClientConn, source string) (*discoveryv3.DiscoveryResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "gw-1", Cluster: source}, TypeUrl: resource.ClusterType}
	// A Send that finds the stream ended returns io.EOF; Recv says why.
	if err := stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return stream.Recv()
}

// reportLoad sends one demand report for source over LRS and closes the
// stream; it returns the status the stream ended with.
func reportLoad(t *testing.T, conn *grpc.ClientConn, source string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	stream, err := loadstatsv3.NewLoadReportingServiceClient(conn).StreamLoadStats(ctx)
	if err != nil {
		return err
	}
	node := demand.ReporterNode("fake-reporter")
	// A Send that finds the stream refused returns io.EOF; the loop
	// below reads the refusal.
	if err := stream.Send(&loadstatsv3.LoadStatsRequest{Node: node}); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	counts := map[demand.Key]demand.Counts{{Source: source, Model: "llama-3.1-8b-instruct", Priority: weights.Standard}: {Requests: 10, TokenCost: 1000}}
	if err := stream.Send(demand.Encode(node, counts, time.Second)); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if err == io.EOF { //nolint:errorlint // io.EOF is returned bare by gRPC
				return nil
			}
			return err
		}
	}
}

// TestSecureStart: with security set, an Envoy of edge-us may subscribe
// and report load as edge-us only; a client without a certificate does
// not get past the handshake; the admin API wants TLS and the token.
func TestSecureStart(t *testing.T) {
	ca, c := securePKI(t)
	logs := &logtest.Buffer{}
	ctx, cancel := context.WithCancel(t.Context())
	a, err := Start(ctx, Options{Config: c, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = a.Wait() })
	us, err := ca.IssueEnvoy("edge-us", "gw-1")
	if err != nil {
		t.Fatal(err)
	}
	usConn := dialTLS(t, a.XDSAddr(), ca.Pool(), us)

	t.Run("ads", func(t *testing.T) {
		tests := []struct {
			name   string
			conn   *grpc.ClientConn
			source string
			code   codes.Code
		}{
			{"edge-us as edge-us", usConn, "edge-us", codes.OK},
			{"edge-us as edge-eu", usConn, "edge-eu", codes.PermissionDenied},
			{"edge-us as an unknown source", usConn, "edge-mars", codes.PermissionDenied},
			{"no client certificate", dialTLS(t, a.XDSAddr(), ca.Pool(), nil), "edge-us", codes.Unavailable},
			{"plain text", plainConn(t, a.XDSAddr()), "edge-us", codes.Unavailable},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				resp, err := subscribe(t, tt.conn, tt.source)
				if got := status.Code(err); got != tt.code {
					t.Fatalf("code %v (%v), want %v", got, err, tt.code)
				}
				if tt.code == codes.OK && len(resp.GetResources()) == 0 {
					t.Errorf("no clusters for edge-us: %v", resp)
				}
				if tt.code == codes.PermissionDenied && strings.Contains(err.Error(), `"edge-us"`) && tt.source != "edge-us" {
					t.Errorf("the refusal names edge-us, a source the peer did not ask for: %v", err)
				}
			})
		}
	})

	t.Run("lrs", func(t *testing.T) {
		before := a.Demand.Status().Reports
		if err := reportLoad(t, usConn, "edge-us"); err != nil {
			t.Fatalf("edge-us reporting for edge-us: %v", err)
		}
		if got := a.Demand.Status().Reports; got != before+1 {
			t.Errorf("reports %d, want %d", got, before+1)
		}
		err := reportLoad(t, usConn, "edge-eu")
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("edge-us reporting for edge-eu: %v, want PermissionDenied", err)
		}
		if got := a.Demand.Status().Reports; got != before+1 {
			t.Errorf("a refused report was taken: reports %d, want %d", got, before+1)
		}
	})

	t.Run("extproc", func(t *testing.T) {
		// ext_proc serves the same certificate and wants a client one.
		conn, err := tls.Dial("tcp", a.ExtProcAddr(), &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12})
		if err == nil {
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "certificate required") {
			t.Errorf("ext_proc without a client certificate: %v, want certificate required", err)
		}
	})

	t.Run("admin", func(t *testing.T) {
		if got := a.AdminURL(); !strings.HasPrefix(got, "https://") {
			t.Fatalf("AdminURL %s", got)
		}
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
		for _, tt := range []struct {
			name, path, token string
			want              int
		}{
			{"healthz without a token", "/healthz", "", 200},
			{"weights without a token", "/debug/weights", "", 401},
			{"weights with the token", "/debug/weights", "tok3n", 200},
			{"metrics with a wrong token", "/metrics", "nope", 401},
		} {
			t.Run(tt.name, func(t *testing.T) {
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, a.AdminURL()+tt.path, nil)
				if tt.token != "" {
					req.Header.Set("Authorization", "Bearer "+tt.token)
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tt.want {
					t.Errorf("status %d, want %d", resp.StatusCode, tt.want)
				}
			})
		}
	})

	exp := string(promtest.Exposition(t, a.Registry))
	for _, want := range []string{
		`ilb_auth_refusals_total{port="xds",reason="source_not_allowed"} 1`,
		`ilb_auth_refusals_total{port="xds",reason="unknown_source"} 1`,
		`ilb_auth_refusals_total{port="lrs",reason="source_not_allowed"} 1`,
		`ilb_auth_refusals_total{port="admin",reason="bad_token"} 2`,
		`ilb_tls_reloads_total{result="error"} 0`,
		"ilb_tls_certificate_expiry_timestamp_seconds ",
	} {
		if !strings.Contains(exp, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if !strings.Contains(logs.String(), "auth: peer refused") {
		t.Errorf("no refusal logged:\n%s", logs)
	}
}

func plainConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestWarnInsecure: every port bound off loopback that anyone can use
// is named in a warning at start.
func TestWarnInsecure(t *testing.T) {
	tls := config.Security{TLS: config.TLS{CertFile: "c", KeyFile: "k"}}
	mtls := config.Security{TLS: config.TLS{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}, Admin: config.AdminSecurity{TLS: true}}
	tests := []struct {
		name     string
		listen   config.Listen
		security config.Security
		want     []string
	}{
		{"loopback", config.Listen{XDS: "127.0.0.1:18000", ExtProc: "[::1]:18001", Admin: "localhost:18002"}, config.Security{}, nil},
		{
			"all off loopback, no TLS",
			config.Listen{XDS: "0.0.0.0:18000", ExtProc: ":18001", Admin: "10.0.0.1:18002"},
			config.Security{},
			[]string{"without TLS: any client can subscribe", "field=listen.xds", "field=listen.extproc", "admin API off loopback without TLS"},
		},
		{
			"TLS without client certificates",
			config.Listen{XDS: "0.0.0.0:18000", ExtProc: "127.0.0.1:18001", Admin: "127.0.0.1:18002"},
			tls,
			[]string{"without client certificates", "field=listen.xds"},
		},
		{"mutual TLS", config.Listen{XDS: "0.0.0.0:18000", ExtProc: "0.0.0.0:18001", Admin: "0.0.0.0:18002"}, mtls, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			warnInsecure(t.Context(), slog.New(slog.NewTextHandler(&b, nil)), &config.Config{Listen: tt.listen, Security: tt.security})
			got := b.String()
			if len(tt.want) == 0 && got != "" {
				t.Errorf("warned:\n%s", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("warnings lack %q:\n%s", w, got)
				}
			}
		})
	}
}
