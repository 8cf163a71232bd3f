package config

import (
	"fmt"
	"net"
	"path"
	"slices"
	"strings"
)

// Security configures TLS on ILB's ports and which peers may speak for
// which sources. Empty (the default): plain TCP, no peer is
// authenticated, and ILB logs a warning for every port it binds off
// loopback.
type Security struct {
	// TLS is ILB's server certificate for the xDS (ADS and LRS) and
	// ext_proc ports, and the CAs that sign its clients' certificates.
	TLS TLS `yaml:"tls,omitempty" json:"tls"`
	// Peers authorise client identities (from their verified
	// certificates) per source: an Envoy may subscribe to xDS, report
	// load and name a source in its ext_proc metadata only for the
	// sources a matching rule lists. With a client CA and no rule, every
	// verified peer may speak for every source.
	Peers []Peer `yaml:"peers,omitempty" json:"peers,omitempty"`
	// Admin secures the admin API.
	Admin AdminSecurity `yaml:"admin,omitempty" json:"admin"`
}

// TLS names PEM files, re-read when they change (no restart needed).
type TLS struct {
	// CertFile and KeyFile are the certificate chain and private key ILB
	// presents; set both to serve TLS on the xDS and ext_proc ports.
	CertFile string `yaml:"cert_file,omitempty" json:"cert_file,omitempty"`
	KeyFile  string `yaml:"key_file,omitempty" json:"key_file,omitempty"`
	// ClientCAFile is a bundle of the CAs that sign Envoys' and other
	// peers' certificates. Set, every xDS, LRS and ext_proc client must
	// present a certificate one of them signed (mutual TLS).
	ClientCAFile string `yaml:"client_ca_file,omitempty" json:"client_ca_file,omitempty"`
}

// Enabled reports whether ILB serves TLS.
func (t TLS) Enabled() bool { return t.CertFile != "" }

// Peer authorises the identities matching a pattern for some sources.
type Peer struct {
	// Identity is a pattern over a peer's identity, which is its
	// certificate's SPIFFE ID (the URI SAN spiffe://...), else each of its
	// DNS SANs, else its subject common name. '*' matches any run of
	// characters but '/', '?' one character (path.Match), so
	// "spiffe://ilb.example/envoy/edge-us/*" matches every Envoy of
	// edge-us and "*.edge-us.ilb.internal" every DNS name under it.
	Identity string `yaml:"identity" json:"identity"`
	// Sources are the sources those peers may speak for; "*" is every
	// source.
	Sources []string `yaml:"sources" json:"sources"`
}

// AdminSecurity secures the admin API. Off loopback, it needs TLS or a
// token.
type AdminSecurity struct {
	// TLS serves the admin API over TLS with security.tls's certificate.
	TLS bool `yaml:"tls,omitempty" json:"tls,omitempty"`
	// ClientCerts requires a client certificate signed by
	// security.tls.client_ca_file on the admin API (needs tls).
	ClientCerts bool `yaml:"client_certs,omitempty" json:"client_certs,omitempty"`
	// TokenFile holds a bearer token that every admin request but
	// /healthz must carry (Authorization: Bearer <token>). Re-read when
	// it changes.
	TokenFile string `yaml:"token_file,omitempty" json:"token_file,omitempty"`
}

// AnySource in Peer.Sources authorises every source.
const AnySource = "*"

func (c *Config) validateSecurity(p *problems) {
	s := c.Security
	t := s.TLS
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		p.addf("security.tls.key_file", "is empty while cert_file is %q: want the certificate's private key", t.CertFile)
	case t.CertFile == "" && t.KeyFile != "":
		p.addf("security.tls.cert_file", "is empty while key_file is %q: want the certificate chain", t.KeyFile)
	}
	if t.ClientCAFile != "" && !t.Enabled() {
		p.addf("security.tls.client_ca_file", "%q is set but ILB serves no TLS: set cert_file and key_file too", t.ClientCAFile)
	}
	if len(s.Peers) > 0 && t.ClientCAFile == "" {
		p.addf("security.peers", "identities come from client certificates: set security.tls.client_ca_file")
	}
	for i, peer := range s.Peers {
		path := fmt.Sprintf("security.peers[%d]", i)
		if peer.Identity == "" {
			p.addf(path+".identity", "is empty: want a pattern such as spiffe://example.org/envoy/edge-us/*")
		} else if err := checkPattern(peer.Identity); err != nil {
			p.addf(path+".identity", "%q is not a valid pattern: %v", peer.Identity, err)
		}
		if len(peer.Sources) == 0 {
			p.addf(path+".sources", "is empty: want the sources these peers may speak for, or %q", AnySource)
		}
		for j, src := range peer.Sources {
			if src == AnySource {
				continue
			}
			if _, ok := c.Source(src); !ok {
				p.addf(fmt.Sprintf("%s.sources[%d]", path, j), "unknown source %q (known: %s)", src, c.sourceNames())
			}
		}
	}
	a := s.Admin
	if a.TLS && !t.Enabled() {
		p.addf("security.admin.tls", "needs a certificate: set security.tls.cert_file and key_file")
	}
	if a.ClientCerts && (!a.TLS || t.ClientCAFile == "") {
		p.addf("security.admin.client_certs", "needs security.admin.tls and security.tls.client_ca_file")
	}
	if !a.TLS && a.TokenFile == "" && !IsLoopback(c.Listen.Admin) {
		p.addf("listen.admin", "%q is not a loopback address: serve the admin API off loopback only with security.admin.tls or a security.admin.token_file", c.Listen.Admin)
	}
}

// checkPattern reports a malformed path.Match pattern.
func checkPattern(pattern string) error {
	_, err := path.Match(pattern, "")
	return err
}

func (c *Config) sourceNames() string {
	names := make([]string, len(c.Sources))
	for i, s := range c.Sources {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

// IsLoopback reports whether a host:port listens on loopback only
// (127.0.0.0/8, ::1 or localhost).
func IsLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// SourcesOf returns the sources an identity may speak for under the
// peer rules, in configuration order; every source when a rule matching
// it lists AnySource. An identity no rule matches gets none.
func (c *Config) SourcesOf(identity string) []string {
	allowed := map[string]bool{}
	for _, peer := range c.Security.Peers {
		if ok, _ := path.Match(peer.Identity, identity); !ok {
			continue
		}
		if slices.Contains(peer.Sources, AnySource) {
			for _, s := range c.Sources {
				allowed[s.Name] = true
			}
			break
		}
		for _, s := range peer.Sources {
			allowed[s] = true
		}
	}
	var out []string
	for _, s := range c.Sources {
		if allowed[s.Name] {
			out = append(out, s.Name)
		}
	}
	return out
}
