package envoy_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"google.golang.org/protobuf/proto"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
)

func secureConfig(t *testing.T) *config.Config {
	t.Helper()
	c, err := config.Load("../examples/secure/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestBootstrapSDSGolden: SDS secrets from an agent on the node, the form
// SPIRE's agent serves (secret names are the workload's SPIFFE ID and the
// trust domain), over its unix socket.
func TestBootstrapSDSGolden(t *testing.T) {
	c := secureConfig(t)
	b, err := envoy.Bootstrap(c, "edge-eu", envoy.BootstrapOptions{
		XDS: "ilb.ilb-system.svc.cluster.local:18000", ExtProc: "ilb.ilb-system.svc.cluster.local:18001",
		TLS: &envoy.UpstreamTLS{
			SDSCert: "spiffe://ilb.local/envoy/edge-eu/gw-0", SDSCA: "spiffe://ilb.local",
			SDSCluster: "spire_agent", SDSAddress: "unix:///run/spire/sockets/agent.sock",
			ILBSAN: "spiffe://ilb.local/ilb",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := envoy.MarshalYAML(b)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "bootstrap-edge-eu-sds.yaml")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./envoy -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("bootstrap differs from %s (run go test ./envoy -update):\n%s", path, got)
	}
	bundle, err := envoy.LoadBundle(path)
	if err != nil {
		t.Fatal(err)
	}
	if ps := bundle.Check(); len(ps) > 0 {
		t.Errorf("problems:\n%s", join(ps))
	}
	for _, name := range []string{"ilb_xds", "ilb_extproc"} {
		up := upstreamTLS(t, b.GetStaticResources().GetClusters(), name)
		if up.GetSni() != "ilb.ilb-system.svc.cluster.local" {
			t.Errorf("%s: sni %q; want the host of ILB's address", name, up.GetSni())
		}
		cv := up.GetCommonTlsContext().GetCombinedValidationContext()
		if cv.GetValidationContextSdsSecretConfig().GetName() != "spiffe://ilb.local" ||
			cv.GetDefaultValidationContext().GetMatchTypedSubjectAltNames()[0].GetSanType() != tlsv3.SubjectAltNameMatcher_URI {
			t.Errorf("%s: validation %v", name, cv)
		}
	}
}

// upstreamTLS is the UpstreamTlsContext of the cluster named name.
func upstreamTLS(t *testing.T, clusters []*clusterv3.Cluster, name string) *tlsv3.UpstreamTlsContext {
	t.Helper()
	for _, c := range clusters {
		if c.GetName() != name {
			continue
		}
		if c.GetTransportSocket().GetName() != envoy.TLSTransportSocket {
			t.Fatalf("cluster %s: transport socket %q", name, c.GetTransportSocket().GetName())
		}
		var up tlsv3.UpstreamTlsContext
		if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(&up); err != nil {
			t.Fatal(err)
		}
		return &up
	}
	t.Fatalf("no cluster %s", name)
	return nil
}

func TestBootstrapTLSErrors(t *testing.T) {
	secure := secureConfig(t)
	plain, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files := func(mut func(*envoy.UpstreamTLS)) *envoy.UpstreamTLS {
		u := &envoy.UpstreamTLS{CertFile: "e.pem", KeyFile: "e-key.pem", CAFile: "ca.pem", ILBSAN: "ilb.example.com"}
		mut(u)
		return u
	}
	tests := []struct {
		name string
		c    *config.Config
		tls  *envoy.UpstreamTLS
		want string
	}{
		{"tls to a plaintext ILB", plain, files(func(*envoy.UpstreamTLS) {}), "serves no TLS"},
		{"no CA", secure, files(func(u *envoy.UpstreamTLS) { u.CAFile = "" }), "CA file of ILB's certificate is empty"},
		{"no client cert for mutual TLS", secure, files(func(u *envoy.UpstreamTLS) { u.CertFile, u.KeyFile = "", "" }), "ILB requires client certificates"},
		{"cert without key", secure, files(func(u *envoy.UpstreamTLS) { u.KeyFile = "" }), "give both or neither"},
		{"no SAN", secure, files(func(u *envoy.UpstreamTLS) { u.ILBSAN = "" }), "subject alternative name is empty"},
		{"bad SAN", secure, files(func(u *envoy.UpstreamTLS) { u.ILBSAN = "not a name" }), "neither a URI"},
		{"files and SDS", secure, files(func(u *envoy.UpstreamTLS) { u.SDSCA = "ROOTCA" }), "not both"},
		{"SDS without CA", secure, &envoy.UpstreamTLS{SDSCert: "default", ILBSAN: "spiffe://x/ilb"}, "validation context"},
		{"nothing", secure, &envoy.UpstreamTLS{ILBSAN: "spiffe://x/ilb"}, "no certificates"},
		{"bad SDS socket", secure, &envoy.UpstreamTLS{SDSCert: "default", SDSCA: "ROOTCA", SDSAddress: "unix:", ILBSAN: "spiffe://x/ilb"}, "want unix:/path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := envoy.Bootstrap(tt.c, "edge-us", envoy.BootstrapOptions{TLS: tt.tls})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v; want %q", err, tt.want)
			}
		})
	}
	if err := envoy.RequireTLS(secure, envoy.BootstrapOptions{}); !errors.Is(err, envoy.ErrTLSRequired) {
		t.Errorf("RequireTLS(secure, no TLS) = %v; want ErrTLSRequired", err)
	}
	if err := envoy.RequireTLS(plain, envoy.BootstrapOptions{}); err != nil {
		t.Errorf("RequireTLS(plain) = %v", err)
	}
}

