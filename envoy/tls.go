package envoy

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/ilbproject/ilb/config"
)

// TLSTransportSocket is the name Envoy registers its TLS transport socket
// under.
const TLSTransportSocket = "envoy.transport_sockets.tls"

// ALPNH2 is the ALPN protocol of HTTP/2 over TLS, which gRPC needs.
const ALPNH2 = "h2"

// UpstreamTLS says how an Envoy authenticates to ILB and verifies ILB
// over TLS: its client certificate and the CA that signed ILB's, either as
// PEM files Envoy reads at start (CertFile, KeyFile, CAFile) or as SDS
// secrets an agent on the node serves and rotates (SDSCert, SDSCA: SPIRE's
// agent, Istio's agent, cert-manager's csi driver with an SDS server).
// Exactly one of the two forms is used; the zero value of the other.
type UpstreamTLS struct {
	// CertFile and KeyFile are the Envoy's certificate chain and private
	// key (PEM). Required when ILB verifies clients
	// (security.tls.client_ca_file).
	CertFile, KeyFile string
	// CAFile is the bundle of CAs that may sign ILB's certificate (PEM).
	CAFile string

	// SDSCert and SDSCA are the names of the SDS secrets holding the
	// Envoy's certificate and the validation context (trusted CAs): for
	// SPIRE the workload's SPIFFE ID and the trust domain
	// ("spiffe://example.org"), for Istio's agent "default" and "ROOTCA".
	SDSCert, SDSCA string
	// SDSCluster is the static cluster through which Envoy reaches the
	// SDS server; default "sds". SDSAddress is that server's address,
	// "unix:/path/to/socket" (SPIRE's agent socket) or host:port; when
	// set, the bootstrap defines the cluster (HTTP/2), else it must be
	// defined elsewhere.
	SDSCluster, SDSAddress string

	// ILBSAN is ILB's identity as its certificate names it: a SPIFFE ID
	// or other URI (spiffe://example.org/ilb), an IP address, or a DNS
	// name. Envoy accepts only a certificate with this subject
	// alternative name. Required: without it any certificate the CA
	// signed would be taken for ILB's.
	ILBSAN string
	// SNI is the server name Envoy sends; default the host of ILB's
	// address when it is a DNS name, none for an IP address.
	SNI string
}

// DefaultSDSCluster is UpstreamTLS.SDSCluster's default.
const DefaultSDSCluster = "sds"

func (t *UpstreamTLS) files() bool { return t.CertFile != "" || t.KeyFile != "" || t.CAFile != "" }
func (t *UpstreamTLS) sds() bool   { return t.SDSCert != "" || t.SDSCA != "" || t.SDSAddress != "" }

// check reports every problem of t against ILB's security settings.
func (t *UpstreamTLS) check(s config.Security) error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !s.TLS.Enabled() {
		return errors.New("TLS to ILB is set but the configuration serves no TLS (security.tls.cert_file is empty): Envoy would fail every handshake")
	}
	switch {
	case t.files() && t.sds():
		add("give the certificates as files or as SDS secrets, not both")
	case t.files():
		if t.CAFile == "" {
			add("the CA file of ILB's certificate is empty: want the bundle that signed security.tls.cert_file")
		}
		if (t.CertFile == "") != (t.KeyFile == "") {
			add("certificate %q and key %q: give both or neither", t.CertFile, t.KeyFile)
		}
		if t.CertFile == "" && s.TLS.ClientCAFile != "" {
			add("ILB requires client certificates (security.tls.client_ca_file is %q): give the Envoy's certificate and key", s.TLS.ClientCAFile)
		}
	case t.sds():
		if t.SDSCA == "" {
			add("the SDS secret of the validation context (trusted CAs) is empty: want e.g. ROOTCA (Istio) or spiffe://<trust domain> (SPIRE)")
		}
		if t.SDSCert == "" && s.TLS.ClientCAFile != "" {
			add("ILB requires client certificates (security.tls.client_ca_file is %q): give the SDS secret of the Envoy's certificate", s.TLS.ClientCAFile)
		}
	default:
		add("no certificates: give the CA (and the client certificate and key) as files or as SDS secrets")
	}
	if t.ILBSAN == "" {
		add("ILB's subject alternative name is empty: want ILB's SPIFFE ID (spiffe://...) or DNS name, else any certificate the CA signed is taken for ILB's")
	} else if _, _, err := sanOf(t.ILBSAN); err != nil {
		add("ILB's subject alternative name: %w", err)
	}
	return errors.Join(errs...)
}

