package envoysim

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ilbproject/ilb/envoy"
)

const (
	ilbID   = "spiffe://ilb.local/ilb"
	envoyID = "spiffe://ilb.local/envoy/ilb-test/0"
)

// tlsContext is an UpstreamTlsContext with file material: the client
// certificate (none when client is zero), the trusted CA (none when
// caFile is ""), and one SAN matcher (none when san is "").
func tlsContext(client leaf, caFile string, typ tlsv3.SubjectAltNameMatcher_SanType, san string) *tlsv3.UpstreamTlsContext {
	file := func(p string) *corev3.DataSource {
		return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: p}}
	}
	ctx := &tlsv3.CommonTlsContext{AlpnProtocols: []string{"h2"}}
	if client.certFile != "" {
		ctx.TlsCertificates = []*tlsv3.TlsCertificate{{CertificateChain: file(client.certFile), PrivateKey: file(client.keyFile)}}
	}
	vc := &tlsv3.CertificateValidationContext{}
	if caFile != "" {
		vc.TrustedCa = file(caFile)
	}
	if san != "" {
		vc.MatchTypedSubjectAltNames = []*tlsv3.SubjectAltNameMatcher{{
			SanType: typ, Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: san}},
		}}
	}
	if caFile != "" || san != "" {
		ctx.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc}
	}
	return &tlsv3.UpstreamTlsContext{CommonTlsContext: ctx}
}

func withTLS(c *clusterv3.Cluster, up *tlsv3.UpstreamTlsContext) *clusterv3.Cluster {
	c.TransportSocket = &corev3.TransportSocket{Name: envoy.TLSTransportSocket, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: envoy.MustAny(up)}}
	return c
}

// tlsBootstrap is testBootstrap with TLS contexts on the xds and ext-proc
// clusters (nil: plaintext).
func tlsBootstrap(xdsAddr, procAddr string, xds, proc *tlsv3.UpstreamTlsContext) *bootstrapv3.Bootstrap {
	b := testBootstrap(xdsAddr, procAddr)
	for _, c := range b.GetStaticResources().GetClusters() {
		switch {
		case c.GetName() == "xds" && xds != nil:
			withTLS(c, xds)
		case c.GetName() == "ext-proc" && proc != nil:
			withTLS(c, proc)
		}
	}
	return b
}

func tlsCreds(cert leaf, ca *testCA) grpc.ServerOption {
	return grpc.Creds(credentials.NewTLS(mtlsServer(cert, ca.pool())))
}

// TestTLSToControlPlane: mutual TLS on every gRPC cluster and on an
// engine cluster. ADS over TLS delivers the configuration, each ext_proc
// stream presents the Envoy's certificate, the engine is reached over
// TLS, and every handshake is counted.
func TestTLSToControlPlane(t *testing.T) {
	ca := newTestCA(t, "ilb-test")
	server, client := ca.issue("ilb", ilbID), ca.issue("envoy", envoyID)
	good := tlsContext(client, ca.file, tlsv3.SubjectAltNameMatcher_URI, ilbID)
	h := &harness{t: t, xds: startXDS(t, tlsCreds(server, ca)), proc: startProcessor(t, nil, tlsCreds(server, ca)), ups: map[string]*upstream{}}
	engine := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "no client certificate", http.StatusForbidden)
			return
		}
		_, _ = w.Write([]byte("engine saw " + r.TLS.PeerCertificates[0].URIs[0].String()))
	}))
	engine.TLS = mtlsServer(server, ca.pool())
	engine.StartTLS()
	t.Cleanup(engine.Close)
	engineTLS := tlsContext(client, ca.file, tlsv3.SubjectAltNameMatcher_DNS, "")
	engineTLS.CommonTlsContext.AlpnProtocols = nil // HTTP/1.1: no ALPN, as Envoy offers none without the HTTP/2 fallback
	h.push(withTLS(staticCluster("a", false, engine.Listener.Addr().String()), engineTLS),
		httpListener("main", "routes", extProc("ilb", &extprocfilterv3.ExternalProcessor{})),
		routeConfig("routes", vhost("all", []string{"*"}, routeTo("a"))))
	h.startOpts(Options{Bootstrap: tlsBootstrap(h.xds.addr, h.proc.addr, good, good)})

	resp := do(t, "GET", h.url("main", "/v1/models"), nil, "")
	if resp.status != http.StatusOK || resp.body != "engine saw "+envoyID {
		t.Fatalf("response %d %q; want 200 from the engine over mutual TLS", resp.status, resp.body)
	}
	h.proc.mu.Lock()
	peers := append([]string(nil), h.proc.peers...)
	h.proc.mu.Unlock()
	if len(peers) != 1 || peers[0] != envoyID {
		t.Errorf("ext_proc streams' client identities %q; want one, %s", peers, envoyID)
	}
	st := h.env.Stats()
	for _, c := range []string{"xds", "ext-proc", "a"} {
		if cs := st.Clusters[c]; cs.SSLHandshakes == 0 || cs.SSLConnectionErrors != 0 {
			t.Errorf("cluster %s: %d handshakes, %d connection errors; want some and none", c, cs.SSLHandshakes, cs.SSLConnectionErrors)
		}
	}
}

