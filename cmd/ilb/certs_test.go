package main

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/auth"
	"github.com/ilbproject/ilb/config"
)

// TestCertsCommand: `ilb certs` writes a CA, ILB's, the Envoys' and the
// admin CLI's certificates and a token, and prints a security section
// that ILB accepts as it is.
func TestCertsCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	out, _, err := runCmd(t, "certs", "--dir", dir, "--sources", "edge-us, edge-eu", "--hosts", "ilb.internal,10.0.0.9")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]os.FileMode{
		"ca.pem": 0o644, "ca-key.pem": 0o600, "ilb.pem": 0o644, "ilb-key.pem": 0o600,
		"envoy-edge-us.pem": 0o644, "envoy-edge-us-key.pem": 0o600, "envoy-edge-eu.pem": 0o644, "envoy-edge-eu-key.pem": 0o600,
		"admin.pem": 0o644, "admin-key.pem": 0o600, "admin.token": 0o600,
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) {
		t.Errorf("%d files written, want %d: %v", len(entries), len(want), entries)
	}
	for name, mode := range want {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Error(err)
			continue
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", name, st.Mode().Perm(), mode)
		}
		if !strings.Contains(out, name) {
			t.Errorf("the output does not name %s:\n%s", name, out)
		}
	}

	// The printed section, pasted into the demo configuration, is
	// valid, and ILB loads its files.
	i := strings.Index(out, "security:\n")
	j := strings.Index(out, "\nThe CLI:")
	if i < 0 || j < i {
		t.Fatalf("no security section in:\n%s", out)
	}
	demo, err := os.ReadFile("../../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(append(demo, out[i:j]...))
	if err != nil {
		t.Fatalf("the printed section: %v\n%s", err, out[i:j])
	}
	if _, err := auth.New(auth.Options{Config: c}); err != nil {
		t.Fatalf("ILB cannot load the files: %v", err)
	}
	for _, tt := range []struct {
		file, identity string
		sources        []string
	}{
		{"envoy-edge-us.pem", "spiffe://ilb.local/envoy/edge-us/gateway", []string{"edge-us"}},
		{"envoy-edge-eu.pem", "spiffe://ilb.local/envoy/edge-eu/gateway", []string{"edge-eu"}},
		{"admin.pem", "spiffe://ilb.local/admin/ilb-cli", nil},
	} {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, tt.file), filepath.Join(dir, strings.TrimSuffix(tt.file, ".pem")+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		id := auth.IdentityOf(pair.Leaf).Name
		if id != tt.identity {
			t.Errorf("%s: identity %q, want %q", tt.file, id, tt.identity)
		}
		if got := c.SourcesOf(id); !slices.Equal(got, tt.sources) {
			t.Errorf("%s may speak for %v, want %v", tt.file, got, tt.sources)
		}
	}
	srv, err := tls.LoadX509KeyPair(filepath.Join(dir, "ilb.pem"), filepath.Join(dir, "ilb-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"localhost", "127.0.0.1", "::1", "ilb.internal", "10.0.0.9"} {
		if err := srv.Leaf.VerifyHostname(h); err != nil {
			t.Errorf("ILB's certificate: %v", err)
		}
	}

	// A second run refuses to overwrite; --force replaces everything.
	ca, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	_, _, err = runCmd(t, "certs", "--dir", dir, "--sources", "edge-us")
	if err == nil || !strings.Contains(err.Error(), "already holds ca.pem, ca-key.pem") || !strings.Contains(err.Error(), "--force") {
		t.Errorf("second run: %v, want a refusal naming the files and --force", err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); string(again) != string(ca) {
		t.Error("the refused run changed ca.pem")
	}
	if _, _, err := runCmd(t, "certs", "--dir", dir, "--sources", "edge-us", "--force"); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); string(again) == string(ca) {
		t.Error("--force did not replace ca.pem")
	}
}

func TestCertsCommandErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no dir", []string{"--sources", "edge-us"}, "want --dir DIR --sources"},
		{"no sources", []string{"--dir", dir}, "want --dir DIR --sources"},
		{"empty sources", []string{"--dir", dir, "--sources", " , "}, "--sources names no source"},
		{"source with a slash", []string{"--dir", dir, "--sources", "edge/us"}, `"edge/us" is not a source name`},
		{"source twice", []string{"--dir", dir, "--sources", "edge-us,edge-us"}, `"edge-us" is listed twice`},
		{"bad trust domain", []string{"--dir", dir, "--sources", "edge-us", "--trust-domain", "ILB Local"}, `trust domain "ILB Local"`},
		{"an argument", []string{"--dir", dir, "--sources", "edge-us", "extra"}, "no arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runCmd(t, append([]string{"certs"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want %q", err, tt.want)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed runs wrote %v", entries)
	}
}

// TestCertsFitTheSecureExample: examples/secure/ilb.yaml names the files
// `ilb certs --dir examples/secure/certs` writes, and its peer rules give
// each Envoy certificate its own source only.
func TestCertsFitTheSecureExample(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := runCmd(t, "certs", "--dir", dir, "--sources", "edge-us,edge-eu"); err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../../examples/secure/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(example), "examples/secure/certs/") {
		t.Fatal("examples/secure/ilb.yaml names no file under examples/secure/certs/")
	}
	c, err := config.Parse([]byte(strings.ReplaceAll(string(example), "examples/secure/certs/", dir+"/")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auth.New(auth.Options{Config: c}); err != nil {
		t.Fatalf("the example's files, as ilb certs writes them: %v", err)
	}
	for _, s := range []string{"edge-us", "edge-eu"} {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "envoy-"+s+".pem"), filepath.Join(dir, "envoy-"+s+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.SourcesOf(auth.IdentityOf(pair.Leaf).Name); !slices.Equal(got, []string{s}) {
			t.Errorf("envoy-%s.pem may speak for %v in the example, want [%s]", s, got, s)
		}
	}
}
