package envoysim

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
)

// httpProtocolOptionsKey is the typed_extension_protocol_options key of the
// upstream HTTP protocol options.
const httpProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// Cluster defaults (api/envoy/config/cluster/v3/cluster.proto).
const (
	defaultConnectTimeout    = 5 * time.Second
	defaultDNSRefreshRate    = 5 * time.Second
	defaultPanicThreshold    = 50.0
	defaultChoiceCount       = 2
	defaultOverprovisioning  = 140
	maxDNSResolutionWaitTime = 5 * time.Second
)

// clusterKind is the cluster discovery type.
type clusterKind int

const (
	kindStatic clusterKind = iota
	kindStrictDNS
	kindLogicalDNS
	kindEDS
)

// lbKind is the load balancing policy.
type lbKind int

const (
	lbRoundRobin lbKind = iota
	lbLeastRequest
)

// clusterConfig is a compiled Cluster, without its endpoints when they come
// from EDS or DNS.
type clusterConfig struct {
	name           string
	kind           clusterKind
	serviceName    string // EDS resource name
	lb             lbKind
	choiceCount    int
	panicThreshold float64 // percent; 0 disables panic mode
	http2          bool
	tls            *upstreamTLS // transport_socket TLS; nil: plaintext
	connectTimeout time.Duration
	lookupFamily   clusterv3.Cluster_DnsLookupFamily
	dnsRefresh     time.Duration
	endpoints      *endpointSet // load_assignment (STATIC, STRICT_DNS, LOGICAL_DNS)
	proto          *clusterv3.Cluster

	hc                    *healthCheckConfig // nil without health_checks
	outlier               *outlierConfig     // nil without outlier_detection
	cb                    circuitBreakers
	slowStart             *slowStartConfig    // nil without slow start
	override              *overrideHostConfig // load_balancing_policy override_host; nil without
	warmHosts             bool                // common_lb_config.ignore_new_hosts_until_first_hc
	ignoreHealthOnRemoval bool                // ignore_health_on_host_removal
}

// endpointSpec is one LbEndpoint before DNS resolution.
type endpointSpec struct {
	address string
	port    uint32
	weight  uint32
	health  corev3.HealthStatus
}

// endpointSet is a compiled ClusterLoadAssignment (priority 0 only).
type endpointSet struct {
	endpoints        []endpointSpec
	overprovisioning uint32
}

// compileCluster checks and compiles c.
func compileCluster(c *clusterv3.Cluster) (*clusterConfig, error) {
	cc := &clusterConfig{
		name:           c.GetName(),
		choiceCount:    defaultChoiceCount,
		panicThreshold: defaultPanicThreshold,
		connectTimeout: defaultConnectTimeout,
		lookupFamily:   c.GetDnsLookupFamily(),
		dnsRefresh:     defaultDNSRefreshRate,
		proto:          proto.Clone(c).(*clusterv3.Cluster),
	}
	var errs []error
	switch c.GetType() {
	case clusterv3.Cluster_STATIC:
		cc.kind = kindStatic
	case clusterv3.Cluster_STRICT_DNS:
		cc.kind = kindStrictDNS
	case clusterv3.Cluster_LOGICAL_DNS:
		cc.kind = kindLogicalDNS
	case clusterv3.Cluster_EDS:
		cc.kind = kindEDS
		cc.serviceName = c.GetEdsClusterConfig().GetServiceName()
		if cc.serviceName == "" {
			cc.serviceName = c.GetName()
		}
		if c.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
			errs = append(errs, errors.New("eds_cluster_config.eds_config: only ads config sources are supported by envoysim"))
		}
	default:
		errs = append(errs, fmt.Errorf("type %s is not supported by envoysim (STATIC, STRICT_DNS, LOGICAL_DNS, EDS)", c.GetType()))
	}
	switch lbp := c.GetLbPolicy(); {
	case c.GetLoadBalancingPolicy() != nil || lbp == clusterv3.Cluster_LOAD_BALANCING_POLICY_CONFIG:
		// load_balancing_policy replaces lb_policy (override_host.go).
		if err := compileLoadBalancingPolicy(cc, c); err != nil {
			errs = append(errs, err)
		}
	case lbp == clusterv3.Cluster_ROUND_ROBIN:
		cc.lb = lbRoundRobin
		cc.slowStart = compileSlowStart(c.GetRoundRobinLbConfig().GetSlowStartConfig())
	case lbp == clusterv3.Cluster_LEAST_REQUEST:
		cc.lb = lbLeastRequest
		if n := c.GetLeastRequestLbConfig().GetChoiceCount(); n != nil {
			cc.choiceCount = int(n.GetValue())
		}
		cc.slowStart = compileSlowStart(c.GetLeastRequestLbConfig().GetSlowStartConfig())
	default:
		errs = append(errs, fmt.Errorf("lb_policy %s is not supported by envoysim (ROUND_ROBIN, LEAST_REQUEST, or load_balancing_policy: %s)", c.GetLbPolicy(), supportedLBList))
	}
	if t := c.GetCommonLbConfig().GetHealthyPanicThreshold(); t != nil {
		cc.panicThreshold = t.GetValue()
	}
	cc.warmHosts = c.GetCommonLbConfig().GetIgnoreNewHostsUntilFirstHc()
	cc.ignoreHealthOnRemoval = c.GetIgnoreHealthOnHostRemoval()
	cc.cb = compileCircuitBreakers(c.GetCircuitBreakers())
	if c.GetConnectTimeout() != nil {
		cc.connectTimeout = c.GetConnectTimeout().AsDuration()
	}
	//nolint:staticcheck // deprecated dns_refresh_rate is still honoured by Envoy
	if r := c.GetDnsRefreshRate(); r != nil {
		cc.dnsRefresh = r.AsDuration()
	}
	//nolint:staticcheck // deprecated http2_protocol_options still selects HTTP/2 in Envoy
	if c.GetHttp2ProtocolOptions() != nil {
		cc.http2 = true // deprecated Cluster.http2_protocol_options still selects HTTP/2
	}
	for key, a := range c.GetTypedExtensionProtocolOptions() {
		if key != httpProtocolOptionsKey {
			errs = append(errs, fmt.Errorf("typed_extension_protocol_options[%s]: not supported by envoysim", key))
			continue
		}
		var opts upstreamhttpv3.HttpProtocolOptions
		if err := a.UnmarshalTo(&opts); err != nil {
			errs = append(errs, fmt.Errorf("typed_extension_protocol_options[%s]: %w", key, err))
			continue
		}
		cc.http2 = opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil
	}
	if u, err := compileTransportSocket(c.GetTransportSocket(), cc.http2); err != nil {
		errs = append(errs, err)
	} else {
		cc.tls = u
	}
	if c.GetLoadAssignment() != nil {
		eps, err := compileEndpoints(c.GetLoadAssignment())
		if err != nil {
			errs = append(errs, fmt.Errorf("load_assignment: %w", err))
		}
		cc.endpoints = eps
	}
	errs = append(errs, cc.checkEndpoints()...)
	if err := compileHealthChecks(cc, c.GetHealthChecks()); err != nil {
		errs = append(errs, err)
	}
	if err := compileOutlier(cc, c.GetOutlierDetection()); err != nil {
		errs = append(errs, err)
	}
	return cc, errors.Join(errs...)
}

