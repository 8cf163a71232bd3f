package envoysim

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/common/v3"
	leastrequestv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	overridehostv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/override_host/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
)

// Typed load balancing policies envoysim models (Cluster.load_balancing_policy).
const (
	lbPolicyPackage = "envoy.extensions.load_balancing_policies."
	supportedLBList = "envoy.load_balancing_policies.override_host (OverrideHost), " +
		"envoy.load_balancing_policies.least_request (LeastRequest), envoy.load_balancing_policies.round_robin (RoundRobin)"
)

// allowLoadBalancingPolicies adds the fields of the typed load balancing
// policies to the field policy: Cluster.load_balancing_policy with
// override_host, least_request and round_robin. Locality configuration,
// active_request_bias, full scans and metadata path indexes are refused.
func allowLoadBalancingPolicies(mod func(msg string, fields ...string)) {
	mod("envoy.config.cluster.v3.Cluster", "load_balancing_policy")
	mod("envoy.config.cluster.v3.LoadBalancingPolicy", "policies")
	mod("envoy.config.cluster.v3.LoadBalancingPolicy.Policy", "typed_extension_config")
	mod(lbPolicyPackage+"override_host.v3.OverrideHost", "override_host_sources", "selected_host_key", "fallback_policy")
	mod(lbPolicyPackage+"override_host.v3.OverrideHost.OverrideHostSource", "header", "metadata")
	mod("envoy.type.metadata.v3.MetadataKey", "key", "path")
	mod("envoy.type.metadata.v3.MetadataKey.PathSegment", "key")
	mod(lbPolicyPackage+"least_request.v3.LeastRequest", "choice_count", "slow_start_config")
	mod(lbPolicyPackage+"round_robin.v3.RoundRobin", "slow_start_config")
	mod(lbPolicyPackage+"common.v3.SlowStartConfig", "slow_start_window", "aggression", "min_weight_percent")
	// ext_proc dynamic metadata (metadata.go).
	const extProc = "envoy.extensions.filters.http.ext_proc.v3."
	mod(extProc+"ExternalProcessor", "metadata_options")
	mod(extProc+"MetadataOptions", "forwarding_namespaces", "receiving_namespaces")
	mod(extProc+"MetadataOptions.MetadataNamespaces", "untyped", "typed")
}

// unsupportedTypeHint completes the field policy's error for a type it
// does not know with what is supported in its place.
func unsupportedTypeHint(name protoreflect.FullName) string {
	if strings.HasPrefix(string(name), lbPolicyPackage) {
		return " (load balancing policies supported: " + supportedLBList + ")"
	}
	return ""
}

// overrideHostConfig is a compiled OverrideHost policy
// (source/extensions/load_balancing_policies/override_host/load_balancer.cc,
// OverrideHostLbConfig). The fallback policy is the cluster's lb,
// choiceCount and slowStart.
type overrideHostConfig struct {
	sources         []overrideSource
	selectedHostKey *metadataKey // nil: none
}

// overrideSource is one override_host_sources entry: a request header
// (lower-cased, Http::LowerCaseString) or a dynamic metadata key.
type overrideSource struct {
	header   string
	metadata *metadataKey
}

// overrideHostState is OverrideHostFilterState: the hosts listed by the
// sources at the request's first pick, and how many were consumed.
type overrideHostState struct {
	hosts []string
	next  int
}

// compileLoadBalancingPolicy configures cc from Cluster.load_balancing_policy,
// as ClusterInfoImpl::configureLbPolicies (source/common/upstream/
// upstream_impl.cc) does when load_balancing_policy is set or lb_policy is
// LOAD_BALANCING_POLICY_CONFIG: lb_policy and the legacy
// least_request_lb_config / round_robin_lb_config are then ignored, the
// partial common_lb_config fields are refused, and the first policy whose
// type Envoy has a factory for is used.
func compileLoadBalancingPolicy(cc *clusterConfig, c *clusterv3.Cluster) error {
	if c.GetLoadBalancingPolicy() == nil {
		return errors.New("cluster: field load_balancing_policy need to be set")
	}
	if cl := c.GetCommonLbConfig(); cl.GetZoneAwareLbConfig() != nil || cl.GetLocalityWeightedLbConfig() != nil || cl.GetConsistentHashingLbConfig() != nil {
		return errors.New("cluster: load_balancing_policy cannot be combined with partial fields (zone_aware_lb_config, " +
			"locality_weighted_lb_config, consistent_hashing_lb_config) of common_lb_config")
	}
	const path = "load_balancing_policy"
	pol, i, err := firstLBPolicy(c.GetLoadBalancingPolicy(), path)
	if err != nil {
		return fmt.Errorf("cluster: didn't find a registered load balancer factory implementation for cluster: '%s' %w", c.GetName(), err)
	}
	ppath := fmt.Sprintf("%s.policies[%d].typed_extension_config.typed_config", path, i)
	oh, ok := pol.(*overridehostv3.OverrideHost)
	if !ok {
		return applyLBPolicy(cc, pol, ppath)
	}
	o, err := compileOverrideHost(oh, ppath)
	if err != nil {
		return err
	}
	fb, j, err := firstLBPolicy(oh.GetFallbackPolicy(), ppath+".fallback_policy")
	if err != nil {
		return fmt.Errorf("%s: dynamic forwarding LB: didn't find a registered fallback load balancer factory %w", ppath, err)
	}
	fpath := fmt.Sprintf("%s.fallback_policy.policies[%d].typed_extension_config.typed_config", ppath, j)
	if _, nested := fb.(*overridehostv3.OverrideHost); nested {
		return fmt.Errorf("%s: override_host as the fallback of override_host is not supported by envoysim (least_request, round_robin)", fpath)
	}
	cc.override = o
	return applyLBPolicy(cc, fb, fpath)
}

