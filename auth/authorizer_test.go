package auth_test

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ilbproject/ilb/auth"
	"github.com/ilbproject/ilb/config"
)

// TestHandshake: the gRPC ports serve TLS 1.2+ with ILB's certificate,
// and with a client CA a client must present a certificate it signed.
func TestHandshake(t *testing.T) {
	p := newPKI(t)
	other, err := auth.NewDevCA("other.test")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := other.IssueEnvoy("edge-us", "gw-1")
	if err != nil {
		t.Fatal(err)
	}
	strangerCert := stranger.TLSCertificate()
	envoyCert := p.envoy(t, "edge-us")
	f := newFixture(t, p.config())
	addr := serveGRPC(t, f.a, auth.PortXDS)

	tests := []struct {
		name    string
		cfg     *tls.Config
		wantErr string // "" for a handshake that succeeds
	}{
		{"client certificate of the CA", &tls.Config{Certificates: []tls.Certificate{envoyCert}}, ""},
		{"TLS 1.3 is preferred", &tls.Config{Certificates: []tls.Certificate{envoyCert}, MinVersion: tls.VersionTLS13}, ""},
		{"TLS 1.2 is accepted", &tls.Config{Certificates: []tls.Certificate{envoyCert}, MaxVersion: tls.VersionTLS12}, ""},
		{"TLS 1.1 is refused", &tls.Config{Certificates: []tls.Certificate{envoyCert}, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}, "protocol version"},
		{"no client certificate", &tls.Config{}, "certificate required"},
		{"a certificate of another CA", &tls.Config{
			// Go's client would not send a certificate the server's CA
			// list does not name; an attacker's would.
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &strangerCert, nil },
		}, "unknown certificate authority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.RootCAs, cfg.ServerName, cfg.NextProtos = p.ca.Pool(), "localhost", []string{"h2"}
			conn, err := tls.Dial("tcp", addr, cfg)
			if err == nil {
				if tt.wantErr == "" {
					if got := conn.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(p.server.Cert.SerialNumber) != 0 {
						t.Errorf("server presented serial %v, want ILB's %v", got, p.server.Cert.SerialNumber)
					}
				} else {
					// TLS 1.3 reports a refused client certificate on
					// the first read.
					_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
					_, err = conn.Read(make([]byte, 1))
				}
				conn.Close()
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("handshake: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("handshake error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}

	// The server counts the three failed handshakes (on its side, just
	// after the client saw the alert) and logs them once: one client
	// host, one minute.
	f.waitMetric(t, `ilb_tls_handshake_failures_total{port="xds"}`, "3")
	if n := strings.Count(f.logs.String(), "auth: TLS handshake failed"); n != 1 {
		t.Errorf("%d log lines for failed handshakes, want 1:\n%s", n, f.logs)
	}
	if !strings.Contains(f.logs.String(), "suppressed=0") || !strings.Contains(f.logs.String(), "port=xds") {
		t.Errorf("the log line does not say the port:\n%s", f.logs)
	}

	// Through gRPC itself: the authorised client gets an answer, one
	// without a certificate never reaches the service.
	if err := check(t, dial(t, addr, p.ca.Pool(), &envoyCert), "edge-us"); err != nil {
		t.Errorf("with a certificate: %v", err)
	}
	err = check(t, dial(t, addr, p.ca.Pool(), nil), "edge-us")
	if status.Code(err) != codes.Unavailable {
		t.Errorf("without a certificate: %v, want Unavailable (the handshake fails)", err)
	}
}

// TestAuthorize: identities from real certificates over real TLS
// streams, against peer rules.
func TestAuthorize(t *testing.T) {
	p := newPKI(t)
	rules := []config.Peer{
		{Identity: "spiffe://" + trustDomain + "/envoy/edge-us/*", Sources: []string{"edge-us"}},
		{Identity: "*.edge-eu.ilb.internal", Sources: []string{"edge-eu"}},
		{Identity: "legacy-*", Sources: []string{config.AnySource}},
	}
	certs := map[string]tls.Certificate{
		"spiffe edge-us": p.envoy(t, "edge-us"),
		"spiffe admin":   p.issue(t, auth.LeafSpec{CommonName: "legacy-admin", URIs: []string{"spiffe://" + trustDomain + "/admin"}, Client: true}),
		"dns eu second":  p.issue(t, auth.LeafSpec{CommonName: "legacy-x", DNSNames: []string{"gw.example.org", "gw1.edge-eu.ilb.internal"}, Client: true}),
		"cn legacy":      p.issue(t, auth.LeafSpec{CommonName: "legacy-gw", Client: true}),
	}
	tests := []struct {
		name, cert, source string
		code               codes.Code
		msg                []string // in the status message
		not                []string // never in it
		reason             string   // counted refusal
	}{
		{name: "spiffe id of its source", cert: "spiffe edge-us", source: "edge-us", code: codes.OK},
		{
			name: "spiffe id of another source", cert: "spiffe edge-us", source: "edge-eu", code: codes.PermissionDenied,
			msg: []string{`identity "spiffe://ilb.test/envoy/edge-us/gw-1" may not speak for source "edge-eu"`, "ilb xds"}, not: []string{`"edge-us"`},
			reason: auth.ReasonSourceNotAllowed,
		},
		{
			name: "spiffe id wins over the common name", cert: "spiffe admin", source: "edge-us", code: codes.PermissionDenied,
			msg: []string{`identity "spiffe://ilb.test/admin"`}, reason: auth.ReasonSourceNotAllowed,
		},
		{name: "any dns san may match", cert: "dns eu second", source: "edge-eu", code: codes.OK},
		{
			name: "dns sans win over the common name", cert: "dns eu second", source: "edge-us", code: codes.PermissionDenied,
			msg: []string{`identity "gw.example.org"`}, reason: auth.ReasonSourceNotAllowed,
		},
		{name: "common name with every source", cert: "cn legacy", source: "edge-eu", code: codes.OK},
		{
			name: "unknown source", cert: "cn legacy", source: "edge-mars", code: codes.PermissionDenied,
			msg: []string{`source "edge-mars" is not configured`}, not: []string{"edge-us", "edge-eu"}, reason: auth.ReasonUnknownSource,
		},
		{
			name: "huge source is bounded", cert: "cn legacy", source: strings.Repeat("x", 100_000), code: codes.PermissionDenied,
			msg: []string{"bytes)"}, reason: auth.ReasonUnknownSource,
		},
	}
	f := newFixture(t, p.config(rules...))
	addr := serveGRPC(t, f.a, auth.PortXDS)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cert := certs[tt.cert]
			series := `ilb_auth_refusals_total{port="xds",reason="` + tt.reason + `"}`
			before := f.metric(t, series)
			err := check(t, dial(t, addr, p.ca.Pool(), &cert), tt.source)
			if got := status.Code(err); got != tt.code {
				t.Fatalf("code %v (%v), want %v", got, err, tt.code)
			}
			msg := status.Convert(err).Message()
			for _, m := range tt.msg {
				if !strings.Contains(msg, m) {
					t.Errorf("message %q does not contain %q", msg, m)
				}
			}
			for _, m := range tt.not {
				if strings.Contains(msg, m) {
					t.Errorf("message %q names %q", msg, m)
				}
			}
			if len(msg) > 1024 {
				t.Errorf("message of %d bytes", len(msg))
			}
			if tt.reason != "" && f.metric(t, series) == before {
				t.Errorf("%s did not move from %q", series, before)
			}
		})
	}
	for _, want := range []string{
		`ilb_auth_refusals_total{port="xds",reason="no_identity"} 0`,
		`ilb_auth_refusals_total{port="xds",reason="source_not_allowed"} 3`,
		`ilb_auth_refusals_total{port="xds",reason="unknown_source"} 2`,
		`ilb_auth_refusals_total{port="lrs",reason="source_not_allowed"} 0`,
	} {
		if got := f.metric(t, want[:strings.LastIndexByte(want, ' ')]); got != want {
			t.Errorf("metric %q, want %q", got, want)
		}
	}
}

