package envoy

import (
	"fmt"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// checkTLS reviews a cluster's TLS transport socket, as Envoy loads it
// (source/common/tls/cert_validator/default_validator.cc) and as ILB's
// clients need it:
//
//   - subject alt name matchers without a trusted CA: Envoy refuses the
//     cluster ("SAN-based verification of peer certificates without
//     trusted CA is insecure and not allowed");
//   - no validation context at all: the server's certificate is not
//     verified, anyone on the path can pose as it (warning);
//   - a trusted CA without SAN matchers: any certificate the CA signed is
//     accepted (warning);
//   - an SDS secret whose config source's gRPC cluster is not a static
//     cluster of the bootstrap (error, as for ADS);
//   - on a cluster speaking HTTP/2, an ALPN list without h2 (error: gRPC
//     over TLS negotiates h2).
func (k *checker) checkTLS(c *clusterv3.Cluster) {
	ts := c.GetTransportSocket()
	if ts == nil || ts.GetTypedConfig() == nil {
		return
	}
	var up tlsv3.UpstreamTlsContext
	if ts.GetTypedConfig().MessageIs(&up) {
		if err := ts.GetTypedConfig().UnmarshalTo(&up); err != nil {
			return // reported by Validate
		}
	} else {
		return // another transport socket (raw_buffer, ...)
	}
	where := fmt.Sprintf("cluster %q transport_socket", c.GetName())
	ctx := up.GetCommonTlsContext()
	var vc *tlsv3.CertificateValidationContext
	sdsCA := false
	switch v := ctx.GetValidationContextType().(type) {
	case *tlsv3.CommonTlsContext_ValidationContext:
		vc = v.ValidationContext
	case *tlsv3.CommonTlsContext_CombinedValidationContext:
		vc = v.CombinedValidationContext.GetDefaultValidationContext()
		sds := v.CombinedValidationContext.GetValidationContextSdsSecretConfig()
		sdsCA = sds != nil
		k.sdsSecret(where+" combined_validation_context", sds)
	case *tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig:
		sdsCA = true
		k.sdsSecret(where+" validation_context_sds_secret_config", v.ValidationContextSdsSecretConfig)
	}
	for i, s := range ctx.GetTlsCertificateSdsSecretConfigs() {
		k.sdsSecret(fmt.Sprintf("%s tls_certificate_sds_secret_configs[%d]", where, i), s)
	}
	//nolint:staticcheck // the deprecated untyped matchers still apply
	sans := len(vc.GetMatchTypedSubjectAltNames()) + len(vc.GetMatchSubjectAltNames())
	ca := vc.GetTrustedCa() != nil || vc.GetSystemRootCerts() != nil || vc.GetCaCertificateProviderInstance() != nil || sdsCA
	switch {
	case sans > 0 && !ca:
		k.errorf(where, "subject alt name matchers without a trusted CA: Envoy refuses them (SAN-based verification of peer certificates without trusted CA is insecure and not allowed)")
	case !ca:
		k.warnf(where, "no trusted CA (validation_context.trusted_ca): the server's certificate is not verified, anyone on the path can pose as it")
	case sans == 0 && len(vc.GetVerifyCertificateSpki())+len(vc.GetVerifyCertificateHash()) == 0:
		k.warnf(where, "no match_typed_subject_alt_names: any certificate the CA signed is accepted as the server's (name ILB's SPIFFE ID or DNS name)")
	}
	if alpn := ctx.GetAlpnProtocols(); len(alpn) > 0 && speaksHTTP2(c) && !slices.Contains(alpn, ALPNH2) {
		k.errorf(where, "alpn_protocols %v without %q on an HTTP/2 cluster: the server negotiates another protocol than the one Envoy speaks", alpn, ALPNH2)
	}
}

// sdsSecret checks the gRPC cluster of an SDS secret's config source:
// Envoy needs it before any xDS arrives, so it must be static.
func (k *checker) sdsSecret(where string, s *tlsv3.SdsSecretConfig) {
	for i, gs := range s.GetSdsConfig().GetApiConfigSource().GetGrpcServices() {
		k.grpcCluster(fmt.Sprintf("%s sds_config.api_config_source.grpc_services[%d]", where, i), gs, true)
	}
}