// TestTLSExtProcRefused: an ext_proc server Envoy must not trust never
// gets a stream: the handshake fails, the filter fails, and
// failure_mode_allow lets the request go on without it, as in Envoy.
func TestTLSExtProcRefused(t *testing.T) {
	ca, other := newTestCA(t, "ilb-test"), newTestCA(t, "other")
	server := ca.issue("ilb", ilbID, "ext.ilb.internal")
	wildcard := ca.issue("wild", "", "*.ilb.internal")
	client := ca.issue("envoy", envoyID)
	uri := tlsv3.SubjectAltNameMatcher_URI
	dns := tlsv3.SubjectAltNameMatcher_DNS
	tests := []struct {
		name   string
		server leaf
		ctx    *tlsv3.UpstreamTlsContext
		// stat is the counter that must move; "" means the stream opens.
		stat func(ClusterStats) uint64
	}{
		{"trusted, URI SAN", server, tlsContext(client, ca.file, uri, ilbID), nil},
		{"trusted, DNS SAN", server, tlsContext(client, ca.file, dns, "ext.ilb.internal"), nil},
		{"wildcard DNS SAN", wildcard, tlsContext(client, ca.file, dns, "ext.ilb.internal"), nil},
		{"no validation context", server, tlsContext(client, "", uri, ""), nil},
		{"another CA", server, tlsContext(client, other.file, uri, ilbID), func(c ClusterStats) uint64 { return c.SSLFailVerifyError }},
		{"URI SAN mismatch", server, tlsContext(client, ca.file, uri, "spiffe://ilb.local/not-ilb"), func(c ClusterStats) uint64 { return c.SSLFailVerifySAN }},
		{"wildcard is one label", wildcard, tlsContext(client, ca.file, dns, "a.b.ilb.internal"), func(c ClusterStats) uint64 { return c.SSLFailVerifySAN }},
		{"no client certificate", server, tlsContext(leaf{}, ca.file, uri, ilbID), func(c ClusterStats) uint64 { return c.SSLConnectionErrors }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &harness{t: t, xds: startXDS(t), proc: startProcessor(t, nil, tlsCreds(tt.server, ca)), ups: map[string]*upstream{}}
			up := h.upstream("a", nil)
			h.push(append(h.clusters(),
				httpListener("main", "routes", extProc("ilb", &extprocfilterv3.ExternalProcessor{FailureModeAllow: true})),
				routeConfig("routes", vhost("all", []string{"*"}, routeTo("a"))))...)
			h.startOpts(Options{Bootstrap: tlsBootstrap(h.xds.addr, h.proc.addr, nil, tt.ctx)})
			resp := do(t, "GET", h.url("main", "/"), nil, "")
			if resp.status != http.StatusOK || len(up.requests()) != 1 {
				t.Fatalf("status %d, %d upstream requests; want the request served", resp.status, len(up.requests()))
			}
			st := h.env.Stats()
			streams := len(h.proc.requests())
			if tt.stat == nil {
				if streams == 0 || st.ExtProc.StreamsFailed != 0 {
					t.Errorf("%d ext_proc messages, %d failed streams; want the stream open", streams, st.ExtProc.StreamsFailed)
				}
				return
			}
			if streams != 0 || st.ExtProc.FailureModeAllowed != 1 {
				t.Errorf("%d ext_proc messages, %d failure_mode_allow; want none and the request let through", streams, st.ExtProc.FailureModeAllowed)
			}
			if cs := st.Clusters["ext-proc"]; tt.stat(cs) == 0 || cs.SSLHandshakes != 0 {
				t.Errorf("ext-proc TLS stats %+v; want the failure counted and no handshake", cs)
			}
		})
	}
}

