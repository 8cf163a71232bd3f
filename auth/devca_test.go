package auth_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/ilbproject/ilb/auth"
	"github.com/ilbproject/ilb/config"
)

// TestDevCA: the server certificate verifies for every name ILB is
// reached by, client certificates carry their SPIFFE ID, keys are
// written 0600 and load back as pairs.
func TestDevCA(t *testing.T) {
	if _, err := auth.NewDevCA("Not A Domain"); err == nil {
		t.Error("NewDevCA accepted an invalid trust domain")
	}
	ca, err := auth.NewDevCA("ilb.local")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.IssueServer("ilb.internal", "10.0.0.7", " ")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"localhost", "127.0.0.1", "::1", "ilb.internal", "10.0.0.7"} {
		_, err := srv.Cert.Verify(x509.VerifyOptions{DNSName: name, Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		if err != nil {
			t.Errorf("server certificate for %s: %v", name, err)
		}
	}
	if got := auth.IdentityOf(srv.Cert).Name; got != "spiffe://ilb.local/ilb" {
		t.Errorf("server identity %q", got)
	}
	envoy, err := ca.IssueEnvoy("edge-us", "gw-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envoy.Cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if got, want := auth.IdentityOf(envoy.Cert).Name, ca.EnvoyID("edge-us", "gw-1"); got != want || want != "spiffe://ilb.local/envoy/edge-us/gw-1" {
		t.Errorf("envoy identity %q, want %q", got, want)
	}
	if envoy.Cert.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("key algorithm %v, want ECDSA", envoy.Cert.PublicKeyAlgorithm)
	}

	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "envoy.pem"), filepath.Join(dir, "envoy-key.pem")
	if err := envoy.WriteFiles(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	for path, mode := range map[string]os.FileMode{certFile: 0o644, keyFile: 0o600} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s has mode %v, want %v", path, st.Mode().Perm(), mode)
		}
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if !pair.Leaf.Equal(envoy.Cert) {
		t.Error("the written pair holds another certificate")
	}
	tok, err := auth.NewToken()
	if err != nil || len(tok) != 43 {
		t.Errorf("token %q (%v), want 43 base64url characters", tok, err)
	}
}

// BenchmarkAuthorize is the per-stream cost of the authorization (ext_proc
// opens one stream per HTTP request): a verified certificate already
// seen, allowed by a peer rule.
func BenchmarkAuthorize(b *testing.B) {
	ca, err := auth.NewDevCA(trustDomain)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := ca.IssueServer()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "ilb.pem"), filepath.Join(dir, "ilb-key.pem"), filepath.Join(dir, "ca.pem")
	if err := srv.WriteFiles(certFile, keyFile); err != nil {
		b.Fatal(err)
	}
	if err := auth.WriteFileAtomic(caFile, ca.CertPEM(), 0o644); err != nil {
		b.Fatal(err)
	}
	c := &config.Config{
		Sources: []config.Source{{Name: "edge-us"}, {Name: "edge-eu"}},
		Security: config.Security{
			TLS: config.TLS{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile},
			Peers: []config.Peer{
				{Identity: "spiffe://" + trustDomain + "/envoy/edge-eu/*", Sources: []string{"edge-eu"}},
				{Identity: "spiffe://" + trustDomain + "/envoy/edge-us/*", Sources: []string{"edge-us"}},
			},
		},
	}
	a, err := auth.New(auth.Options{Config: c})
	if err != nil {
		b.Fatal(err)
	}
	envoy, err := ca.IssueEnvoy("edge-us", "gw-1")
	if err != nil {
		b.Fatal(err)
	}
	chains, err := envoy.Cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		b.Fatal(err)
	}
	// The context a gRPC stream of a verified TLS connection carries.
	ctx := peer.NewContext(context.Background(), &peer.Peer{
		Addr:     &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000},
		AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{envoy.Cert}, VerifiedChains: chains}},
	})
	z := a.Authorizer(auth.PortExtProc)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := z.Authorize(ctx, "edge-us"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
