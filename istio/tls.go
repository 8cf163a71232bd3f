package istio

import (
	"errors"
	"fmt"
	"net"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
)

// What istio-agent serves every proxy over SDS: the workload's
// certificate and the mesh's root CA, on the bootstrap cluster sds-grpc.
const (
	IstioSDSCluster = "sds-grpc"
	IstioCertSecret = "default"
	IstioCASecret   = "ROOTCA"
)

// TLS makes the proxies reach ILB's ext_proc service over mutual TLS with
// their Istio workload certificates (SPIFFE IDs
// spiffe://<trust domain>/ns/<namespace>/sa/<service account>), fetched
// over SDS from istio-agent, and verify ILB's certificate against the
// mesh's root CA. The EnvoyFilter then adds its own cluster for ext_proc
// (istiod's outbound cluster would speak Istio's mTLS to a sidecar, so ILB
// would see the sidecar, not the proxy): ILB terminates TLS itself, with a
// certificate the mesh CA signed, and authorises each proxy's identity per
// source (security.peers).
type TLS struct {
	// ILBSAN is ILB's identity in its certificate, e.g.
	// spiffe://cluster.local/ns/ilb-system/sa/ilb. Required.
	ILBSAN string
	// Address is ILB's ext_proc service as the proxies reach it,
	// host:port; default DefaultExtProcHost and the port of
	// listen.extproc.
	Address string
	// SDSCluster, CertSecret and CASecret name the SDS cluster and
	// secrets; defaults IstioSDSCluster, IstioCertSecret, IstioCASecret.
	SDSCluster, CertSecret, CASecret string
}

func (t *TLS) withDefaults(c *config.Config) *TLS {
	out := *t
	if out.Address == "" {
		port := "18001"
		if _, p, err := net.SplitHostPort(c.Listen.ExtProc); err == nil {
			port = p
		}
		out.Address = net.JoinHostPort(DefaultExtProcHost, port)
	}
	if out.SDSCluster == "" {
		out.SDSCluster = IstioSDSCluster
	}
	if out.CertSecret == "" {
		out.CertSecret = IstioCertSecret
	}
	if out.CASecret == "" {
		out.CASecret = IstioCASecret
	}
	return &out
}

// cluster is the ext_proc cluster the EnvoyFilter adds: ILB's bootstrap
// ext_proc cluster (HTTP/2, health check, circuit breakers) with TLS from
// istio-agent's secrets.
func (t *TLS) cluster(c *config.Config) (*clusterv3.Cluster, error) {
	if t.ILBSAN == "" {
		return nil, errors.New("tls: ILB's identity (its SAN, e.g. spiffe://cluster.local/ns/ilb-system/sa/ilb) is required")
	}
	cl, err := envoy.ExtProcCluster(c, t.Address, &envoy.UpstreamTLS{
		SDSCert: t.CertSecret, SDSCA: t.CASecret, SDSCluster: t.SDSCluster, ILBSAN: t.ILBSAN,
	})
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	return cl, nil
}

// clusterMatch matches the clusters of ctx (for an ADD, the context only).
func clusterMatch(ctx networkingv1alpha3.EnvoyFilter_PatchContext) *networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectMatch {
	return &networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectMatch{Context: ctx}
}