// TestAuthorizeWithoutRules: what each configuration lets through when
// no peer rule restricts sources.
func TestAuthorizeWithoutRules(t *testing.T) {
	p := newPKI(t)
	envoy := p.envoy(t, "edge-us")
	noCA := p.config()
	noCA.Security.TLS.ClientCAFile = ""
	tests := []struct {
		name   string
		cfg    *config.Config
		cert   *tls.Certificate
		source string
		code   codes.Code
	}{
		{"client CA, no rules: any verified peer as any source", p.config(), &envoy, "edge-eu", codes.OK},
		{"client CA, no rules: still no unknown source", p.config(), &envoy, "edge-mars", codes.PermissionDenied},
		{"no client CA: anyone", noCA, nil, "edge-eu", codes.OK},
		{"no client CA: unknown sources are left to the service", noCA, nil, "edge-mars", codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.cfg)
			addr := serveGRPC(t, f.a, auth.PortExtProc)
			err := check(t, dial(t, addr, p.ca.Pool(), tt.cert), tt.source)
			if got := status.Code(err); got != tt.code {
				t.Fatalf("code %v (%v), want %v", got, err, tt.code)
			}
		})
	}
	// Without TLS at all, nothing is checked.
	f := newFixture(t, &config.Config{Sources: []config.Source{{Name: "edge-us"}}})
	if err := f.a.Authorizer(auth.PortLRS).Authorize(context.Background(), "edge-us"); err != nil {
		t.Errorf("without TLS: %v", err)
	}
}

