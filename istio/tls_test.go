package istio

import (
	"encoding/json"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
)

const testILBSAN = "spiffe://cluster.local/ns/ilb-system/sa/ilb"

// secureExample is the Istio example configuration with ILB serving
// mutual TLS from the mesh CA's certificate (istio-agent's output files).
func secureExample(t *testing.T) *config.Config {
	t.Helper()
	c := loadConfig(t, exampleConfig)
	c.Security.TLS = config.TLS{
		CertFile: "/etc/istio-output-certs/cert-chain.pem", KeyFile: "/etc/istio-output-certs/key.pem",
		ClientCAFile: "/etc/istio-output-certs/root-cert.pem",
	}
	return c
}

// checkTLSCluster: ext_proc's added cluster presents the workload
// certificate (SDS "default"), trusts the mesh root (SDS "ROOTCA"), both
// from istio-agent's sds-grpc, accepts only ILB's SAN and speaks h2 to
// ILB's service.
func checkTLSCluster(t *testing.T, name string, cl *clusterv3.Cluster) {
	t.Helper()
	var up tlsv3.UpstreamTlsContext
	if cl.GetTransportSocket().GetName() != envoy.TLSTransportSocket || cl.GetTransportSocket().GetTypedConfig().UnmarshalTo(&up) != nil {
		t.Fatalf("%s: transport socket %v", name, cl.GetTransportSocket())
	}
	ctx := up.GetCommonTlsContext()
	cv := ctx.GetCombinedValidationContext()
	sdsCluster := func(s *tlsv3.SdsSecretConfig) string {
		return s.GetSdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName()
	}
	certs := ctx.GetTlsCertificateSdsSecretConfigs()
	switch {
	case len(certs) != 1 || certs[0].GetName() != IstioCertSecret || sdsCluster(certs[0]) != IstioSDSCluster:
		t.Errorf("%s: certificate secrets %v; want %q from %s", name, certs, IstioCertSecret, IstioSDSCluster)
	case cv.GetValidationContextSdsSecretConfig().GetName() != IstioCASecret || sdsCluster(cv.GetValidationContextSdsSecretConfig()) != IstioSDSCluster:
		t.Errorf("%s: validation secret %v; want %q", name, cv.GetValidationContextSdsSecretConfig(), IstioCASecret)
	case len(cv.GetDefaultValidationContext().GetMatchTypedSubjectAltNames()) != 1 ||
		cv.GetDefaultValidationContext().GetMatchTypedSubjectAltNames()[0].GetMatcher().GetExact() != testILBSAN:
		t.Errorf("%s: SAN matchers %v; want ILB's %s", name, cv.GetDefaultValidationContext().GetMatchTypedSubjectAltNames(), testILBSAN)
	case len(ctx.GetAlpnProtocols()) != 1 || ctx.GetAlpnProtocols()[0] != envoy.ALPNH2 || up.GetSni() != DefaultExtProcHost:
		t.Errorf("%s: alpn %v sni %q", name, ctx.GetAlpnProtocols(), up.GetSni())
	}
	sa := cl.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if sa.GetAddress() != DefaultExtProcHost || sa.GetPortValue() != 18001 || cl.GetType() != clusterv3.Cluster_STRICT_DNS {
		t.Errorf("%s: endpoint %v type %v", name, sa, cl.GetType())
	}
}

// TestTLS renders every example with TLS: each context gets the added
// cluster, ext_proc uses it, the rest equals ILB's own listener, and the
// objects pass the CRD schemas.
func TestTLS(t *testing.T) {
	c := secureExample(t)
	w := demandWeights(t, c)
	specs := crdSpecs(t)
	for _, ex := range examples {
		t.Run(ex.file, func(t *testing.T) {
			o := ex.opts
			o.TLS = &TLS{ILBSAN: testILBSAN}
			out, err := Render(c, w, o)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range decodeAll(t, out) {
				var v any
				if err := json.Unmarshal(d.Spec, &v); err != nil {
					t.Fatal(err)
				}
				for _, e := range checkSchema(d.Kind+" "+d.Metadata.Name+": spec", v, specs[d.APIVersion+" "+d.Kind]) {
					t.Error(e)
				}
				ef, ok := d.spec.(*networkingv1alpha3.EnvoyFilter)
				if !ok {
					continue
				}
				checkEnvoyFilter(t, c, w, o.Sources[0], c.Envoy.ExtProcCluster, ef)
				clusters := 0
				for _, p := range ef.GetConfigPatches() {
					if p.GetApplyTo() == networkingv1alpha3.EnvoyFilter_CLUSTER && p.GetMatch().GetCluster() == nil {
						clusters++
					}
				}
				if clusters == 0 {
					t.Error("no CLUSTER patch")
				}
			}
		})
	}
}

func TestTLSErrors(t *testing.T) {
	secure := secureExample(t)
	plain := loadConfig(t, exampleConfig)
	base := examples[0].opts
	tests := []struct {
		name string
		c    *config.Config
		edit func(o *Options)
		want string
	}{
		{"no SAN", secure, func(o *Options) { o.TLS = &TLS{} }, "ILB's identity"},
		{"ILB serves no TLS", plain, func(o *Options) { o.TLS = &TLS{ILBSAN: testILBSAN} }, "serves no TLS"},
		{"istiod's cluster too", secure, func(o *Options) {
			o.TLS, o.ExtProcCluster = &TLS{ILBSAN: testILBSAN}, "outbound|18001||ilb.x.svc.cluster.local"
		}, "leave the cluster unset"},
		{"bad address", secure, func(o *Options) { o.TLS = &TLS{ILBSAN: testILBSAN, Address: "ilb"} }, "extproc address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base
			tt.edit(&o)
			_, err := Render(tt.c, demandWeights(t, tt.c), o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v; want %q", err, tt.want)
			}
		})
	}
}