// checkEndpoints applies the per-type rules of the static endpoint list
// (source/extensions/clusters/*): STATIC endpoints must be IP literals,
// LOGICAL_DNS needs exactly one endpoint, EDS takes none inline.
func (cc *clusterConfig) checkEndpoints() []error {
	var errs []error
	switch cc.kind {
	case kindStatic:
		for _, ep := range cc.endpointList() {
			if _, err := netip.ParseAddr(ep.address); err != nil {
				errs = append(errs, fmt.Errorf("malformed IP address: %s. Consider setting resolver_name or setting cluster type to 'STRICT_DNS' or 'LOGICAL_DNS'", ep.address))
			}
		}
	case kindLogicalDNS:
		if len(cc.endpointList()) != 1 {
			errs = append(errs, errors.New("LOGICAL_DNS clusters must have a single locality_lb_endpoint and a single lb_endpoint"))
		}
	case kindEDS:
		if len(cc.endpointList()) != 0 {
			errs = append(errs, errors.New("load_assignment of an EDS cluster is not supported by envoysim"))
		}
	}
	return errs
}

func (cc *clusterConfig) endpointList() []endpointSpec {
	if cc.endpoints == nil {
		return nil
	}
	return cc.endpoints.endpoints
}

// compileEndpoints compiles a ClusterLoadAssignment. Only priority 0 is
// modelled.
func compileEndpoints(cla *endpointv3.ClusterLoadAssignment) (*endpointSet, error) {
	set := &endpointSet{overprovisioning: defaultOverprovisioning}
	if f := cla.GetPolicy().GetOverprovisioningFactor(); f != nil {
		set.overprovisioning = f.GetValue()
	}
	var errs []error
	for i, loc := range cla.GetEndpoints() {
		if loc.GetPriority() != 0 {
			errs = append(errs, fmt.Errorf("endpoints[%d].priority %d: priorities other than 0 are not supported by envoysim", i, loc.GetPriority()))
			continue
		}
		for j, lbe := range loc.GetLbEndpoints() {
			sa := lbe.GetEndpoint().GetAddress().GetSocketAddress()
			if sa == nil {
				errs = append(errs, fmt.Errorf("endpoints[%d].lb_endpoints[%d]: a socket_address is required", i, j))
				continue
			}
			if sa.GetProtocol() != corev3.SocketAddress_TCP {
				errs = append(errs, fmt.Errorf("endpoints[%d].lb_endpoints[%d]: only TCP addresses are supported", i, j))
				continue
			}
			weight := uint32(1)
			if w := lbe.GetLoadBalancingWeight(); w != nil {
				weight = w.GetValue()
			}
			set.endpoints = append(set.endpoints, endpointSpec{
				address: sa.GetAddress(),
				port:    sa.GetPortValue(),
				weight:  weight,
				health:  lbe.GetHealthStatus(),
			})
		}
	}
	return set, errors.Join(errs...)
}

func joinHostPort(host string, port uint32) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}
