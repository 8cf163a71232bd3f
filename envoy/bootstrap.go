package envoy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"sigs.k8s.io/yaml"

	"github.com/ilbproject/ilb/config"
)

// BootstrapOptions say how an Envoy of a source reaches ILB.
type BootstrapOptions struct {
	// NodeID is the Envoy's node.id; default "<source>-envoy".
	NodeID string
	// XDS and ExtProc are ILB's addresses as host:port seen from Envoy,
	// default the configuration's listen addresses; a comma-separated
	// list names every replica of an ILB that runs as several (ha:), and
	// each becomes an endpoint of the cluster.
	XDS, ExtProc string
	// Admin is Envoy's admin address; default 127.0.0.1:9901. "" after
	// defaults means no admin listener.
	Admin string
	// Listener, when set, makes a sidecar bootstrap: this listener is
	// static (the pod owns its lifecycle and address) and only clusters,
	// endpoints and routes come from ILB; LDS is off. Nil: a gateway
	// whose listener comes over LDS too.
	Listener *listenerv3.Listener
	// TLS, when set, makes both clusters to ILB (xDS and ext_proc) speak
	// TLS with a client certificate; refused when the configuration
	// serves no TLS. See [RequireTLS] for the converse.
	TLS *UpstreamTLS
}

// Bootstrap renders the bootstrap of an Envoy of source: node.cluster is
// the source (it keys the snapshot ILB serves), every resource comes over
// one ADS stream to ILB, and two static HTTP/2 clusters reach ILB's xDS
// and ext_proc services. The result passes [Validate].
func Bootstrap(c *config.Config, source string, o BootstrapOptions) (*bootstrapv3.Bootstrap, error) {
	if _, ok := c.Source(source); !ok {
		return nil, fmt.Errorf("bootstrap: unknown source %q", source)
	}
	if o.NodeID == "" {
		o.NodeID = source + "-envoy"
	}
	if o.XDS == "" {
		o.XDS = c.Listen.XDS
	}
	if o.ExtProc == "" {
		o.ExtProc = c.Listen.ExtProc
	}
	xds, err := grpcCluster(c.Envoy.XDSCluster, o.XDS)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: xds address: %w", err)
	}
	// Several xDS replicas are health checked over gRPC like the ext_proc
	// ones: the ADS stream goes to a replica that answers.
	if replicas(xds) > 1 {
		xds.HealthChecks = ilbHealthCheck(c, replicas(xds))
		xds.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{}}
	}
	ep, err := ExtProcCluster(c, o.ExtProc, nil)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	extra, err := secure(c, o, xds, ep)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	b := &bootstrapv3.Bootstrap{
		Node: &corev3.Node{Id: o.NodeID, Cluster: source},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{
				ApiType:             adsAPIType(c.Envoy.XDSAPIType),
				TransportApiVersion: corev3.ApiVersion_V3,
				GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{
						ClusterName: c.Envoy.XDSCluster,
						// A stream that ends (its ILB replica gone) is opened
						// again to another replica within a second, not after
						// Envoy's default 500 ms to 30 s back-off.
						RetryPolicy: &corev3.RetryPolicy{RetryBackOff: &corev3.BackoffStrategy{
							BaseInterval: durationpb.New(adsRetryBase), MaxInterval: durationpb.New(adsRetryMax),
						}},
					},
				}}},
			},
			CdsConfig: ads(),
			LdsConfig: ads(),
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: append([]*clusterv3.Cluster{xds, ep}, extra...)},
	}
	if o.Listener != nil {
		b.DynamicResources.LdsConfig = nil
		b.StaticResources.Listeners = []*listenerv3.Listener{o.Listener}
	}
	if o.Admin != "" {
		host, port, err := splitPort(o.Admin)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: admin address: %w", err)
		}
		b.Admin = &bootstrapv3.Admin{Address: socket(host, port)}
	}
	if err := Validate(b); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	return b, nil
}

// ErrTLSRequired is the error when the configuration serves TLS but no
// TLS settings were given for the Envoy.
var ErrTLSRequired = errors.New("the configuration serves TLS (security.tls.cert_file is set): give the Envoy's TLS settings (ilb envoy-config --tls-cert, --tls-key, --tls-ca and --ilb-san, or --tls-sds-cert, --tls-sds-ca, --sds-address and --ilb-san)")

