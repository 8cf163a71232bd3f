package envoy

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
)

// Problem is one finding of [Bundle.Check]. Where names the resource and
// field, e.g. `route configuration "edge-eu" route "chat" retry_policy`.
// A warning is legal Envoy configuration that is very likely wrong for
// LLM traffic; an error is configuration Envoy rejects or that breaks
// ILB.
type Problem struct {
	Where   string
	Message string
	Warning bool
}

func (p Problem) String() string {
	sev := "error"
	if p.Warning {
		sev = "warning"
	}
	return fmt.Sprintf("%s: %s: %s", sev, p.Where, p.Message)
}

// Errors is the problems that are not warnings, joined; nil if none.
func Errors(ps []Problem) error {
	var errs []error
	for _, p := range ps {
		if !p.Warning {
			errs = append(errs, errors.New(p.String()))
		}
	}
	return errors.Join(errs...)
}

// checker gathers problems and the bundle's name tables.
type checker struct {
	b        *Bundle
	problems []Problem
	clusters map[string]*clusterv3.Cluster
	static   map[string]bool // clusters of the bootstrap's static_resources
	routes   map[string]bool
	eps      map[string]bool
	// dynamicCDS: clusters may come from CDS at run time, so a reference
	// to a cluster not in the bundle cannot be judged offline.
	dynamicCDS bool
}

func (k *checker) errorf(where, format string, args ...any) {
	k.problems = append(k.problems, Problem{Where: where, Message: fmt.Sprintf(format, args...)})
}

func (k *checker) warnf(where, format string, args ...any) {
	k.problems = append(k.problems, Problem{Where: where, Message: fmt.Sprintf(format, args...), Warning: true})
}

// Check validates every resource of the bundle ([Validate]: the
// protoc-gen-validate rules recursively into every Any) and then runs
// ILB's semantic checks, Envoy's own load-time rules among them:
//
//   - references resolve: route clusters, RDS route names, EDS
//     assignments, and the gRPC clusters of ADS and ext_proc (a config
//     source's cluster must be static; gRPC needs HTTP/2);
//   - weighted clusters have a positive total that fits in 32 bits;
//   - streaming timeouts: a route timeout left unset is Envoy's 15s
//     default, which cuts long generations;
//   - retry coherence: retry_on conditions are known,
//     retriable-status-codes and the status codes go together,
//     previous_hosts has host selection attempts to work with;
//   - TLS to a cluster: SAN matchers need a trusted CA, SDS clusters are
//     static, HTTP/2 negotiates h2 (see checkTLS);
//   - ext_proc mode rules (FULL_DUPLEX_STREAMED needs trailer SEND and no
//     fail-open; http_service sends no body), the router filter is last;
//   - a connection manager running ILB's ext_proc normalises paths as
//     ILB's listener does (a warning otherwise, see [NormalizePaths]).
//
// Problems come sorted by where they are, then by message, errors and
// warnings mixed.
func (b *Bundle) Check() []Problem {
	k := &checker{b: b, clusters: map[string]*clusterv3.Cluster{}, static: map[string]bool{}, routes: map[string]bool{}, eps: map[string]bool{}}
	k.validate()
	k.index()
	if bs := b.Bootstrap; bs != nil {
		k.checkBootstrap()
	}
	for _, c := range b.allClusters() {
		k.checkCluster(c)
	}
	for _, l := range b.allListeners() {
		k.checkListener(l)
	}
	for _, rc := range b.Routes {
		k.checkRouteConfig(fmt.Sprintf("route configuration %q", rc.GetName()), rc)
	}
	// By place, then message: problems found while walking maps (whose
	// order Go randomises) come out the same on every run.
	slices.SortStableFunc(k.problems, func(a, b Problem) int {
		return cmp.Or(strings.Compare(a.Where, b.Where), strings.Compare(a.Message, b.Message))
	})
	return k.problems
}

// validate runs Validate on every resource.
func (k *checker) validate() {
	add := func(kind, name string, m proto.Message) {
		if err := Validate(m); err != nil {
			for _, e := range flatten(err) {
				k.errorf(fmt.Sprintf("%s %q", kind, name), "%v", e)
			}
		}
	}
	if bs := k.b.Bootstrap; bs != nil {
		add("bootstrap of node", bs.GetNode().GetId(), bs)
	}
	for _, c := range k.b.Clusters {
		add("cluster", c.GetName(), c)
	}
	for _, e := range k.b.Endpoints {
		add("endpoints", e.GetClusterName(), e)
	}
	for _, r := range k.b.Routes {
		add("route configuration", r.GetName(), r)
	}
	for _, l := range k.b.Listeners {
		add("listener", l.GetName(), l)
	}
}

