package auth_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ilbproject/ilb/auth"
	"github.com/ilbproject/ilb/config"
)

// servedSerial handshakes with addr and returns the serial number of the
// certificate the server presents.
func servedSerial(t *testing.T, addr string, roots *x509.CertPool, cert tls.Certificate) *big.Int {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{
		RootCAs: roots, ServerName: "localhost", NextProtos: []string{"h2"},
		Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
	})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// TestReload: replaced files take effect on the next check, without a
// restart; a bad replacement keeps the material in use and is counted
// and logged once.
func TestReload(t *testing.T) {
	p := newPKI(t)
	f := newFixture(t, p.config())
	ctx := context.Background()
	addr := serveGRPC(t, f.a, auth.PortXDS)
	envoy := p.envoy(t, "edge-us")
	expiry := func() string { return f.metric(t, "ilb_tls_certificate_expiry_timestamp_seconds") }
	want := func(series string, n int) {
		t.Helper()
		if got, want := f.metric(t, series), fmt.Sprintf("%s %d", series, n); got != want {
			t.Errorf("metric %q, want %q", got, want)
		}
	}
	const ok, bad = `ilb_tls_reloads_total{result="ok"}`, `ilb_tls_reloads_total{result="error"}`
	if got, want := expiry(), fmt.Sprintf("ilb_tls_certificate_expiry_timestamp_seconds %g", float64(p.server.Cert.NotAfter.Unix())); got != want {
		t.Errorf("expiry %q, want %q", got, want)
	}

	// Unchanged files: nothing happens.
	f.a.Check(ctx)
	want(ok, 0)

	// A new certificate (a rename, as cert-manager or `ilb certs --force`
	// write them): the next handshake presents it.
	p.ca.Now = func() time.Time { return time.Now().Add(-24 * time.Hour) }
	next, err := p.ca.IssueServer()
	if err != nil {
		t.Fatal(err)
	}
	if err := next.WriteFiles(p.certFile, p.keyFile); err != nil {
		t.Fatal(err)
	}
	if got := servedSerial(t, addr, p.ca.Pool(), envoy); got.Cmp(p.server.Cert.SerialNumber) != 0 {
		t.Fatalf("before the check, serial %v, want the old %v", got, p.server.Cert.SerialNumber)
	}
	f.a.Check(ctx)
	if got := servedSerial(t, addr, p.ca.Pool(), envoy); got.Cmp(next.Cert.SerialNumber) != 0 {
		t.Fatalf("after the check, serial %v, want the new %v", got, next.Cert.SerialNumber)
	}
	want(ok, 1)
	if got, want := expiry(), fmt.Sprintf("ilb_tls_certificate_expiry_timestamp_seconds %g", float64(next.Cert.NotAfter.Unix())); got != want {
		t.Errorf("expiry %q, want %q", got, want)
	}
	if !strings.Contains(f.logs.String(), "auth: TLS files reloaded") {
		t.Errorf("no reload log line:\n%s", f.logs)
	}

	// Bad replacements: each keeps the certificate in use, counts one
	// error once it is still there at the next check, and logs it once.
	third, err := p.ca.IssueServer()
	if err != nil {
		t.Fatal(err)
	}
	thirdKey, err := third.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	expired, err := p.ca.Issue(auth.LeafSpec{
		CommonName: "ilb", DNSNames: []string{"localhost"}, Server: true,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	expiredKey, err := expired.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	nextKey, err := next.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	breakages := []struct {
		name       string
		cert, key  []byte
		ca         []byte
		logMessage string
	}{
		{"unparsable certificate", []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"), nextKey, nil, "cert_file " + p.certFile},
		{"key of another certificate", third.CertPEM(), nextKey, nil, "private key does not match public key"},
		{"expired certificate", expired.CertPEM(), expiredKey, nil, "the certificate expired at"},
		{"CA bundle holding a key", next.CertPEM(), nextKey, thirdKey, "want CERTIFICATE"},
	}
	errors := 0
	for _, b := range breakages {
		t.Run(b.name, func(t *testing.T) {
			writeFile(t, p.certFile, b.cert)
			writeFile(t, p.keyFile, b.key)
			if b.ca != nil {
				writeFile(t, p.caFile, b.ca)
			}
			f.a.Check(ctx) // seen once: may be a rotation in progress
			want(bad, errors)
			f.a.Check(ctx)
			errors++
			want(bad, errors)
			f.a.Check(ctx)
			want(bad, errors)
			if got := servedSerial(t, addr, p.ca.Pool(), envoy); got.Cmp(next.Cert.SerialNumber) != 0 {
				t.Errorf("serial %v, want the one in use %v", got, next.Cert.SerialNumber)
			}
			logs := f.logs.String()
			if n := strings.Count(logs, b.logMessage); n != 1 {
				t.Errorf("%d log lines with %q, want 1:\n%s", n, b.logMessage, logs)
			}
			writeFile(t, p.caFile, p.ca.CertPEM())
		})
	}
	want(ok, 1)

	// Fixed: the good files are used again, and a later breakage of
	// the same kind is reported again.
	writeFile(t, p.certFile, third.CertPEM())
	writeFile(t, p.keyFile, thirdKey)
	f.a.Check(ctx)
	want(ok, 2)
	if got := servedSerial(t, addr, p.ca.Pool(), envoy); got.Cmp(third.Cert.SerialNumber) != 0 {
		t.Errorf("serial %v, want %v", got, third.Cert.SerialNumber)
	}
}

// TestReloadClientCA: a new client CA bundle decides the next
// handshakes: clients of the old CA are refused, those of the new one
// accepted.
func TestReloadClientCA(t *testing.T) {
	p := newPKI(t)
	f := newFixture(t, p.config())
	addr := serveGRPC(t, f.a, auth.PortExtProc)
	oldEnvoy := p.envoy(t, "edge-us")
	ca2, err := auth.NewDevCA(trustDomain)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ca2.IssueEnvoy("edge-us", "gw-2")
	if err != nil {
		t.Fatal(err)
	}
	newEnvoy := l.TLSCertificate()
	if err := check(t, dial(t, addr, p.ca.Pool(), &oldEnvoy), "edge-us"); err != nil {
		t.Fatalf("old CA before the change: %v", err)
	}
	writeFile(t, p.caFile, ca2.CertPEM())
	f.a.Check(context.Background())
	if err := check(t, dial(t, addr, p.ca.Pool(), &newEnvoy), "edge-us"); err != nil {
		t.Errorf("new CA after the change: %v", err)
	}
	if err := check(t, dial(t, addr, p.ca.Pool(), &oldEnvoy), "edge-us"); status.Code(err) != codes.Unavailable {
		t.Errorf("old CA after the change: %v, want the handshake refused (Unavailable)", err)
	}
}

// TestNewRefusesBadFiles: ILB does not start on bad files; the error
// names the file and the problem.
func TestNewRefusesBadFiles(t *testing.T) {
	p := newPKI(t)
	other, err := p.ca.IssueServer()
	if err != nil {
		t.Fatal(err)
	}
	expired, err := p.ca.Issue(auth.LeafSpec{CommonName: "ilb", Server: true, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		writeFile(t, path, data)
		return path
	}
	otherKey, _ := other.KeyPEM()
	expiredKey, _ := expired.KeyPEM()
	mismatched := file("other-key.pem", otherKey)
	garbage := file("garbage.pem", []byte("hello\n"))
	empty := file("empty", nil)
	newline := file("newline", []byte("\n"))
	twoLines := file("two-lines", []byte("abc\ndef\n"))
	tests := []struct {
		name   string
		mutate func(*config.Security)
		want   []string
	}{
		{"missing certificate", func(s *config.Security) { s.TLS.CertFile = filepath.Join(dir, "nope.pem") }, []string{"security.tls.cert_file", "nope.pem", "no such file"}},
		{"key of another certificate", func(s *config.Security) { s.TLS.KeyFile = mismatched }, []string{"security.tls.cert_file", mismatched, "does not match"}},
		{"not PEM", func(s *config.Security) { s.TLS.CertFile = garbage }, []string{garbage, "failed to find any PEM data"}},
		{"expired", func(s *config.Security) {
			s.TLS.CertFile, s.TLS.KeyFile = file("expired.pem", expired.CertPEM()), file("expired-key.pem", expiredKey)
		}, []string{"expired.pem", "the certificate expired at"}},
		{"CA bundle without certificates", func(s *config.Security) { s.TLS.ClientCAFile = garbage }, []string{"security.tls.client_ca_file", garbage, "no PEM certificate found"}},
		{"empty token file", func(s *config.Security) { s.Admin.TokenFile = empty }, []string{"security.admin.token_file", empty, "the file is empty"}},
		{"token file of a newline", func(s *config.Security) { s.Admin.TokenFile = newline }, []string{"the file is empty"}},
		{"token of two lines", func(s *config.Security) { s.Admin.TokenFile = twoLines }, []string{"spans several lines"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := p.config()
			tt.mutate(&c.Security)
			_, err := auth.New(auth.Options{Config: c})
			if err == nil {
				t.Fatal("New succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := auth.WriteFileAtomic(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}