// RequireTLS reports ErrTLSRequired when c serves TLS and o has no TLS
// settings: such a bootstrap renders, but its Envoy fails every handshake
// with ILB. [Bootstrap] itself renders it (ilb validate checks the rest of
// a bootstrap without certificates); ilb envoy-config calls this first.
func RequireTLS(c *config.Config, o BootstrapOptions) error {
	if o.TLS == nil && c.Security.TLS.Enabled() {
		return ErrTLSRequired
	}
	return nil
}

// secure puts the TLS transport socket on the clusters to ILB when the
// configuration serves TLS, and returns the SDS cluster to add, if any.
func secure(c *config.Config, o BootstrapOptions, clusters ...*clusterv3.Cluster) ([]*clusterv3.Cluster, error) {
	if o.TLS == nil {
		return nil, nil // RequireTLS tells a caller that must not render plaintext
	}
	if err := o.TLS.check(c.Security); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	for _, cl := range clusters {
		sa := cl.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		ts, err := o.TLS.transportSocket(sa.GetAddress())
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		cl.TransportSocket = ts
	}
	sds, err := o.TLS.sdsClusterResource()
	if err != nil || sds == nil {
		return nil, err
	}
	return []*clusterv3.Cluster{sds}, nil
}

// ExtProcCluster is the cluster c.Envoy.ExtProcCluster through which
// Envoy reaches ILB's ext_proc service at addr (host:port): HTTP/2,
// circuit breakers of c.Envoy.ExtProcMaxStreams, a gRPC health check and
// a panic threshold of 0; with t, TLS to ILB (t is checked against
// c.Security as [Bootstrap] checks it). The bootstrap has it as a static
// cluster; the Istio mode adds it to the proxies with an EnvoyFilter.
func ExtProcCluster(c *config.Config, addr string, t *UpstreamTLS) (*clusterv3.Cluster, error) {
	ep, err := grpcCluster(c.Envoy.ExtProcCluster, addr)
	if err != nil {
		return nil, fmt.Errorf("extproc address: %w", err)
	}
	// ext_proc holds one gRPC stream per in-flight request: Envoy's
	// default of 1024 concurrent requests per cluster would turn load
	// above it into ext_proc failures (and fallback routing).
	n := c.Envoy.ExtProcMaxStreams
	ep.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
		MaxConnections:     wrapperspb.UInt32(n),
		MaxPendingRequests: wrapperspb.UInt32(n),
		MaxRequests:        wrapperspb.UInt32(n),
	}}}
	// A gRPC health check (ILB serves grpc.health.v1): an ext_proc that
	// stopped answering is taken out before requests time out on it. With
	// a panic threshold of 0, a cluster whose ILBs are all unhealthy has
	// no host (not every host, as in Envoy's 50% panic mode), so the
	// filter fails at once and the source's fail mode applies.
	ep.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{}}
	ep.HealthChecks = ilbHealthCheck(c, replicas(ep))
	if t != nil {
		if err := t.check(c.Security); err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		host, _, _ := splitPort(addr)
		if ep.TransportSocket, err = t.transportSocket(host); err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
	}
	return ep, nil
}

// The ADS stream's reconnection back-off (envoy_grpc.retry_policy).
const (
	adsRetryBase = 100 * time.Millisecond
	adsRetryMax  = time.Second
)

