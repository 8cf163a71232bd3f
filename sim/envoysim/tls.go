package envoysim

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rawbufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
)

// maxPEMBytes bounds a certificate, key or CA file envoysim reads.
const maxPEMBytes = 1 << 20

// upstreamTLS is a compiled UpstreamTlsContext with file or inline
// material (source/common/tls/client_context_impl.cc and
// cert_validator/default_validator.cc). It is immutable.
type upstreamTLS struct {
	// key identifies the configuration and the material it loaded, so a
	// connection is reused only for the same TLS settings.
	key  string
	sni  string
	alpn []string
	cert *tls.Certificate // nil: no client certificate
	// roots verifies the server's chain; nil: the server's certificate is
	// not verified at all (no validation context).
	roots    *x509.CertPool
	sans     []sanMatcher
	min, max uint16
}

// sanMatcher is a SubjectAltNameMatcher: a string matcher over the SANs of
// one type.
type sanMatcher struct {
	typ tlsv3.SubjectAltNameMatcher_SanType
	m   *stringMatcher
	// exactDNS: a DNS matcher with an exact value matches a wildcard SAN
	// (DnsSANMatcher: Utility::dnsNameMatch).
	exactDNS string
}

// compileTransportSocket compiles a cluster's transport_socket: nil for
// none or raw_buffer, else the TLS client. http2 selects Envoy's ALPN
// fallback (h2) when the context lists no ALPN protocol. Files are read
// now, as Envoy reads them when it loads the cluster.
func compileTransportSocket(ts *corev3.TransportSocket, http2 bool) (*upstreamTLS, error) {
	if ts.GetTypedConfig() == nil {
		return nil, nil
	}
	m, err := ts.GetTypedConfig().UnmarshalNew()
	if err != nil {
		return nil, fmt.Errorf("transport_socket: %w", err)
	}
	switch c := m.(type) {
	case *rawbufferv3.RawBuffer:
		return nil, nil
	case *tlsv3.UpstreamTlsContext:
		u, err := compileUpstreamTLS(c, http2)
		if err != nil {
			return nil, fmt.Errorf("transport_socket (tls): %w", err)
		}
		return u, nil
	default:
		return nil, fmt.Errorf("transport_socket: %s is not supported by envoysim", m.ProtoReflect().Descriptor().FullName())
	}
}

func compileUpstreamTLS(c *tlsv3.UpstreamTlsContext, http2 bool) (*upstreamTLS, error) {
	ctx := c.GetCommonTlsContext()
	u := &upstreamTLS{sni: c.GetSni(), alpn: ctx.GetAlpnProtocols(), min: tls.VersionTLS12, max: tls.VersionTLS12}
	if len(u.alpn) == 0 && http2 {
		u.alpn = []string{"h2"} // the HTTP/2 connection pool's ALPN fallback
	}
	h := sha256.New()
	det, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return nil, err
	}
	h.Write(det)
	var errs []error
	read := func(field string, ds *corev3.DataSource) []byte {
		b, err := dataSource(ds)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
		}
		h.Write(b)
		return b
	}
	if p := ctx.GetTlsParams(); p != nil {
		if u.min, err = tlsVersion(p.GetTlsMinimumProtocolVersion(), tls.VersionTLS12); err != nil {
			errs = append(errs, fmt.Errorf("tls_params.tls_minimum_protocol_version: %w", err))
		}
		if u.max, err = tlsVersion(p.GetTlsMaximumProtocolVersion(), tls.VersionTLS12); err != nil {
			errs = append(errs, fmt.Errorf("tls_params.tls_maximum_protocol_version: %w", err))
		}
		if u.min > u.max {
			errs = append(errs, fmt.Errorf("tls_params: minimum version %s is above the maximum %s", tls.VersionName(u.min), tls.VersionName(u.max)))
		}
	}
	switch certs := ctx.GetTlsCertificates(); len(certs) {
	case 0:
	case 1:
		chain := read("tls_certificates[0].certificate_chain", certs[0].GetCertificateChain())
		key := read("tls_certificates[0].private_key", certs[0].GetPrivateKey())
		if len(chain) > 0 && len(key) > 0 {
			pair, err := tls.X509KeyPair(chain, key)
			if err != nil {
				errs = append(errs, fmt.Errorf("tls_certificates[0]: %w", err))
			} else {
				u.cert = &pair
			}
		}
	default:
		errs = append(errs, fmt.Errorf("tls_certificates: %d certificates; envoysim models one client certificate", len(certs)))
	}
	vc := ctx.GetValidationContext()
	if ds := vc.GetTrustedCa(); ds != nil {
		if pem := read("validation_context.trusted_ca", ds); len(pem) > 0 {
			u.roots = x509.NewCertPool()
			if !u.roots.AppendCertsFromPEM(pem) {
				errs = append(errs, errors.New("validation_context.trusted_ca: no PEM certificate in it"))
			}
		}
	}
	for i, m := range vc.GetMatchTypedSubjectAltNames() {
		sm, err := compileSANMatcher(m)
		if err != nil {
			errs = append(errs, fmt.Errorf("validation_context.match_typed_subject_alt_names[%d]: %w", i, err))
			continue
		}
		u.sans = append(u.sans, sm)
	}
	if len(u.sans) > 0 && vc.GetTrustedCa() == nil {
		errs = append(errs, errors.New("validation_context: SAN-based verification of peer certificates without trusted CA is insecure and not allowed"))
	}
	u.key = hex.EncodeToString(h.Sum(nil))
	return u, errors.Join(errs...)
}