// TestTLSADSRefused: an Envoy that cannot complete the handshake with its
// control plane never opens the ADS stream (the server sees no request).
func TestTLSADSRefused(t *testing.T) {
	ca := newTestCA(t, "ilb-test")
	server, client := ca.issue("ilb", ilbID), ca.issue("envoy", envoyID)
	tests := []struct {
		name string
		ctx  *tlsv3.UpstreamTlsContext
		stat func(ClusterStats) uint64
	}{
		{"SAN mismatch", tlsContext(client, ca.file, tlsv3.SubjectAltNameMatcher_URI, "spiffe://ilb.local/impostor"), func(c ClusterStats) uint64 { return c.SSLFailVerifySAN }},
		{"no client certificate", tlsContext(leaf{}, ca.file, tlsv3.SubjectAltNameMatcher_URI, ilbID), func(c ClusterStats) uint64 { return c.SSLConnectionErrors }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := startXDS(t, tlsCreds(server, ca))
			e, err := New(Options{Bootstrap: tlsBootstrap(x.addr, closedAddr(t), tt.ctx, nil), Logger: testLogger()})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			waitFor(t, "the handshake failure", func() bool { return tt.stat(e.Stats().Clusters["xds"]) > 0 })
			x.mu.Lock()
			n := len(x.requests)
			x.mu.Unlock()
			if n != 0 || e.Stats().Clusters["xds"].SSLHandshakes != 0 {
				t.Errorf("the control plane got %d requests; want none", n)
			}
		})
	}
}

// TestTLSHealthCheck: the gRPC health check of the ext_proc cluster runs
// over the cluster's TLS: a trusted ILB is healthy and gets the stream;
// an untrusted one fails its checks, and with a panic threshold of 0 the
// filter fails at once (fail open here) without a stream.
func TestTLSHealthCheck(t *testing.T) {
	ca := newTestCA(t, "ilb-test")
	server, client := ca.issue("ilb", ilbID), ca.issue("envoy", envoyID)
	for _, tt := range []struct {
		name    string
		san     string
		healthy bool
	}{{"trusted", ilbID, true}, {"SAN mismatch", "spiffe://ilb.local/impostor", false}} {
		t.Run(tt.name, func(t *testing.T) {
			h := &harness{t: t, xds: startXDS(t), proc: startProcessor(t, nil, tlsCreds(server, ca)), ups: map[string]*upstream{}}
			up := h.upstream("a", nil)
			h.push(append(h.clusters(),
				httpListener("main", "routes", extProc("ilb", &extprocfilterv3.ExternalProcessor{FailureModeAllow: true})),
				routeConfig("routes", vhost("all", []string{"*"}, routeTo("a"))))...)
			b := tlsBootstrap(h.xds.addr, h.proc.addr, nil, tlsContext(client, ca.file, tlsv3.SubjectAltNameMatcher_URI, tt.san))
			ep := b.GetStaticResources().GetClusters()[1]
			ep.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{}}
			ep.HealthChecks = []*corev3.HealthCheck{{
				Timeout: durationpb.New(2 * time.Second), Interval: durationpb.New(time.Hour),
				UnhealthyThreshold: wrapperspb.UInt32(1), HealthyThreshold: wrapperspb.UInt32(1),
				HealthChecker: &corev3.HealthCheck_GrpcHealthCheck_{GrpcHealthCheck: &corev3.HealthCheck_GrpcHealthCheck{}},
			}}
			h.startOpts(Options{Bootstrap: b}) // ready: every ext_proc host has its first check result
			resp := do(t, "GET", h.url("main", "/"), nil, "")
			if resp.status != http.StatusOK || len(up.requests()) != 1 {
				t.Fatalf("status %d, %d upstream requests", resp.status, len(up.requests()))
			}
			cs := h.env.Stats().Clusters["ext-proc"]
			streams := len(h.proc.requests())
			if tt.healthy && (cs.HealthCheckSuccesses == 0 || streams == 0) {
				t.Errorf("health %+v, %d ext_proc messages; want a passing check over TLS and the stream", cs, streams)
			}
			if !tt.healthy && (cs.HealthCheckNetworkFailures == 0 || cs.SSLFailVerifySAN == 0 || streams != 0) {
				t.Errorf("health %+v, %d ext_proc messages; want the check failed on the SAN and no stream", cs, streams)
			}
		})
	}
}

