package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// defaultAdmin is the admin API's default address (listen.admin).
const defaultAdmin = "127.0.0.1:18002"

// adminFlags are the flags of every command that reads the admin API.
type adminFlags struct {
	addr, ca, cert, key, tokenFile string
}

// addAdminFlags defines --admin, --admin-ca, --admin-cert, --admin-key
// and --admin-token-file on fs, with defaults from $ILB_ADMIN,
// $ILB_ADMIN_CA, $ILB_ADMIN_CERT, $ILB_ADMIN_KEY and
// $ILB_ADMIN_TOKEN_FILE.
func addAdminFlags(fs *flag.FlagSet) *adminFlags {
	f := &adminFlags{}
	env := func(name, def string) string {
		if v := os.Getenv(name); v != "" {
			return v
		}
		return def
	}
	fs.StringVar(&f.addr, "admin", env("ILB_ADMIN", defaultAdmin),
		"ILB admin API: host:port (http; https with --admin-ca or --admin-cert), http://host:port or https://host:port; default $ILB_ADMIN or "+defaultAdmin)
	fs.StringVar(&f.ca, "admin-ca", env("ILB_ADMIN_CA", ""), "PEM file of the CA that signed the admin API's certificate (security.admin.tls); default $ILB_ADMIN_CA")
	fs.StringVar(&f.cert, "admin-cert", env("ILB_ADMIN_CERT", ""), "PEM file of a client certificate for the admin API (security.admin.client_certs); default $ILB_ADMIN_CERT")
	fs.StringVar(&f.key, "admin-key", env("ILB_ADMIN_KEY", ""), "PEM file of that certificate's key; default $ILB_ADMIN_KEY")
	fs.StringVar(&f.tokenFile, "admin-token-file", env("ILB_ADMIN_TOKEN_FILE", ""), "file holding the admin API's bearer token (security.admin.token_file); default $ILB_ADMIN_TOKEN_FILE")
	return f
}

// adminClient reads ILB's admin API.
type adminClient struct {
	base      string // scheme://host:port
	display   string // the address as the user gave it
	http      *http.Client
	token     string // "" for none
	tokenFile string
}

// plainAdmin is a client of an admin API over plain HTTP at addr.
func plainAdmin(addr string) *adminClient {
	return &adminClient{base: "http://" + addr, display: addr, http: &http.Client{}}
}