// TestCheckTLS: the offline checks of a TLS transport socket, each case an
// edit of the secure example's bootstrap (which has no problem at all).
func TestCheckTLS(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*tlsv3.CommonTlsContext)
		want    string
		warning bool
	}{
		{"as rendered", func(*tlsv3.CommonTlsContext) {}, "", false},
		{"no CA", func(c *tlsv3.CommonTlsContext) {
			c.ValidationContextType = nil
		}, "no trusted CA", true},
		{"SANs without CA", func(c *tlsv3.CommonTlsContext) {
			c.GetValidationContext().TrustedCa = nil
		}, "SAN-based verification of peer certificates without trusted CA is insecure and not allowed", false},
		{"CA without SAN", func(c *tlsv3.CommonTlsContext) {
			c.GetValidationContext().MatchTypedSubjectAltNames = nil
		}, "any certificate the CA signed is accepted", true},
		{"ALPN without h2", func(c *tlsv3.CommonTlsContext) {
			c.AlpnProtocols = []string{"http/1.1"}
		}, `without "h2" on an HTTP/2 cluster`, false},
		{"SDS from an undefined cluster", func(c *tlsv3.CommonTlsContext) {
			c.TlsCertificates = nil
			c.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{envoy.SDSSecret("default", "sds-grpc")}
		}, `envoy_grpc cluster "sds-grpc" must be a static cluster`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := envoy.LoadBundle("../examples/secure/envoy-edge-us.yaml")
			if err != nil {
				t.Fatal(err)
			}
			cl := b.Bootstrap.GetStaticResources().GetClusters()[1]
			up := upstreamTLS(t, b.Bootstrap.GetStaticResources().GetClusters(), cl.GetName())
			tt.edit(up.GetCommonTlsContext())
			cl.GetTransportSocket().GetTypedConfig().Value, err = proto.Marshal(up)
			if err != nil {
				t.Fatal(err)
			}
			ps := b.Check()
			if tt.want == "" {
				if len(ps) > 0 {
					t.Errorf("problems:\n%s", join(ps))
				}
				return
			}
			if len(ps) != 1 || !strings.Contains(ps[0].Message, tt.want) || ps[0].Warning != tt.warning {
				t.Errorf("problems:\n%s\nwant one (warning %v) saying %q", join(ps), tt.warning, tt.want)
			}
		})
	}
}

// TestSecureExampleIsTheDemo keeps examples/secure/ilb.yaml the demo world:
// it may differ only by its listen addresses, its sources' listeners
// and security.
func TestSecureExampleIsTheDemo(t *testing.T) {
	demo, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ex := secureConfig(t)
	if !ex.Security.TLS.Enabled() || ex.Security.TLS.ClientCAFile == "" || len(ex.Security.Peers) != len(demo.Sources) {
		t.Errorf("security %+v: want mutual TLS and one peer rule per source", ex.Security)
	}
	ex.Security, ex.Listen = demo.Security, demo.Listen
	for i := range ex.Sources {
		ex.Sources[i].Listener = demo.Sources[i].Listener
	}
	if !reflect.DeepEqual(demo, ex) {
		t.Error("examples/secure/ilb.yaml differs from examples/demo/ilb.yaml beyond listen and security")
	}
}