// sanOf tells the kind of a subject alternative name and its matcher
// value: a URI (it has a scheme), an IP address, or a DNS name.
func sanOf(san string) (tlsv3.SubjectAltNameMatcher_SanType, string, error) {
	if strings.TrimSpace(san) != san || san == "" {
		return 0, "", fmt.Errorf("%q: empty or surrounded by spaces", san)
	}
	if strings.Contains(san, "://") {
		u, err := url.Parse(san)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return 0, "", fmt.Errorf("%q is not a URI such as spiffe://example.org/ilb", san)
		}
		return tlsv3.SubjectAltNameMatcher_URI, san, nil
	}
	if ip := net.ParseIP(san); ip != nil {
		return tlsv3.SubjectAltNameMatcher_IP_ADDRESS, ip.String(), nil
	}
	if strings.ContainsAny(san, "/ :") {
		return 0, "", fmt.Errorf("%q is neither a URI, an IP address nor a DNS name", san)
	}
	return tlsv3.SubjectAltNameMatcher_DNS, san, nil
}

// transportSocket is the TLS transport socket of a cluster reaching ILB at
// host: the client certificate, ILB's CA and SAN, SNI, and ALPN h2.
func (t *UpstreamTLS) transportSocket(host string) (*corev3.TransportSocket, error) {
	typ, value, err := sanOf(t.ILBSAN)
	if err != nil {
		return nil, err
	}
	san := &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
		SanType: typ,
		Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: value}},
	}}}
	ctx := &tlsv3.CommonTlsContext{AlpnProtocols: []string{ALPNH2}}
	if t.files() {
		if t.CertFile != "" {
			ctx.TlsCertificates = []*tlsv3.TlsCertificate{{
				CertificateChain: fileSource(t.CertFile),
				PrivateKey:       fileSource(t.KeyFile),
			}}
		}
		san.TrustedCa = fileSource(t.CAFile)
		ctx.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: san}
	} else {
		if t.SDSCert != "" {
			ctx.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{t.sdsSecret(t.SDSCert)}
		}
		ctx.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
			CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         san,
				ValidationContextSdsSecretConfig: t.sdsSecret(t.SDSCA),
			},
		}
	}
	sni := t.SNI
	if sni == "" && net.ParseIP(host) == nil {
		sni = host
	}
	up := &tlsv3.UpstreamTlsContext{CommonTlsContext: ctx, Sni: sni}
	return &corev3.TransportSocket{
		Name:       TLSTransportSocket,
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: MustAny(up)},
	}, nil
}

// SDSSecret is an SDS secret fetched over gRPC from cluster (istio-agent
// serves "default" and "ROOTCA" on its cluster "sds-grpc").
func SDSSecret(name, cluster string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: &corev3.ConfigSource{
		ResourceApiVersion: corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_ApiConfigSource{ApiConfigSource: &corev3.ApiConfigSource{
			ApiType:             corev3.ApiConfigSource_GRPC,
			TransportApiVersion: corev3.ApiVersion_V3,
			GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
				EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster},
			}}},
		}},
	}}
}

func (t *UpstreamTLS) sdsSecret(name string) *tlsv3.SdsSecretConfig {
	return SDSSecret(name, t.sdsCluster())
}

func (t *UpstreamTLS) sdsCluster() string {
	if t.SDSCluster == "" {
		return DefaultSDSCluster
	}
	return t.SDSCluster
}

// sdsClusterResource is the static HTTP/2 cluster of the SDS server at
// SDSAddress (a unix socket or host:port), nil when SDSAddress is empty.
func (t *UpstreamTLS) sdsClusterResource() (*clusterv3.Cluster, error) {
	if t.SDSAddress == "" || !t.sds() {
		return nil, nil
	}
	name := t.sdsCluster()
	path, ok := strings.CutPrefix(t.SDSAddress, "unix:")
	if !ok {
		c, err := grpcCluster(name, t.SDSAddress)
		if err != nil {
			return nil, fmt.Errorf("SDS address: %w", err)
		}
		return c, nil
	}
	path = strings.TrimPrefix(path, "//")
	if path == "" {
		return nil, fmt.Errorf("SDS address %q: want unix:/path/to/socket", t.SDSAddress)
	}
	c, err := grpcCluster(name, "127.0.0.1:1")
	if err != nil {
		return nil, err
	}
	c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}
	c.LoadAssignment.Endpoints = []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
		HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: &corev3.Address{
			Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: path}},
		}}},
	}}}}
	return c, nil
}

func fileSource(path string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: path}}
}