// TestNoIdentity: a stream without a verified certificate (a plain
// connection, as on a port served without TLS by mistake) is
// Unauthenticated, counted and logged once a minute per address.
func TestNoIdentity(t *testing.T) {
	p := newPKI(t)
	f := newFixture(t, p.config())
	z := f.a.Authorizer(auth.PortLRS)
	for range 3 {
		err := z.Authorize(context.Background(), "edge-us")
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "no verified client certificate") {
			t.Fatalf("Authorize: %v, want Unauthenticated", err)
		}
	}
	if got, want := f.metric(t, `ilb_auth_refusals_total{port="lrs",reason="no_identity"}`), `ilb_auth_refusals_total{port="lrs",reason="no_identity"} 3`; got != want {
		t.Errorf("metric %q, want %q", got, want)
	}
	if n := strings.Count(f.logs.String(), "auth: peer refused"); n != 1 {
		t.Errorf("%d log lines for 3 refusals in a minute, want 1:\n%s", n, f.logs)
	}
	f.clk.Add(time.Minute)
	_ = z.Authorize(context.Background(), "edge-us")
	logs := f.logs.String()
	if n := strings.Count(logs, "auth: peer refused"); n != 2 {
		t.Fatalf("%d log lines after a minute, want 2:\n%s", n, logs)
	}
	if !strings.Contains(logs, "suppressed=2") || !strings.Contains(logs, "port=lrs") || !strings.Contains(logs, "reason=no_identity") {
		t.Errorf("log lines do not say port, reason and what was suppressed:\n%s", logs)
	}
}

// TestRefusalLogsPerIdentityAndSource: one line per minute per port,
// identity and source, naming the peer's address, identity and source.
func TestRefusalLogsPerIdentityAndSource(t *testing.T) {
	p := newPKI(t)
	f := newFixture(t, p.config(config.Peer{Identity: "spiffe://" + trustDomain + "/envoy/edge-us/*", Sources: []string{"edge-us"}}))
	addr := serveGRPC(t, f.a, auth.PortExtProc)
	us := p.envoy(t, "edge-us")
	eu := p.envoy(t, "edge-eu")
	for range 3 {
		for _, c := range []*tls.Certificate{&us, &eu} {
			conn := dial(t, addr, p.ca.Pool(), c)
			for _, src := range []string{"edge-us", "edge-eu"} {
				_ = check(t, conn, src)
			}
		}
	}
	logs := f.logs.String()
	lines := strings.Count(logs, "auth: peer refused")
	// Refused: us→edge-eu, eu→edge-us, eu→edge-eu; three keys.
	if lines != 3 {
		t.Errorf("%d log lines, want 3 (one per identity and source):\n%s", lines, logs)
	}
	for _, want := range []string{"identity=spiffe://ilb.test/envoy/edge-eu/gw-1", "source=edge-us", "peer=127.0.0.1:", "port=extproc"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	if got, want := f.metric(t, `ilb_auth_refusals_total{port="extproc",reason="source_not_allowed"}`), `ilb_auth_refusals_total{port="extproc",reason="source_not_allowed"} 9`; got != want {
		t.Errorf("metric %q, want %q", got, want)
	}
}
