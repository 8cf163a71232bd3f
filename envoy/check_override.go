package envoy

import (
	"maps"
	"slices"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	earlyheadermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
	overridehostv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/override_host/v3"
)

// overrideSources are what the bundle's override_host clusters read: per
// request header and per dynamic-metadata namespace, a cluster that reads
// it (for the message). Nil maps when no cluster uses override_host.
func (k *checker) overrideSources() (headers, namespaces map[string]string) {
	for _, c := range k.b.allClusters() {
		for _, p := range c.GetLoadBalancingPolicy().GetPolicies() {
			var oh overridehostv3.OverrideHost
			if p.GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(&oh) != nil {
				continue
			}
			for _, s := range oh.GetOverrideHostSources() {
				if h := s.GetHeader(); h != "" {
					if headers == nil {
						headers = map[string]string{}
					}
					headers[strings.ToLower(h)] = c.GetName()
				}
				if ns := s.GetMetadata().GetKey(); ns != "" {
					if namespaces == nil {
						namespaces = map[string]string{}
					}
					namespaces[ns] = c.GetName()
				}
			}
		}
	}
	return headers, namespaces
}

// checkOverrideHeaders: a request header an override_host cluster reads
// must be removed from client requests before any filter runs (early
// header mutation), or a client picks its own replica — only the
// endpoint picker (ILB's ext_proc) may set it.
func (k *checker) checkOverrideHeaders(where string, h *hcmv3.HttpConnectionManager) {
	headers, _ := k.overrideSources()
	if len(headers) == 0 {
		return
	}
	var removed, prefixes []string
	for _, ext := range h.GetEarlyHeaderMutationExtensions() {
		var m earlyheadermutationv3.HeaderMutation
		if ext.GetTypedConfig().UnmarshalTo(&m) != nil {
			continue
		}
		for _, mu := range m.GetMutations() {
			if r := mu.GetRemove(); r != "" {
				removed = append(removed, strings.ToLower(r))
			}
			if p := mu.GetRemoveOnMatch().GetKeyMatcher().GetPrefix(); p != "" {
				prefixes = append(prefixes, strings.ToLower(p))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(headers)) {
		if slices.Contains(removed, name) || slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		k.errorf(where+" early_header_mutation_extensions", "cluster %q picks its host from the request header %s (override_host), which this listener does not remove from client requests: a client could pin itself to a replica; remove it in an early header mutation (only the endpoint picker sets it)", headers[name], name)
	}
}

// checkOverrideMetadata: an override_host cluster reading dynamic
// metadata set by ext_proc needs the filter to accept that namespace
// (metadata_options.receiving_namespaces): Envoy drops an ext_proc
// server's metadata in namespaces not listed.
func (k *checker) checkOverrideMetadata(where string, ep *extprocv3.ExternalProcessor) {
	_, namespaces := k.overrideSources()
	accepted := ep.GetMetadataOptions().GetReceivingNamespaces().GetUntyped()
	for _, ns := range slices.Sorted(maps.Keys(namespaces)) {
		if !slices.Contains(accepted, ns) {
			k.warnf(where+" metadata_options", "cluster %q reads its host from dynamic metadata namespace %s (override_host), which this ext_proc filter does not accept from its server (receiving_namespaces): only the header source can work", namespaces[ns], ns)
		}
	}
}
