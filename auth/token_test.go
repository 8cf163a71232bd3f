package auth_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/auth"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/internal/serve"
)

// serveAdmin serves h wrapped by a.Admin on loopback, over TLS when
// a.AdminTLSConfig() says so, as app serves the admin API; it returns
// the base URL.
func serveAdmin(t *testing.T, a *auth.Auth) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("GET /debug/weights", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "weights") })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	scheme := "http"
	if cfg := a.AdminTLSConfig(); cfg != nil {
		ln, scheme = tls.NewListener(ln, cfg), "https"
	}
	srv := &http.Server{Handler: a.Admin(mux), ReadHeaderTimeout: 10 * time.Second, ErrorLog: a.AdminErrorLog()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve.HTTP(ctx, srv, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return scheme + "://" + ln.Addr().String()
}

type answer struct {
	status             int
	body, authenticate string
}

func get(t *testing.T, client *http.Client, url, authorization string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, string(body), resp.Header.Get("WWW-Authenticate")}
}

// TestAdminToken: every path but /healthz needs the token of the file,
// which is re-read when it changes.
func TestAdminToken(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	writeFile(t, tokenFile, []byte("s3cret\n"))
	f := newFixture(t, &config.Config{Security: config.Security{Admin: config.AdminSecurity{TokenFile: tokenFile}}})
	base := serveAdmin(t, f.a)
	c := &http.Client{}
	tests := []struct {
		name, path, authorization string
		status                    int
		challenge                 string // in WWW-Authenticate
		message                   string // in the JSON error
	}{
		{"healthz is open", "/healthz", "", 200, "", ""},
		{"the right token", "/debug/weights", "Bearer s3cret", 200, "", ""},
		{"the scheme in any case", "/debug/weights", "bearer s3cret", 200, "", ""},
		{"no token", "/debug/weights", "", 401, `Bearer realm="ilb"`, "needs a bearer token"},
		{"a wrong token", "/debug/weights", "Bearer s3cre", 401, `error="invalid_token"`, "not the one in security.admin.token_file"},
		{"trailing whitespace", "/debug/weights", "Bearer s3cret\t", 200, "", ""},
		{"basic auth", "/debug/weights", "Basic czNjcmV0", 401, `error="invalid_request"`, `not "Bearer <token>"`},
		{"a huge header", "/debug/weights", "Bearer " + strings.Repeat("s", 5000), 401, `error="invalid_request"`, ""},
		{"unknown paths too", "/nope", "", 401, "Bearer", ""},
	}
	refusals := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := get(t, c, base+tt.path, tt.authorization)
			if got.status != tt.status {
				t.Fatalf("status %d (%s), want %d", got.status, got.body, tt.status)
			}
			if tt.status != 401 {
				return
			}
			refusals++
			if !strings.Contains(got.authenticate, tt.challenge) {
				t.Errorf("WWW-Authenticate %q, want %q in it", got.authenticate, tt.challenge)
			}
			var e struct {
				Error struct{ Message string } `json:"error"`
			}
			if err := json.Unmarshal([]byte(got.body), &e); err != nil || !strings.Contains(e.Error.Message, tt.message) {
				t.Errorf("body %q (%v), want a JSON error containing %q", got.body, err, tt.message)
			}
		})
	}
	if got, want := f.metric(t, `ilb_auth_refusals_total{port="admin",reason="bad_token"}`), `ilb_auth_refusals_total{port="admin",reason="bad_token"} 5`; got != want || refusals != 5 {
		t.Errorf("metric %q after %d refusals, want %q", got, refusals, want)
	}
	if n := strings.Count(f.logs.String(), "auth: peer refused"); n != 1 {
		t.Errorf("%d log lines for one client address in a minute, want 1:\n%s", n, f.logs)
	}

	// A new token replaces the old at the next check; an empty file
	// keeps the one in use.
	writeFile(t, tokenFile, []byte("rotated"))
	f.a.Check(context.Background())
	if got := get(t, c, base+"/debug/weights", "Bearer rotated"); got.status != 200 {
		t.Errorf("new token: %d", got.status)
	}
	if got := get(t, c, base+"/debug/weights", "Bearer s3cret"); got.status != 401 {
		t.Errorf("old token: %d", got.status)
	}
	writeFile(t, tokenFile, nil)
	f.a.Check(context.Background())
	f.a.Check(context.Background())
	if got := get(t, c, base+"/debug/weights", "Bearer rotated"); got.status != 200 {
		t.Errorf("after an empty file, the token in use: %d", got.status)
	}
	if !strings.Contains(f.logs.String(), "the file is empty") {
		t.Errorf("the empty token file is not logged:\n%s", f.logs)
	}
}

// TestAdminTLS: the admin API over TLS with ILB's certificate, and with
// client certificates when security.admin.client_certs.
func TestAdminTLS(t *testing.T) {
	p := newPKI(t)
	admin, err := p.ca.IssueClient("admin/cli")
	if err != nil {
		t.Fatal(err)
	}
	cert := admin.TLSCertificate()
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.ca.Pool(), Certificates: certs, MinVersion: tls.VersionTLS12}}}
	}
	tests := []struct {
		name        string
		clientCerts bool
		client      *http.Client
		wantErr     string
	}{
		{"tls", false, client(), ""},
		{"client certificates, with one", true, client(cert), ""},
		{"client certificates, without", true, client(), "certificate required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := p.config()
			c.Security.Admin = config.AdminSecurity{TLS: true, ClientCerts: tt.clientCerts}
			f := newFixture(t, c)
			base := serveAdmin(t, f.a)
			if !strings.HasPrefix(base, "https://") {
				t.Fatalf("admin served at %s", base)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/debug/weights", nil)
			resp, err := tt.client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatal(err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			case tt.wantErr != "":
				f.waitMetric(t, `ilb_tls_handshake_failures_total{port="admin"}`, "1")
			}
		})
	}
}