// firstLBPolicy returns the first policy of p whose typed_config is a load
// balancing policy type (getAndCheckFactory by type, is_optional: other
// types are skipped, as Envoy skips a type it has no factory for). A type
// of an Envoy load balancing policy envoysim does not model is an error,
// not a skip: Envoy would use it. Without any, the error lists the names
// of the skipped policies, as Envoy's message does.
func firstLBPolicy(p *clusterv3.LoadBalancingPolicy, path string) (proto.Message, int, error) {
	var skipped []string
	for i, pol := range p.GetPolicies() {
		tc := pol.GetTypedExtensionConfig()
		m, err := tc.GetTypedConfig().UnmarshalNew()
		if err != nil {
			skipped = append(skipped, tc.GetName())
			continue
		}
		switch m.(type) {
		case *overridehostv3.OverrideHost, *leastrequestv3.LeastRequest, *roundrobinv3.RoundRobin:
			return m, i, nil
		}
		if name := m.ProtoReflect().Descriptor().FullName(); strings.HasPrefix(string(name), lbPolicyPackage) {
			return nil, i, fmt.Errorf("with names from [%s]: %s.policies[%d]: %s is not supported by envoysim (supported: %s)",
				strings.Join(skipped, ", "), path, i, name, supportedLBList)
		}
		skipped = append(skipped, tc.GetName())
	}
	return nil, 0, fmt.Errorf("with names from [%s]", strings.Join(skipped, ", "))
}

// applyLBPolicy configures the cluster's picking policy from a typed
// least_request or round_robin policy: the same LeastRequestLoadBalancer
// and RoundRobinLoadBalancer as the legacy lb_policy, with the cluster's
// common_lb_config (healthy_panic_threshold) still applying
// (least_request/config.cc, round_robin/config.cc).
func applyLBPolicy(cc *clusterConfig, pol proto.Message, path string) error {
	switch m := pol.(type) {
	case *leastrequestv3.LeastRequest:
		cc.lb = lbLeastRequest
		cc.choiceCount = defaultChoiceCount
		if n := m.GetChoiceCount(); n != nil {
			cc.choiceCount = int(n.GetValue())
		}
		cc.slowStart = compileSlowStart(legacySlowStart(m.GetSlowStartConfig()))
	case *roundrobinv3.RoundRobin:
		cc.lb = lbRoundRobin
		cc.slowStart = compileSlowStart(legacySlowStart(m.GetSlowStartConfig()))
	default:
		return fmt.Errorf("%s: %s is not supported by envoysim (supported: %s)", path, pol.ProtoReflect().Descriptor().FullName(), supportedLBList)
	}
	return nil
}

// legacySlowStart converts the typed policies' SlowStartConfig to the
// Cluster's, which has the same fields and meaning.
func legacySlowStart(s *commonv3.SlowStartConfig) *clusterv3.Cluster_SlowStartConfig {
	if s == nil {
		return nil
	}
	return &clusterv3.Cluster_SlowStartConfig{
		SlowStartWindow:  s.GetSlowStartWindow(),
		Aggression:       s.GetAggression(),
		MinWeightPercent: s.GetMinWeightPercent(),
	}
}

// compileOverrideHost is OverrideHostLbConfig::makeOverrideSources: each
// source sets exactly one of header and metadata ("Empty override source",
// "Only one override source must be set"). protoc-gen-validate has already
// required at least one source, a fallback_policy and well-formed metadata
// keys.
func compileOverrideHost(oh *overridehostv3.OverrideHost, path string) (*overrideHostConfig, error) {
	o := &overrideHostConfig{}
	var errs []error
	for i, s := range oh.GetOverrideHostSources() {
		src := overrideSource{header: strings.ToLower(s.GetHeader())}
		if s.GetMetadata() != nil {
			src.metadata = toMetadataKey(s.GetMetadata())
		}
		switch {
		case src.header == "" && src.metadata == nil:
			errs = append(errs, fmt.Errorf("%s.override_host_sources[%d]: Empty override source", path, i))
		case src.header != "" && src.metadata != nil:
			errs = append(errs, fmt.Errorf("%s.override_host_sources[%d]: Only one override source must be set", path, i))
		}
		o.sources = append(o.sources, src)
	}
	if k := oh.GetSelectedHostKey(); k != nil {
		o.selectedHostKey = toMetadataKey(k)
	}
	return o, errors.Join(errs...)
}