// client builds the admin client the flags describe: the files are read
// here, and a problem with one names the flag and the file.
func (f *adminFlags) client() (*adminClient, error) {
	c := &adminClient{display: f.addr, tokenFile: f.tokenFile}
	secure := f.ca != "" || f.cert != ""
	switch {
	case strings.HasPrefix(f.addr, "https://"):
		c.base = strings.TrimSuffix(f.addr, "/")
		secure = true
	case strings.HasPrefix(f.addr, "http://"):
		if secure {
			return nil, fmt.Errorf("--admin %s is plain HTTP, but --admin-ca or --admin-cert asks for TLS: use https://", f.addr)
		}
		c.base = strings.TrimSuffix(f.addr, "/")
	case strings.Contains(f.addr, "://"):
		return nil, fmt.Errorf("--admin %q: want host:port, http://host:port or https://host:port", f.addr)
	case secure:
		c.base = "https://" + f.addr
	default:
		c.base = "http://" + f.addr
	}
	if u, err := url.Parse(c.base); err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("--admin %q: want host:port, http://host:port or https://host:port", f.addr)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if secure {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if f.ca != "" {
			pem, err := os.ReadFile(f.ca)
			if err != nil {
				return nil, fmt.Errorf("--admin-ca: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--admin-ca %s: no PEM certificate in it", f.ca)
			}
		}
		if (f.cert == "") != (f.key == "") {
			return nil, errors.New("--admin-cert and --admin-key go together: give both or neither")
		}
		if f.cert != "" {
			pair, err := tls.LoadX509KeyPair(f.cert, f.key)
			if err != nil {
				return nil, fmt.Errorf("--admin-cert %s, --admin-key %s: %w", f.cert, f.key, err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		tr.TLSClientConfig = cfg
	} else if f.key != "" {
		return nil, errors.New("--admin-key needs --admin-cert")
	}
	c.http = &http.Client{Transport: tr}
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--admin-token-file: %w", err)
		}
		if c.token = strings.TrimRight(string(b), "\r\n\t "); c.token == "" {
			return nil, fmt.Errorf("--admin-token-file %s is empty: want the token of security.admin.token_file", f.tokenFile)
		}
	}
	return c, nil
}

// getJSON GETs pathQuery (a path with its query) and decodes the JSON
// answer into v.
func (c *adminClient) getJSON(ctx context.Context, pathQuery string, v any) error {
	body, err := c.get(ctx, pathQuery, 10*time.Second, 64<<20)
	if err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}

// get GETs pathQuery within timeout and returns the body (at most limit
// bytes) of a 200 answer. Any other answer is an error carrying the
// API's message; an unreachable API, a timeout, a TLS failure and a
// refused token are errors that say what to do.
func (c *adminClient) get(ctx context.Context, pathQuery string, timeout time.Duration, limit int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := c.base + pathQuery
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.transportError(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", u, err)
	}
	if resp.StatusCode == http.StatusOK {
		return body, nil
	}
	var e struct {
		Error struct{ Message string } `json:"error"`
	}
	msg := ""
	if json.Unmarshal(body, &e) == nil {
		msg = e.Error.Message
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized && c.token == "":
		return nil, fmt.Errorf("admin API at %s wants a bearer token (%s): pass --admin-token-file FILE, the file of security.admin.token_file", c.display, orDash(msg))
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, fmt.Errorf("admin API at %s refused the token of %s (%s): is it the file of security.admin.token_file?", c.display, c.tokenFile, orDash(msg))
	case resp.StatusCode == http.StatusBadRequest && bytes.Contains(body, []byte("HTTP request to an HTTPS server")):
		return nil, fmt.Errorf("admin API at %s serves TLS: use --admin https://%s (and --admin-ca FILE for a private CA)", c.display, hostOf(c.base))
	case msg != "":
		return nil, errors.New(msg)
	}
	return nil, fmt.Errorf("%s answered %s", u, resp.Status)
}

// transportError says what went wrong on the way to the admin API.
func (c *adminClient) transportError(err error) error {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		record    tls.RecordHeaderError
		ue        *url.Error
	)
	switch {
	case errors.As(err, &unknownCA):
		return fmt.Errorf("admin API at %s: its certificate is signed by a CA this command does not trust: pass --admin-ca FILE: %w", c.display, err)
	case errors.As(err, &hostname):
		return fmt.Errorf("admin API at %s: its certificate is not for this host (it names %s): %w", c.display, certNames(hostname.Certificate), err)
	case strings.Contains(err.Error(), "tls: certificate required") || strings.Contains(err.Error(), "tls: bad certificate"):
		return fmt.Errorf("admin API at %s wants a client certificate its CA signed: pass --admin-cert FILE --admin-key FILE: %w", c.display, err)
	case errors.As(err, &record) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("admin API at %s does not serve TLS: use --admin http://%s: %w", c.display, hostOf(c.base), err)
	case errors.As(err, &ue) && ue.Timeout():
		return fmt.Errorf("admin API at %s did not answer in time: %w", c.display, err)
	case errors.As(err, &ue):
		return fmt.Errorf("admin API at %s is unreachable: %w", c.display, err)
	}
	return err
}

func hostOf(base string) string {
	if u, err := url.Parse(base); err == nil {
		return u.Host
	}
	return base
}

func certNames(c *x509.Certificate) string {
	if c == nil {
		return "-"
	}
	names := append([]string{}, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return "no host"
	}
	return strings.Join(names, ", ")
}