func compileSANMatcher(m *tlsv3.SubjectAltNameMatcher) (sanMatcher, error) {
	switch m.GetSanType() {
	case tlsv3.SubjectAltNameMatcher_DNS, tlsv3.SubjectAltNameMatcher_URI,
		tlsv3.SubjectAltNameMatcher_IP_ADDRESS, tlsv3.SubjectAltNameMatcher_EMAIL:
	default:
		return sanMatcher{}, fmt.Errorf("san_type %s is not supported by envoysim (DNS, URI, IP_ADDRESS, EMAIL)", m.GetSanType())
	}
	sm, err := compileStringMatcher(m.GetMatcher())
	if err != nil {
		return sanMatcher{}, err
	}
	out := sanMatcher{typ: m.GetSanType(), m: sm}
	if out.typ == tlsv3.SubjectAltNameMatcher_DNS && sm.kind == strExact && !sm.ignoreCase {
		out.exactDNS = sm.s
	}
	return out, nil
}

// tlsVersion maps TlsProtocol to Go's version; TLS_AUTO is def.
func tlsVersion(p tlsv3.TlsParameters_TlsProtocol, def uint16) (uint16, error) {
	switch p {
	case tlsv3.TlsParameters_TLS_AUTO:
		return def, nil
	case tlsv3.TlsParameters_TLSv1_2:
		return tls.VersionTLS12, nil
	case tlsv3.TlsParameters_TLSv1_3:
		return tls.VersionTLS13, nil
	default:
		return 0, fmt.Errorf("%s is not supported by envoysim (TLSv1_2, TLSv1_3)", p)
	}
}

// dataSource reads a DataSource: a file (at most maxPEMBytes) or inline.
func dataSource(ds *corev3.DataSource) ([]byte, error) {
	switch s := ds.GetSpecifier().(type) {
	case *corev3.DataSource_Filename:
		f, err := os.Open(s.Filename)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxPEMBytes+1))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Filename, err)
		}
		if len(b) > maxPEMBytes {
			return nil, fmt.Errorf("%s: larger than %d bytes", s.Filename, maxPEMBytes)
		}
		return b, nil
	case *corev3.DataSource_InlineBytes:
		return s.InlineBytes, nil
	case *corev3.DataSource_InlineString:
		return []byte(s.InlineString), nil
	default:
		return nil, errors.New("empty data source")
	}
}

// tlsOutcome is the result of one handshake, counted as Envoy's
// cluster.<name>.ssl.* stats.
type tlsOutcome int

