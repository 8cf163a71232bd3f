package main

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/admin"
	"github.com/ilbproject/ilb/auth"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/internal/serve"
	"github.com/ilbproject/ilb/weights"
)

// secureFiles are what `ilb certs` writes, for the CLI's tests.
type secureFiles struct {
	dir                                string
	ca, cert, key, token, otherCA, ilb string
}

func (f secureFiles) path(name string) string { return filepath.Join(f.dir, name) }

// makeSecureFiles runs `ilb certs` into a temporary directory, and makes
// a second CA the admin API does not use.
func makeSecureFiles(t *testing.T) secureFiles {
	t.Helper()
	f := secureFiles{dir: t.TempDir()}
	if _, _, err := runCmd(t, "certs", "--dir", f.dir, "--sources", "edge-us,edge-eu"); err != nil {
		t.Fatal(err)
	}
	f.ca, f.cert, f.key, f.token, f.ilb = f.path("ca.pem"), f.path("admin.pem"), f.path("admin-key.pem"), f.path("admin.token"), f.path("ilb.pem")
	other, err := auth.NewDevCA("other.test")
	if err != nil {
		t.Fatal(err)
	}
	f.otherCA = f.path("other-ca.pem")
	if err := auth.WriteFileAtomic(f.otherCA, other.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// serveSecureAdmin serves the admin API of a controller as app does
// under sec: TLS and client certificates from package auth, the token
// middleware; it returns host:port.
func serveSecureAdmin(t *testing.T, sec config.Security) string {
	t.Helper()
	c, err := config.Load("../../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Security = sec
	ctl, err := controller.New(controller.Options{
		Config: c, Policy: weights.Proportional{},
		State: func() (map[string]weights.ClusterState, time.Time) { return weights.StaticState(c), time.Now() },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.Tick(t.Context()); err != nil {
		t.Fatal(err)
	}
	au, err := auth.New(auth.Options{Config: c})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if cfg := au.AdminTLSConfig(); cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	srv := &http.Server{Handler: au.Admin(admin.Handler(admin.Options{Config: c, Weights: ctl})), ReadHeaderTimeout: 10 * time.Second, ErrorLog: au.AdminErrorLog()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve.HTTP(ctx, srv, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return addr
}

// TestAdminClientFlags: the commands that read the admin API reach it
// over TLS, with a client certificate and a token, and say what to do
// when one is missing or wrong.
func TestAdminClientFlags(t *testing.T) {
	f := makeSecureFiles(t)
	tlsToken := config.Security{
		TLS:   config.TLS{CertFile: f.ilb, KeyFile: f.path("ilb-key.pem"), ClientCAFile: f.ca},
		Admin: config.AdminSecurity{TLS: true, TokenFile: f.token},
	}
	mtls := tlsToken
	mtls.Admin = config.AdminSecurity{TLS: true, ClientCerts: true}
	secure := serveSecureAdmin(t, tlsToken)
	withCerts := serveSecureAdmin(t, mtls)
	plain := serveSecureAdmin(t, config.Security{Admin: config.AdminSecurity{TokenFile: f.token}})
	empty := filepath.Join(t.TempDir(), "empty")
	if err := auth.WriteFileAtomic(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := auth.WriteFileAtomic(wrong, []byte("nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string // in the output, or in the error
		ok   bool
	}{
		{"https, CA and token", []string{"--admin", "https://" + secure, "--admin-ca", f.ca, "--admin-token-file", f.token}, "weights ", true},
		{"host:port with a CA means https", []string{"--admin", secure, "--admin-ca", f.ca, "--admin-token-file", f.token}, "weights ", true},
		{"client certificate", []string{"--admin", "https://" + withCerts, "--admin-ca", f.ca, "--admin-cert", f.cert, "--admin-key", f.key}, "weights ", true},
		{"plain http with a token", []string{"--admin", plain, "--admin-token-file", f.token}, "weights ", true},
		{"no token", []string{"--admin", "https://" + secure, "--admin-ca", f.ca}, "wants a bearer token (this admin API needs a bearer token: Authorization: Bearer <the token in security.admin.token_file>): pass --admin-token-file FILE", false},
		{"a wrong token", []string{"--admin", "https://" + secure, "--admin-ca", f.ca, "--admin-token-file", wrong}, "refused the token of " + wrong, false},
		{"an empty token file", []string{"--admin", "https://" + secure, "--admin-ca", f.ca, "--admin-token-file", empty}, "--admin-token-file " + empty + " is empty", false},
		{"a missing token file", []string{"--admin", "https://" + secure, "--admin-token-file", f.path("nope")}, "--admin-token-file: open " + f.path("nope"), false},
		{"no CA", []string{"--admin", "https://" + secure, "--admin-token-file", f.token}, "signed by a CA this command does not trust: pass --admin-ca FILE", false},
		{"another CA", []string{"--admin", "https://" + secure, "--admin-ca", f.otherCA, "--admin-token-file", f.token}, "pass --admin-ca FILE", false},
		{"a CA file without certificates", []string{"--admin", "https://" + secure, "--admin-ca", f.token}, "--admin-ca " + f.token + ": no PEM certificate in it", false},
		{"http to a TLS admin", []string{"--admin", "http://" + secure, "--admin-token-file", f.token}, "serves TLS: use --admin https://" + secure, false},
		{"https to a plain admin", []string{"--admin", "https://" + plain, "--admin-token-file", f.token}, "does not serve TLS: use --admin http://" + plain, false},
		{"client certificate missing", []string{"--admin", "https://" + withCerts, "--admin-ca", f.ca}, "wants a client certificate its CA signed: pass --admin-cert FILE --admin-key FILE", false},
		{"certificate without key", []string{"--admin", "https://" + withCerts, "--admin-ca", f.ca, "--admin-cert", f.cert}, "--admin-cert and --admin-key go together", false},
		{"http with a CA", []string{"--admin", "http://" + secure, "--admin-ca", f.ca}, "is plain HTTP, but --admin-ca or --admin-cert asks for TLS", false},
		{"another scheme", []string{"--admin", "ftp://" + secure}, `want host:port, http://host:port or https://host:port`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := runCmd(t, append([]string{"weights"}, tt.args...)...)
			checkOutcome(t, out, err, tt.want, tt.ok)
		})
	}

	// Every admin command takes the flags and gets past TLS and the
	// token: it gets the API's own answer (404 for what this admin API
	// does not serve).
	flags := []string{"--admin", "https://" + secure, "--admin-ca", f.ca, "--admin-token-file", f.token}
	for _, tt := range []struct {
		cmd, rest []string
		want      string // "" for success
	}{
		{[]string{"explain"}, []string{"req-1"}, "explain: this process keeps no decision log"},
		{[]string{"why"}, []string{"--source", "edge-us", "--model", "qwen2.5-7b-instruct"}, "weights history"},
		{[]string{"signals"}, nil, ""},
		{[]string{"rollout", "status"}, nil, "rollout: "},
		{[]string{"weights"}, []string{"--source", "edge-eu"}, ""},
	} {
		t.Run(tt.cmd[0], func(t *testing.T) {
			args := append(append(append([]string{}, tt.cmd...), flags...), tt.rest...)
			_, _, err := runCmd(t, args...)
			switch {
			case tt.want == "" && err != nil:
				t.Fatal(err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("err %v, want one containing %q", err, tt.want)
			case err != nil && (strings.Contains(err.Error(), "token") || strings.Contains(err.Error(), "certificate") || strings.Contains(err.Error(), "TLS")):
				t.Errorf("did not get past TLS and the token: %v", err)
			}
		})
	}
}