func flatten(err error) []error {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		var out []error
		for _, e := range joined.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// index fills the name tables and reports duplicates.
func (k *checker) index() {
	for _, c := range k.b.Bootstrap.GetStaticResources().GetClusters() {
		k.static[c.GetName()] = true
	}
	for _, c := range k.b.allClusters() {
		if _, dup := k.clusters[c.GetName()]; dup {
			k.errorf(fmt.Sprintf("cluster %q", c.GetName()), "defined twice")
		}
		k.clusters[c.GetName()] = c
	}
	for _, r := range k.b.Routes {
		if k.routes[r.GetName()] {
			k.errorf(fmt.Sprintf("route configuration %q", r.GetName()), "defined twice")
		}
		k.routes[r.GetName()] = true
	}
	for _, e := range k.b.Endpoints {
		if k.eps[e.GetClusterName()] {
			k.errorf(fmt.Sprintf("endpoints %q", e.GetClusterName()), "defined twice")
		}
		k.eps[e.GetClusterName()] = true
	}
	k.dynamicCDS = k.b.Bootstrap.GetDynamicResources().GetCdsConfig() != nil && len(k.b.Clusters) == 0
	if k.b.Bootstrap == nil && len(k.b.Clusters) == 0 {
		k.dynamicCDS = true // a routes- or listeners-only file: clusters are elsewhere
	}
}

// cluster reports a reference to cluster name from where: unknown
// clusters are errors unless clusters come from CDS at run time.
func (k *checker) cluster(where, field, name string) *clusterv3.Cluster {
	c, ok := k.clusters[name]
	if !ok && !k.dynamicCDS {
		k.errorf(where, "%s: cluster %q is not defined (known: %s)", field, name, k.knownClusters())
	}
	return c
}

func (k *checker) knownClusters() string {
	names := make([]string, 0, len(k.clusters))
	for n := range k.clusters {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// grpcCluster checks the cluster behind an envoy_grpc service: it must
// exist (statically when static is set, as Envoy requires of a config
// source's cluster) and speak HTTP/2.
func (k *checker) grpcCluster(where string, gs *corev3.GrpcService, static bool) {
	eg := gs.GetEnvoyGrpc()
	if eg == nil {
		return // google_grpc: Envoy dials the target itself
	}
	name := eg.GetClusterName()
	if static && k.b.Bootstrap != nil && !k.static[name] {
		k.errorf(where, "envoy_grpc cluster %q must be a static cluster of the bootstrap: Envoy needs it before any xDS arrives", name)
		return
	}
	if _, ok := k.clusters[name]; !ok && k.b.Bootstrap == nil {
		k.warnf(where, "envoy_grpc cluster %q is not in these files: it must be a static cluster of the bootstrap (check both: --envoy bootstrap.yaml --envoy this file)", name)
		return
	}
	c := k.cluster(where, "envoy_grpc.cluster_name", name)
	if c != nil && !speaksHTTP2(c) {
		k.errorf(where, "envoy_grpc cluster %q does not speak HTTP/2, which gRPC needs: set typed_extension_protocol_options %q with explicit_http_config.http2_protocol_options", name, httpOptionsKey)
	}
}

const httpOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// speaksHTTP2 tells whether Envoy talks HTTP/2 to c's hosts.
func speaksHTTP2(c *clusterv3.Cluster) bool {
	if c.GetHttp2ProtocolOptions() != nil { //nolint:staticcheck // the deprecated field still works
		return true
	}
	a, ok := c.GetTypedExtensionProtocolOptions()[httpOptionsKey]
	if !ok {
		return false
	}
	var o upstreamhttpv3.HttpProtocolOptions
	if err := a.UnmarshalTo(&o); err != nil {
		return false
	}
	return o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil ||
		o.GetAutoConfig() != nil || o.GetUseDownstreamProtocolConfig().GetHttp2ProtocolOptions() != nil
}

// checkBootstrap: ADS and every config source that uses it.
func (k *checker) checkBootstrap() {
	dr := k.b.Bootstrap.GetDynamicResources()
	if dr == nil {
		return
	}
	where := "bootstrap dynamic_resources"
	ads := dr.GetAdsConfig()
	for i, gs := range ads.GetGrpcServices() {
		k.grpcCluster(fmt.Sprintf("%s.ads_config.grpc_services[%d]", where, i), gs, true)
	}
	for _, cs := range []struct {
		field string
		src   *corev3.ConfigSource
	}{{"cds_config", dr.GetCdsConfig()}, {"lds_config", dr.GetLdsConfig()}} {
		if cs.src.GetAds() != nil && ads == nil {
			k.errorf(where+"."+cs.field, "uses ads but dynamic_resources.ads_config is not set")
		}
	}
}

// checkCluster: EDS assignments and gRPC health checks.
func (k *checker) checkCluster(c *clusterv3.Cluster) {
	where := fmt.Sprintf("cluster %q", c.GetName())
	if c.GetType() == clusterv3.Cluster_EDS && len(k.b.Endpoints) > 0 {
		name := c.GetEdsClusterConfig().GetServiceName()
		if name == "" {
			name = c.GetName()
		}
		if !k.eps[name] {
			k.errorf(where, "EDS cluster has no endpoint assignment %q in this bundle", name)
		}
	}
	if c.GetType() == clusterv3.Cluster_EDS && c.GetEdsClusterConfig().GetEdsConfig().GetAds() != nil &&
		k.b.Bootstrap != nil && k.b.Bootstrap.GetDynamicResources().GetAdsConfig() == nil {
		k.errorf(where, "eds_config uses ads but the bootstrap has no dynamic_resources.ads_config")
	}
	k.checkTLS(c)
	for i, hc := range c.GetHealthChecks() {
		if hc.GetGrpcHealthCheck() != nil && !speaksHTTP2(c) {
			k.errorf(fmt.Sprintf("%s health_checks[%d]", where, i), "a gRPC health check needs the cluster to speak HTTP/2")
		}
	}
}
