package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Validity periods of the development certificates.
const (
	DevCAValidity   = 5 * 365 * 24 * time.Hour
	DevLeafValidity = 365 * 24 * time.Hour
	// devBackdate tolerates clocks a little behind the CA's.
	devBackdate = time.Hour
)

// DevCA is a development certificate authority: an ECDSA P-256 key and a
// self-signed CA certificate that issues ILB's server certificate and
// its peers' client certificates. It is for tests, demos and first
// setups (`ilb certs`), not a production PKI: the key sits in a file.
type DevCA struct {
	// TrustDomain is the SPIFFE trust domain of the identities it
	// issues (spiffe://<TrustDomain>/...).
	TrustDomain string
	Cert        *x509.Certificate
	Key         *ecdsa.PrivateKey
	// Now is the clock of issuance; nil: time.Now.
	Now func() time.Time
}

// Leaf is an issued certificate and its private key.
type Leaf struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// LeafSpec says what a leaf certificate names and how long it lives.
type LeafSpec struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	// URIs are URI SANs, e.g. a SPIFFE ID.
	URIs []string
	// Server and Client set the extended key usages (server auth, client
	// auth); neither: both.
	Server, Client bool
	// NotBefore and NotAfter bound its validity; zero: from an hour ago
	// for DevLeafValidity.
	NotBefore, NotAfter time.Time
}

var trustDomainRE = regexp.MustCompile(`^[a-z0-9._-]{1,255}$`)

// NewDevCA makes a CA for trustDomain (lowercase letters, digits, '.',
// '-', '_', as SPIFFE allows).
func NewDevCA(trustDomain string) (*DevCA, error) {
	if !trustDomainRE.MatchString(trustDomain) {
		return nil, fmt.Errorf("auth: trust domain %q: want lowercase letters, digits, '.', '-' or '_'", trustDomain)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("auth: CA key: %w", err)
	}
	ca := &DevCA{TrustDomain: trustDomain, Key: key}
	now := ca.now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "ILB development CA (" + trustDomain + ")", Organization: []string{"ILB"}},
		NotBefore:             now.Add(-devBackdate),
		NotAfter:              now.Add(DevCAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		URIs:                  []*url.URL{{Scheme: "spiffe", Host: trustDomain}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("auth: CA certificate: %w", err)
	}
	if ca.Cert, err = x509.ParseCertificate(der); err != nil {
		return nil, fmt.Errorf("auth: CA certificate: %w", err)
	}
	return ca, nil
}

func (ca *DevCA) now() time.Time {
	if ca.Now != nil {
		return ca.Now()
	}
	return time.Now()
}

// SPIFFEID is spiffe://<trust domain>/<path>.
func (ca *DevCA) SPIFFEID(path string) string {
	return "spiffe://" + ca.TrustDomain + "/" + strings.TrimPrefix(path, "/")
}

// EnvoyID is the SPIFFE ID IssueEnvoy gives: spiffe://<trust
// domain>/envoy/<source>/<name>. The peer rule
// "spiffe://<trust domain>/envoy/<source>/*" matches every Envoy of a
// source.
func (ca *DevCA) EnvoyID(source, name string) string {
	return ca.SPIFFEID("envoy/" + source + "/" + name)
}

// Issue signs a leaf certificate as spec says, with a fresh P-256 key.
func (ca *DevCA) Issue(spec LeafSpec) (*Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("auth: leaf key: %w", err)
	}
	now := ca.now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: spec.CommonName, Organization: []string{"ILB"}},
		NotBefore:    spec.NotBefore,
		NotAfter:     spec.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		DNSNames:     spec.DNSNames,
		IPAddresses:  spec.IPs,
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = now.Add(-devBackdate)
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = now.Add(DevLeafValidity)
	}
	if spec.Server || !spec.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if spec.Client || !spec.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	for _, u := range spec.URIs {
		pu, err := url.Parse(u)
		if err != nil {
			return nil, fmt.Errorf("auth: URI SAN %q: %w", u, err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("auth: issue %q: %w", spec.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("auth: issue %q: %w", spec.CommonName, err)
	}
	return &Leaf{Cert: cert, Key: key}, nil
}

// IssueServer issues ILB's server certificate: DNS localhost, IPs
// 127.0.0.1 and ::1, the SPIFFE ID spiffe://<trust domain>/ilb, and
// every extra host (an IP literal becomes an IP SAN, anything else a DNS
// SAN).
func (ca *DevCA) IssueServer(hosts ...string) (*Leaf, error) {
	spec := LeafSpec{
		CommonName: "ilb", Server: true,
		DNSNames: []string{"localhost"},
		IPs:      []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		URIs:     []string{ca.SPIFFEID("ilb")},
	}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		switch ip := net.ParseIP(h); {
		case h == "":
		case ip != nil:
			spec.IPs = append(spec.IPs, ip)
		default:
			spec.DNSNames = append(spec.DNSNames, h)
		}
	}
	return ca.Issue(spec)
}

// IssueClient issues a client certificate whose identity is the SPIFFE
// ID spiffe://<trust domain>/<path> (its CN is path too).
func (ca *DevCA) IssueClient(path string) (*Leaf, error) {
	return ca.Issue(LeafSpec{CommonName: path, Client: true, URIs: []string{ca.SPIFFEID(path)}})
}

// IssueEnvoy issues the client certificate of an Envoy of source, with
// the identity EnvoyID(source, name).
func (ca *DevCA) IssueEnvoy(source, name string) (*Leaf, error) {
	return ca.IssueClient("envoy/" + source + "/" + name)
}

// CertPEM is the CA certificate in PEM.
func (ca *DevCA) CertPEM() []byte { return certPEM(ca.Cert) }

// Pool is a pool holding the CA certificate only.
func (ca *DevCA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// WriteFiles writes the CA certificate (0644) and key (0600).
func (ca *DevCA) WriteFiles(certPath, keyPath string) error {
	return writePair(certPEM(ca.Cert), ca.Key, certPath, keyPath)
}

// CertPEM is the certificate in PEM.
func (l *Leaf) CertPEM() []byte { return certPEM(l.Cert) }

// KeyPEM is the private key in PEM (PKCS #8).
func (l *Leaf) KeyPEM() ([]byte, error) { return keyPEM(l.Key) }

// TLSCertificate is the leaf as a tls.Certificate, for clients and
// servers built in tests.
func (l *Leaf) TLSCertificate() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{l.Cert.Raw}, PrivateKey: l.Key, Leaf: l.Cert}
}

// WriteFiles writes the certificate (0644) and key (0600), each by a
// rename of a complete temporary file, so a reader (ILB reloading them)
// never sees half a file.
func (l *Leaf) WriteFiles(certPath, keyPath string) error {
	return writePair(certPEM(l.Cert), l.Key, certPath, keyPath)
}

// NewToken returns a random bearer token (32 bytes, base64url).
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("auth: token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// WriteFileAtomic writes data to path with perm through a temporary file
// in the same directory and a rename.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("auth: write %s: %w", path, err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	err = errors.Join(werr, f.Chmod(perm), f.Close())
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("auth: write %s: %w", path, err)
	}
	return nil
}

func writePair(cert []byte, key *ecdsa.PrivateKey, certPath, keyPath string) error {
	k, err := keyPEM(key)
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(keyPath, k, 0o600); err != nil {
		return err
	}
	return WriteFileAtomic(certPath, cert, 0o644)
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func keyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("auth: marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// serial is a random 128-bit serial number.
func serial() *big.Int {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go ≥ 1.24)
	b[0] &= 0x7f
	return new(big.Int).SetBytes(b)
}