// TestTLSRefusedAtLoad: TLS settings envoysim does not model, and material
// Envoy could not load, are errors at load naming the field.
func TestTLSRefusedAtLoad(t *testing.T) {
	ca := newTestCA(t, "ilb-test")
	client := ca.issue("envoy", envoyID)
	good := func(edit func(*tlsv3.UpstreamTlsContext)) *tlsv3.UpstreamTlsContext {
		u := tlsContext(client, ca.file, tlsv3.SubjectAltNameMatcher_URI, ilbID)
		edit(u)
		return u
	}
	tests := []struct {
		name string
		ctx  *tlsv3.UpstreamTlsContext
		want string
	}{
		{"SDS certificate", good(func(u *tlsv3.UpstreamTlsContext) {
			u.CommonTlsContext.TlsCertificates = nil
			u.CommonTlsContext.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{envoy.SDSSecret("default", "sds-grpc")}
		}), "common_tls_context.tls_certificate_sds_secret_configs: field not supported by envoysim"},
		{"SDS validation", good(func(u *tlsv3.UpstreamTlsContext) {
			u.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{ValidationContextSdsSecretConfig: envoy.SDSSecret("ROOTCA", "sds-grpc")}
		}), "validation_context_sds_secret_config: field not supported by envoysim"},
		{"CRL", good(func(u *tlsv3.UpstreamTlsContext) {
			u.CommonTlsContext.GetValidationContext().Crl = &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: ca.file}}
		}), "validation_context.crl: field not supported by envoysim"},
		{"cipher suites", good(func(u *tlsv3.UpstreamTlsContext) {
			u.CommonTlsContext.TlsParams = &tlsv3.TlsParameters{CipherSuites: []string{"ECDHE-ECDSA-AES128-GCM-SHA256"}}
		}), "tls_params.cipher_suites: field not supported by envoysim"},
		{"auto SNI", good(func(u *tlsv3.UpstreamTlsContext) { u.AutoHostSni = true }), "auto_host_sni: field not supported by envoysim"},
		{"missing key file", good(func(u *tlsv3.UpstreamTlsContext) {
			u.CommonTlsContext.TlsCertificates[0].PrivateKey = &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: client.keyFile + ".gone"}}
		}), "tls_certificates[0].private_key: open "},
		{
			"SAN without CA", good(func(u *tlsv3.UpstreamTlsContext) { u.CommonTlsContext.GetValidationContext().TrustedCa = nil }),
			"SAN-based verification of peer certificates without trusted CA is insecure and not allowed",
		},
		{"TLS 1.1", good(func(u *tlsv3.UpstreamTlsContext) {
			u.CommonTlsContext.TlsParams = &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_1}
		}), "tls_minimum_protocol_version: TLSv1_1 is not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Options{Bootstrap: tlsBootstrap("127.0.0.1:1", "127.0.0.1:2", nil, proto.Clone(tt.ctx).(*tlsv3.UpstreamTlsContext)), Logger: testLogger()})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v; want %q", err, tt.want)
			}
		})
	}
}

// TestTLSOnListenerRefused: an UpstreamTlsContext is a cluster's; on a
// listener's filter chain it is refused (downstream TLS is not modelled).
func TestTLSOnListenerRefused(t *testing.T) {
	ca := newTestCA(t, "ilb-test")
	b := testBootstrap("127.0.0.1:1", "127.0.0.1:2")
	b.DynamicResources = nil
	l := httpListener("main", "routes")
	l.FilterChains[0].TransportSocket = withTLS(&clusterv3.Cluster{}, tlsContext(leaf{}, ca.file, 0, "")).GetTransportSocket()
	b.StaticResources.Listeners = []*listenerv3.Listener{l}
	_, err := New(Options{Bootstrap: b, Logger: testLogger()})
	if err == nil || !strings.Contains(err.Error(), "is not supported by envoysim on listeners") {
		t.Errorf("error = %v; want the listener's TLS refused", err)
	}
}
