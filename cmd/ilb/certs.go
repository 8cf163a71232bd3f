package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/ilbproject/ilb/auth"
)

// certsEnvoyName and certsAdminPath name the identities `ilb certs`
// issues: spiffe://<td>/envoy/<source>/gateway and
// spiffe://<td>/admin/ilb-cli.
const (
	certsEnvoyName = "gateway"
	certsAdminPath = "admin/ilb-cli"
	certsTokenFile = "admin.token"
)

// certsSourceRE: a source name that is safe in a file name and a SPIFFE
// path segment.
var certsSourceRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// certsFile is one file `ilb certs` writes.
type certsFile struct {
	name, what string
}

// runCerts makes a development CA and the certificates of a secure
// setup: ILB's, one per source's Envoys, one for the admin CLI, and an
// admin token; then prints the security section to paste.
func runCerts(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("certs", flag.ContinueOnError)
	dir := fset.String("dir", "", "directory to write the files to, created if missing (required)")
	sourcesFlag := fset.String("sources", "", "the sources, comma-separated: one Envoy certificate each (required)")
	trustDomain := fset.String("trust-domain", "ilb.local", "SPIFFE trust domain of the identities")
	hostsFlag := fset.String("hosts", "", "more names or IPs ILB is reached by, comma-separated (ILB's certificate always has localhost, 127.0.0.1 and ::1)")
	force := fset.Bool("force", false, "overwrite files that exist")
	if err := parse(fset, args, stderr); err != nil {
		return err
	}
	if *dir == "" || *sourcesFlag == "" || fset.NArg() > 0 {
		return errors.New("certs: want --dir DIR --sources S[,S...] and no arguments")
	}
	sources := splitList(*sourcesFlag)
	for i, s := range sources {
		if !certsSourceRE.MatchString(s) {
			return fmt.Errorf("certs: --sources: %q is not a source name this command can use: want letters, digits, '.', '-' or '_'", s)
		}
		if slices.Contains(sources[:i], s) {
			return fmt.Errorf("certs: --sources: %q is listed twice", s)
		}
	}
	if len(sources) == 0 {
		return errors.New("certs: --sources names no source")
	}
	ca, err := auth.NewDevCA(*trustDomain)
	if err != nil {
		return fmt.Errorf("certs: --trust-domain: %w", err)
	}
	files := []certsFile{
		{"ca.pem", "the development CA: ILB's client CA, and the CA Envoys and the CLI trust"},
		{"ca-key.pem", "its private key: keep it private (ILB does not need it)"},
		{"ilb.pem", "ILB's certificate: localhost, 127.0.0.1, ::1, " + ca.SPIFFEID("ilb") + hostsNote(*hostsFlag)},
		{"ilb-key.pem", "its key"},
	}
	for _, s := range sources {
		files = append(files,
			certsFile{"envoy-" + s + ".pem", "the Envoys of " + s + ": " + ca.EnvoyID(s, certsEnvoyName)},
			certsFile{"envoy-" + s + "-key.pem", "their key"})
	}
	files = append(files,
		certsFile{"admin.pem", "the admin CLI: " + ca.SPIFFEID(certsAdminPath) + " (--admin-cert)"},
		certsFile{"admin-key.pem", "its key (--admin-key)"},
		certsFile{certsTokenFile, "the admin API's bearer token (--admin-token-file)"})
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if !*force {
		var exist []string
		for _, f := range files {
			if _, err := os.Lstat(filepath.Join(*dir, f.name)); err == nil {
				exist = append(exist, f.name)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("certs: %w", err)
			}
		}
		if len(exist) > 0 {
			return fmt.Errorf("certs: %s already holds %s: pass --force to replace them", *dir, strings.Join(exist, ", "))
		}
	}
	if err := writeCerts(ca, *dir, sources, splitList(*hostsFlag)); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %s (trust domain %s):\n", *dir, *trustDomain)
	for _, f := range files {
		fmt.Fprintf(stdout, "  %-24s %s\n", f.name, f.what)
	}
	printSecurityYAML(stdout, ca, *dir, sources)
	return nil
}

// writeCerts issues and writes every file, keys 0600.
func writeCerts(ca *auth.DevCA, dir string, sources, hosts []string) error {
	p := func(name string) string { return filepath.Join(dir, name) }
	if err := ca.WriteFiles(p("ca.pem"), p("ca-key.pem")); err != nil {
		return err
	}
	srv, err := ca.IssueServer(hosts...)
	if err != nil {
		return err
	}
	if err := srv.WriteFiles(p("ilb.pem"), p("ilb-key.pem")); err != nil {
		return err
	}
	for _, s := range sources {
		l, err := ca.IssueEnvoy(s, certsEnvoyName)
		if err != nil {
			return err
		}
		if err := l.WriteFiles(p("envoy-"+s+".pem"), p("envoy-"+s+"-key.pem")); err != nil {
			return err
		}
	}
	adm, err := ca.IssueClient(certsAdminPath)
	if err != nil {
		return err
	}
	if err := adm.WriteFiles(p("admin.pem"), p("admin-key.pem")); err != nil {
		return err
	}
	tok, err := auth.NewToken()
	if err != nil {
		return err
	}
	return auth.WriteFileAtomic(p(certsTokenFile), []byte(tok+"\n"), 0o600)
}

// printSecurityYAML prints the configuration that uses the files, and
// how the CLI and Envoy use them.
func printSecurityYAML(w io.Writer, ca *auth.DevCA, dir string, sources []string) {
	p := func(name string) string { return filepath.ToSlash(filepath.Join(dir, name)) }
	where := ""
	if !filepath.IsAbs(dir) {
		where = " (the paths are relative to the directory ILB runs in)"
	}
	fmt.Fprintf(w, "\nPaste into ILB's configuration%s:\n\n", where)
	fmt.Fprintf(w, "security:\n  tls:\n    cert_file: %s\n    key_file: %s\n    client_ca_file: %s\n  peers:\n", p("ilb.pem"), p("ilb-key.pem"), p("ca.pem"))
	for _, s := range sources {
		fmt.Fprintf(w, "    - identity: %s\n      sources: [%s]\n", ca.EnvoyID(s, "*"), s)
	}
	fmt.Fprintf(w, "  admin:\n    tls: true\n    # client_certs: true   # also require admin.pem (--admin-cert/--admin-key)\n    token_file: %s\n", p(certsTokenFile))
	fmt.Fprintf(w, "\nThe CLI:\n  ilb weights --admin https://127.0.0.1:18002 --admin-ca %s --admin-token-file %s\n", p("ca.pem"), p(certsTokenFile))
	if len(sources) > 0 {
		s := sources[0]
		fmt.Fprintf(w, "\nAn Envoy of %s:\n  ilb envoy-config --config ILB.yaml --source %s --tls-cert %s --tls-key %s --tls-ca %s --ilb-san %s\n",
			s, s, p("envoy-"+s+".pem"), p("envoy-"+s+"-key.pem"), p("ca.pem"), ca.SPIFFEID("ilb"))
	}
}

func hostsNote(hosts string) string {
	if h := splitList(hosts); len(h) > 0 {
		return ", " + strings.Join(h, ", ")
	}
	return ""
}

// splitList splits a comma-separated flag, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