func toMetadataKey(k *metadatav3.MetadataKey) *metadataKey {
	mk := &metadataKey{key: k.GetKey()}
	for _, p := range k.GetPath() {
		mk.path = append(mk.path, p.GetKey())
	}
	return mk
}

// lbRequest is what a load balancer reads of the request it picks a host
// for (LoadBalancerContext::downstreamHeaders and requestStreamInfo): its
// headers and its stream info. A nil lbRequest is a pick without a
// request context.
type lbRequest struct {
	headers *headerMap
	info    *streamInfo
}

// lbRequest is the router's load balancer context for s: the request
// headers as the filters left them, and the stream's info.
func (s *stream) lbRequest() *lbRequest {
	return &lbRequest{headers: s.req, info: &s.info}
}

// grpcLBRequest is the context of an Envoy gRPC client stream's pick (the
// async client's router): its request headers carry the grpc_service's
// initial_metadata (and gRPC's own headers, which no override source could
// name usefully); info is the async stream's own stream info, shared by
// the retries of one stream.
func grpcLBRequest(md []headerValue, info *streamInfo) *lbRequest {
	h := &headerMap{}
	for _, kv := range md {
		h.add(strings.ToLower(kv.key), kv.value)
	}
	return &lbRequest{headers: h, info: info}
}

// chooseHost picks a host of c for a request. Without override_host it is
// the cluster's policy (chooseHostBase). With it, it is
// OverrideHostLoadBalancer::LoadBalancerImpl::chooseHost
// (source/extensions/load_balancing_policies/override_host/load_balancer.cc):
//   - without a request context, the fallback policy picks;
//   - at the request's first pick the override hosts are read from the
//     sources and kept in the request's filter state (getSelectedHosts);
//   - every pick, the first try and each retry, consumes the next entries
//     of that list until one names a host of the cluster (getEndpoint,
//     findHost): the entry is looked up as a string among all the
//     cluster's hosts (the cross-priority host map, keyed by the address
//     as Envoy prints it), whatever their health, exclusion or panic
//     state ("TODO: Validate that host health status did not change"), and
//     an entry naming no host is skipped; the retry host predicates
//     (previous_hosts) and host_selection_retry_max_attempts do not apply
//     to it;
//   - an empty or exhausted list leaves the pick to the fallback policy
//     (with its health, panic, slow start and retry predicate rules);
//   - with selected_host_key, the address of every host picked (override
//     or fallback) is written to the request's dynamic metadata at that key
//     (addSelectedHostKey: a Struct nested along the path, merged into the
//     namespace, so the path's first key is replaced).
func (c *cluster) chooseHost(rand func() uint64, lc *lbContext) *host {
	o := c.cfg.override
	if o == nil || lc == nil || lc.req == nil {
		return c.chooseHostBase(rand, lc)
	}
	req := lc.req
	st := req.info.overrideHosts
	if st == nil {
		st = &overrideHostState{hosts: o.selectedHosts(req)}
		req.info.overrideHosts = st
	}
	var h *host
	for h == nil && st.next < len(st.hosts) {
		h = c.hostMap[st.hosts[st.next]]
		st.next++
	}
	if h == nil {
		h = c.chooseHostBase(rand, lc)
	}
	if h != nil && o.selectedHostKey != nil && len(o.selectedHostKey.path) > 0 { // a path is required by validation, and checked by Envoy too
		req.info.mu.Lock()
		req.info.metadata.set(o.selectedHostKey.key, nestedString(o.selectedHostKey.path, hostMapKey(h.addr)))
		req.info.mu.Unlock()
	}
	return h
}

// selectedHosts is getSelectedHosts: the sources in order; a header source
// reads the header's first value, a metadata source the string at its key
// (any other kind, or nothing, is skipped); each value is split on ',',
// every part stripped of ASCII whitespace and empty parts dropped
// (absl::StrSplit with SkipWhitespace); the lists are concatenated.
func (o *overrideHostConfig) selectedHosts(req *lbRequest) []string {
	var out []string
	for _, src := range o.sources {
		var v string
		if src.header != "" {
			var ok bool
			if v, ok = req.headers.first(src.header); !ok {
				continue
			}
		} else {
			req.info.mu.Lock()
			sv, ok := req.info.metadata.value(*src.metadata).GetKind().(*structpb.Value_StringValue)
			req.info.mu.Unlock()
			if !ok {
				continue
			}
			v = sv.StringValue
		}
		for part := range strings.SplitSeq(v, ",") {
			if part = trimASCIISpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
}

// hostMapKey is the key of a host in Envoy's cross-priority host map: its
// address as Address::Instance::asString prints it ("10.0.0.5:8080",
// "[2600:4040::1]:80", the IPv6 address in its canonical text form).
func hostMapKey(addr string) string {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return ap.String()
	}
	return addr
}

// buildHostMap is PrioritySetImpl's cross-priority host map of a built
// cluster: every host, keyed by hostMapKey. It is only built for the
// override_host policy, its only reader.
func buildHostMap(hosts []*host) map[string]*host {
	m := make(map[string]*host, len(hosts))
	for _, h := range hosts {
		m[hostMapKey(h.addr)] = h
	}
	return m
}
