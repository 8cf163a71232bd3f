package auth

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// maxFileBytes bounds every file auth reads: certificates, keys, CA
// bundles and the token.
const maxFileBytes = 1 << 20

// bundle is one validated generation of the TLS material, immutable once
// built: the handshake hooks read it through an atomic pointer.
type bundle struct {
	cert      tls.Certificate // Leaf set
	clientCAs *x509.CertPool  // nil: no client CA configured
	grpc      *tls.Config     // the xDS/LRS and ext_proc ports
	admin     *tls.Config     // the admin port
}

// files are the contents of the files a watched thing is built from.
type files struct {
	data [][]byte
	sum  [sha256.Size]byte
}

// readFiles reads each path (at most maxFileBytes) and hashes them all.
// names are the configuration fields naming them, for errors.
func readFiles(names, paths []string) (files, error) {
	var f files
	h := sha256.New()
	for i, p := range paths {
		b, err := readBounded(p)
		if err != nil {
			return files{}, fmt.Errorf("%s %s: %w", names[i], p, err)
		}
		f.data = append(f.data, b)
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	h.Sum(f.sum[:0])
	return f, nil
}

func readBounded(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxFileBytes)
	}
	return b, nil
}

// tlsFiles names the TLS files of the configuration.
type tlsFiles struct {
	cert, key, clientCA string // clientCA "": none
	adminClientCerts    bool
}

func (t tlsFiles) names() (names, paths []string) {
	names = []string{"security.tls.cert_file", "security.tls.key_file"}
	paths = []string{t.cert, t.key}
	if t.clientCA != "" {
		names = append(names, "security.tls.client_ca_file")
		paths = append(paths, t.clientCA)
	}
	return names, paths
}

// build parses and validates the material: the certificate chain and its
// key (they must match), the leaf not expired at now, every block of the
// CA bundle a certificate. The error names the file and the problem.
func (t tlsFiles) build(f files, now time.Time) (*bundle, error) {
	cert, err := tls.X509KeyPair(f.data[0], f.data[1])
	if err != nil {
		return nil, fmt.Errorf("security.tls.cert_file %s with key_file %s: %w", t.cert, t.key, err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("security.tls.cert_file %s: %w", t.cert, err)
		}
		cert.Leaf = leaf
	}
	if now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("security.tls.cert_file %s: the certificate expired at %s", t.cert, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	b := &bundle{cert: cert}
	if t.clientCA != "" {
		if b.clientCAs, err = parseCAs(f.data[2]); err != nil {
			return nil, fmt.Errorf("security.tls.client_ca_file %s: %w", t.clientCA, err)
		}
	}
	b.grpc = b.serverConfig(b.clientCAs != nil)
	b.admin = b.serverConfig(t.adminClientCerts && b.clientCAs != nil)
	b.admin.NextProtos = []string{"http/1.1"}
	return b, nil
}

// serverConfig is a server configuration presenting the bundle's
// certificate: TLS 1.2 at least (1.3 is preferred by Go's negotiation),
// and verified client certificates when requireClient.
func (b *bundle) serverConfig(requireClient bool) *tls.Config {
	c := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{b.cert},
	}
	if requireClient {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = b.clientCAs
	}
	return c
}

// parseCAs parses a PEM bundle of CA certificates: at least one, and
// nothing but certificates.
func parseCAs(data []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		n++
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is a %q, want CERTIFICATE", n, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", n, err)
		}
		pool.AddCert(c)
	}
	if n == 0 {
		return nil, errors.New("no PEM certificate found")
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, fmt.Errorf("%d bytes after PEM block %d are not PEM", len(rest), n)
	}
	return pool, nil
}

// parseToken is the token of a token file: its content without the
// trailing newline (and spaces); an empty one is an error.
func parseToken(path string, data []byte) ([]byte, error) {
	tok := bytes.TrimRight(data, "\r\n\t ")
	if len(tok) == 0 {
		return nil, fmt.Errorf("security.admin.token_file %s: the file is empty: want a bearer token", path)
	}
	if i := bytes.IndexAny(tok, "\r\n"); i >= 0 {
		return nil, fmt.Errorf("security.admin.token_file %s: the token spans several lines: want one line", path)
	}
	return tok, nil
}