const (
	tlsHandshake       tlsOutcome = iota // ssl.handshake
	tlsConnectionError                   // ssl.connection_error (any failed handshake)
	tlsFailVerifyError                   // ssl.fail_verify_error: the chain does not verify
	tlsFailVerifySAN                     // ssl.fail_verify_san: no SAN matcher matched
)

// errSANMismatch is the verification failure of a certificate whose
// subject alternative names match no matcher.
var errSANMismatch = errors.New("peer certificate matches none of match_typed_subject_alt_names")

// config is the client's tls.Config. Go's own verification is off:
// verify does what Envoy's default validator does instead (a trusted CA
// chain, then the SAN matchers; no host name check, and nothing at all
// without a validation context).
func (u *upstreamTLS) config(outcome func(tlsOutcome)) *tls.Config {
	cfg := &tls.Config{
		ServerName: u.sni, NextProtos: slices.Clone(u.alpn),
		MinVersion: u.min, MaxVersion: u.max,
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection, as Envoy's default validator does
		VerifyConnection: func(cs tls.ConnectionState) error {
			err := u.verify(cs.PeerCertificates)
			switch {
			case errors.Is(err, errSANMismatch):
				outcome(tlsFailVerifySAN)
			case err != nil:
				outcome(tlsFailVerifyError)
			}
			return err
		},
	}
	if u.cert != nil {
		cfg.Certificates = []tls.Certificate{*u.cert}
	}
	return cfg
}

func (u *upstreamTLS) verify(chain []*x509.Certificate) error {
	if u.roots == nil {
		return nil
	}
	if len(chain) == 0 {
		return errors.New("peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{
		Roots: u.roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		return fmt.Errorf("certificate verify failed: %w", err)
	}
	if len(u.sans) == 0 {
		return nil
	}
	leaf := chain[0]
	for _, m := range u.sans {
		if m.matches(leaf) {
			return nil
		}
	}
	return fmt.Errorf("%w (DNS %v, URI %d)", errSANMismatch, leaf.DNSNames, len(leaf.URIs))
}

func (m sanMatcher) matches(c *x509.Certificate) bool {
	var values []string
	switch m.typ {
	case tlsv3.SubjectAltNameMatcher_DNS:
		values = c.DNSNames
	case tlsv3.SubjectAltNameMatcher_URI:
		for _, u := range c.URIs {
			values = append(values, u.String())
		}
	case tlsv3.SubjectAltNameMatcher_IP_ADDRESS:
		for _, ip := range c.IPAddresses {
			values = append(values, ip.String())
		}
	case tlsv3.SubjectAltNameMatcher_EMAIL:
		values = c.EmailAddresses
	}
	for _, v := range values {
		if m.exactDNS != "" && dnsNameMatch(m.exactDNS, v) || m.exactDNS == "" && m.m.match(v) {
			return true
		}
	}
	return false
}

// dnsNameMatch is Utility::dnsNameMatch: name equals the SAN, or the SAN
// is a wildcard *.suffix and name is one more label in front of suffix.
func dnsNameMatch(name, san string) bool {
	if strings.EqualFold(name, san) {
		return true
	}
	suffix, ok := strings.CutPrefix(san, "*")
	if !ok || !strings.HasPrefix(suffix, ".") {
		return false
	}
	label, ok := strings.CutSuffix(strings.ToLower(name), strings.ToLower(suffix))
	return ok && label != "" && !strings.Contains(label, ".")
}

// dialUpstream opens a TCP connection to addr within timeout and, with u set,
// runs the TLS handshake on it, counting the outcome.
func dialUpstream(ctx context.Context, addr string, timeout time.Duration, u *upstreamTLS, outcome func(tlsOutcome)) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || u == nil {
		return raw, err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	c := tls.Client(raw, u.config(outcome))
	if err := c.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		outcome(tlsConnectionError)
		// A connection failure, as Envoy reports a failed handshake
		// ("connection failure, transport failure reason: TLS_error...").
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: raw.RemoteAddr(), Err: fmt.Errorf("tls handshake: %w", err)}
	}
	outcome(tlsHandshake)
	return c, nil
}