// ilbHealthCheck is the gRPC health check of a cluster to ILB of n
// replicas (none with envoy.health_check.disabled). One replica is checked
// as envoy.health_check says (an ILB missing a check under load has no
// other to hand over to, so it is not taken out quickly). Several are
// checked every second, and one that fails a check (refuses the
// connection, or does not answer SERVING within the timeout) is out: Envoy
// leaves a dead replica within about a second, and the ext_proc filter's
// stream retry (grpc_service.retry_policy) covers the requests of that
// second.
func ilbHealthCheck(c *config.Config, n int) []*corev3.HealthCheck {
	hc := c.Envoy.HealthCheck
	if hc.Disabled {
		return nil
	}
	// An unhealthy ILB is probed every ilbRecheckInterval, whatever the
	// interval: with a panic threshold of 0 a cluster whose ILBs are all
	// unhealthy has no host, so until the next probe finds ILB back, its
	// source's fail mode applies (at the 5 s interval, fail-closed
	// requests went on failing for up to 5 s after ILB served again).
	if n <= 1 {
		return []*corev3.HealthCheck{{
			Timeout:            durationpb.New(hc.Timeout.Std()),
			Interval:           durationpb.New(hc.Interval.Std()),
			UnhealthyInterval:  durationpb.New(min(ilbRecheckInterval, hc.Interval.Std())),
			UnhealthyThreshold: wrapperspb.UInt32(hc.UnhealthyThreshold),
			HealthyThreshold:   wrapperspb.UInt32(hc.HealthyThreshold),
			HealthChecker:      &corev3.HealthCheck_GrpcHealthCheck_{GrpcHealthCheck: &corev3.HealthCheck_GrpcHealthCheck{}},
		}}
	}
	return []*corev3.HealthCheck{{
		Timeout:            durationpb.New(min(hc.Timeout.Std(), ilbCheckInterval)),
		Interval:           durationpb.New(ilbCheckInterval),
		NoTrafficInterval:  durationpb.New(ilbCheckInterval),
		UnhealthyInterval:  durationpb.New(ilbRecheckInterval),
		UnhealthyThreshold: wrapperspb.UInt32(1),
		HealthyThreshold:   wrapperspb.UInt32(hc.HealthyThreshold),
		HealthChecker:      &corev3.HealthCheck_GrpcHealthCheck_{GrpcHealthCheck: &corev3.HealthCheck_GrpcHealthCheck{}},
	}}
}

// ilbRecheckInterval is how often Envoy probes an ILB replica it holds
// unhealthy: what bounds the gap between ILB serving again and Envoy
// sending it requests.
const ilbRecheckInterval = 500 * time.Millisecond

// ilbCheckInterval is how often Envoy checks each of several ILB replicas.
const ilbCheckInterval = time.Second

// replicas is how many endpoints a cluster to ILB lists.
func replicas(cl *clusterv3.Cluster) int {
	n := 0
	for _, l := range cl.GetLoadAssignment().GetEndpoints() {
		n += len(l.GetLbEndpoints())
	}
	return n
}

func ads() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}

// grpcCluster is a static (IP) or STRICT_DNS (name) cluster speaking
// HTTP/2, as gRPC needs.
func grpcCluster(name, addrs string) (*clusterv3.Cluster, error) {
	typ := clusterv3.Cluster_STATIC
	var eps []*endpointv3.LbEndpoint
	var errs []error
	for addr := range strings.SplitSeq(addrs, ",") {
		host, port, err := splitPort(strings.TrimSpace(addr))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if net.ParseIP(host) == nil {
			typ = clusterv3.Cluster_STRICT_DNS
		}
		eps = append(eps, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: socket(host, port)}},
		})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	h2, err := anypb.New(&upstreamhttpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
		}},
	})
	if err != nil {
		return nil, err
	}
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: typ},
		ConnectTimeout:       durationpb.New(time.Second),
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": h2,
		},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints:   []*endpointv3.LocalityLbEndpoints{{LbEndpoints: eps}},
		},
	}, nil
}

func splitPort(addr string) (string, uint32, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q: %w", addr, err)
	}
	p, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || p == 0 {
		return "", 0, fmt.Errorf("%q: want a port in 1..65535", addr)
	}
	return host, uint32(p), nil
}

func socket(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// MarshalYAML renders any Envoy message as YAML in Envoy's JSON mapping,
// keys sorted: what `envoy -c FILE` reads.
func MarshalYAML(m proto.Message) ([]byte, error) {
	js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, js); err != nil {
		return nil, err
	}
	return yaml.JSONToYAML(buf.Bytes())
}

// adsAPIType is ads_config.api_type for envoy.xds_api_type: DELTA_GRPC
// (incremental) or GRPC (state of the world, the default).
func adsAPIType(t string) corev3.ApiConfigSource_ApiType {
	if t == "DELTA_GRPC" {
		return corev3.ApiConfigSource_DELTA_GRPC
	}
	return corev3.ApiConfigSource_GRPC
}
