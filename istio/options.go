package istio

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"

	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	"github.com/ilbproject/ilb/config"
)

// Defaults of Options.
const (
	// DefaultNamespace holds the VirtualServices (and DestinationRules of
	// hosts that name no namespace).
	DefaultNamespace = "ilb-system"
	// DefaultProxyNamespace holds the EnvoyFilters: Istio's default root
	// namespace, from which an EnvoyFilter applies to the workloads it
	// selects in every namespace.
	DefaultProxyNamespace = "istio-system"
	// DefaultExtProcHost is the Kubernetes service of ILB's ext_proc
	// server that the default ExtProcCluster names.
	DefaultExtProcHost = "ilb.ilb-system.svc.cluster.local"
	// SourceLabel is the pod label of the default workload selector: the
	// proxies of source S are the pods labelled ilb/source=S.
	SourceLabel = "ilb/source"
	// Mesh is the gateway name that binds a VirtualService to sidecars.
	Mesh = "mesh"
)

// Options say where the rendered objects go and which proxies they
// configure. The zero value renders every source with routing "cluster"
// with the defaults below, except Hosts, which are required.
type Options struct {
	// Namespace holds the VirtualServices. DestinationRules go to the
	// namespace of their service (host name.namespace.svc[.domain]), where
	// Istio looks them up for every client, else here. Default
	// DefaultNamespace.
	Namespace string
	// ProxyNamespace holds the EnvoyFilters. Istio applies an EnvoyFilter
	// to the workloads it selects in its own namespace, or in every
	// namespace when it is in the mesh's root namespace. Default
	// DefaultProxyNamespace.
	ProxyNamespace string
	// ExtProcCluster is the Envoy cluster through which the proxies reach
	// ILB's ext_proc service, as istiod names it: outbound|PORT||HOST.
	// Its Service port must be named grpc-* (or have appProtocol grpc) so
	// that the cluster speaks HTTP/2. Default
	// outbound|<port of listen.extproc>||DefaultExtProcHost.
	ExtProcCluster string
	// TLS, when set, makes the proxies reach ILB's ext_proc over mutual
	// TLS with their Istio workload certificates: the EnvoyFilter adds
	// the cluster c.Envoy.ExtProcCluster (see [TLS]) and ext_proc uses
	// it, so ExtProcCluster must be empty. Needs security.tls in the
	// configuration.
	TLS *TLS
	// Sources are the names of the sources to render; each must have
	// routing "cluster". Empty: every source with routing "cluster".
	Sources []string
	// Placement applies to every rendered source; PerSource overrides it
	// per source name, field by field (a zero field keeps the shared one).
	Placement
	PerSource map[string]Placement
}

// Placement says which proxies and hosts a source's objects apply to.
type Placement struct {
	// Hosts are the names clients call the inference service by: the
	// VirtualService's hosts. At least one is required; "*" only with a
	// gateway.
	Hosts []string
	// Gateways bind the VirtualService: Istio Gateways as namespace/name
	// (or name, in Namespace), and Mesh for sidecars. Empty means Mesh.
	// The EnvoyFilter patches the gateway proxies (context GATEWAY) when a
	// gateway is named and client sidecars (context SIDECAR_OUTBOUND) for
	// Mesh.
	Gateways []string
	// WorkloadSelector selects the proxies that run ext_proc: the gateway
	// pods, or the client pods whose sidecars call the inference service.
	// Default {SourceLabel: source name}.
	WorkloadSelector map[string]string
	// ListenerPort, when set, limits the EnvoyFilter to the listener on
	// this port: the gateway's container port (8080 for port 80 on the
	// default ingress gateway), or the service port clients call through
	// their sidecar. 0: every HTTP listener of the selected proxies.
	ListenerPort uint32
}

// plan is one source to render, with its resolved placement.
type plan struct {
	source    config.Source
	placement Placement
	contexts  []networkingv1alpha3.EnvoyFilter_PatchContext
}

// withDefaults returns o with every default filled.
func (o Options) withDefaults(c *config.Config) Options {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.ProxyNamespace == "" {
		o.ProxyNamespace = DefaultProxyNamespace
	}
	if o.TLS != nil {
		o.TLS = o.TLS.withDefaults(c)
		return o
	}
	if o.ExtProcCluster == "" {
		port := "18001"
		if _, p, err := net.SplitHostPort(c.Listen.ExtProc); err == nil {
			port = p
		}
		o.ExtProcCluster = fmt.Sprintf("outbound|%s||%s", port, DefaultExtProcHost)
	}
	return o
}

// plans resolves the sources to render and their placements, reporting
// every problem of the options.
func (o Options) plans(c *config.Config) ([]plan, error) {
	var errs []error
	if !validLabel(o.Namespace) {
		errs = append(errs, fmt.Errorf("namespace %q: want a Kubernetes namespace name", o.Namespace))
	}
	if !validLabel(o.ProxyNamespace) {
		errs = append(errs, fmt.Errorf("proxy namespace %q: want a Kubernetes namespace name", o.ProxyNamespace))
	}
	if strings.TrimSpace(o.ExtProcCluster) != o.ExtProcCluster {
		errs = append(errs, fmt.Errorf("ext_proc cluster %q: surrounding spaces", o.ExtProcCluster))
	}
	for _, name := range slices.Sorted(maps.Keys(o.PerSource)) {
		if _, ok := c.Source(name); !ok {
			errs = append(errs, fmt.Errorf("per-source placement %q: unknown source", name))
		}
	}
	var ps []plan
	for _, s := range o.selected(c, &errs) {
		p := plan{source: s, placement: o.placementOf(s)}
		if err := p.check(); err != nil {
			errs = append(errs, fmt.Errorf("source %s: %w", s.Name, err))
			continue
		}
		ps = append(ps, p)
	}
	errs = append(errs, conflicts(ps)...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return ps, nil
}

// selected returns the sources to render: those named, in that order, or
// every source with routing "cluster", in configuration order.
func (o Options) selected(c *config.Config, errs *[]error) []config.Source {
	var out []config.Source
	if len(o.Sources) == 0 {
		for _, s := range c.Sources {
			if s.Routing == config.RoutingCluster {
				out = append(out, s)
			}
		}
		if len(out) == 0 {
			*errs = append(*errs, errors.New(`no source has routing "cluster": set it on the sources whose proxies Istio runs`))
		}
		return out
	}
	for i, name := range o.Sources {
		s, ok := c.Source(name)
		switch {
		case !ok:
			*errs = append(*errs, fmt.Errorf("sources[%d]: unknown source %q", i, name))
		case s.Routing != config.RoutingCluster:
			*errs = append(*errs, fmt.Errorf("sources[%d]: source %q has routing %q: Istio needs routing \"cluster\"", i, name, s.Routing))
		case slices.Contains(o.Sources[:i], name):
			*errs = append(*errs, fmt.Errorf("sources[%d]: source %q is listed twice", i, name))
		default:
			out = append(out, s)
		}
	}
	return out
}

// placementOf merges the shared placement with the source's override and
// fills the default selector.
func (o Options) placementOf(s config.Source) Placement {
	p := o.Placement
	if ov, ok := o.PerSource[s.Name]; ok {
		if len(ov.Hosts) > 0 {
			p.Hosts = ov.Hosts
		}
		if len(ov.Gateways) > 0 {
			p.Gateways = ov.Gateways
		}
		if len(ov.WorkloadSelector) > 0 {
			p.WorkloadSelector = ov.WorkloadSelector
		}
		if ov.ListenerPort != 0 {
			p.ListenerPort = ov.ListenerPort
		}
	}
	if len(p.WorkloadSelector) == 0 {
		p.WorkloadSelector = map[string]string{SourceLabel: s.Name}
	}
	return p
}

// check validates a resolved placement and derives the patch contexts.
func (p *plan) check() error {
	var errs []error
	pl := p.placement
	if !validLabelValue(p.source.Name) {
		errs = append(errs, fmt.Errorf("the source name %q is not a valid Kubernetes label value", p.source.Name))
	}
	mesh, gateway := len(pl.Gateways) == 0, false
	for i, g := range pl.Gateways {
		if g == Mesh {
			mesh = true
			continue
		}
		gateway = true
		ns, name, ok := strings.Cut(g, "/")
		if !ok {
			ns, name = "", g
		}
		if (ok && !validLabel(ns)) || !validSubdomain(name) {
			errs = append(errs, fmt.Errorf("gateways[%d] %q: want namespace/name, name or %q", i, g, Mesh))
		}
	}
	if gateway {
		p.contexts = append(p.contexts, networkingv1alpha3.EnvoyFilter_GATEWAY)
	}
	if mesh {
		p.contexts = append(p.contexts, networkingv1alpha3.EnvoyFilter_SIDECAR_OUTBOUND)
	}
	if len(pl.Hosts) == 0 {
		errs = append(errs, errors.New("hosts: none given: want the names clients call the inference service by"))
	}
	for i, h := range pl.Hosts {
		switch {
		case h == "*" && mesh:
			errs = append(errs, fmt.Errorf("hosts[%d] %q: Istio allows the wildcard host only for gateways", i, h))
		case !validHost(h):
			errs = append(errs, fmt.Errorf("hosts[%d] %q: want a lowercase DNS name, *.domain or *", i, h))
		case slices.Contains(pl.Hosts[:i], h):
			errs = append(errs, fmt.Errorf("hosts[%d] %q is listed twice", i, h))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(pl.WorkloadSelector)) {
		if v := pl.WorkloadSelector[k]; !validLabelKey(k) || !validLabelValue(v) {
			errs = append(errs, fmt.Errorf("workload selector %s=%s: want a Kubernetes label key and value", k, v))
		}
	}
	if pl.ListenerPort > 65535 {
		errs = append(errs, fmt.Errorf("listener port %d: want 1..65535", pl.ListenerPort))
	}
	return errors.Join(errs...)
}

// conflicts reports sources whose objects would land on the same proxies
// (two ext_proc filters, each with its own x-ilb-source) or the same
// virtual hosts (Istio keeps one VirtualService per host and gateway).
func conflicts(ps []plan) []error {
	var errs []error
	for i, a := range ps {
		for _, b := range ps[:i] {
			pa, pb := a.placement, b.placement
			if maps.Equal(pa.WorkloadSelector, pb.WorkloadSelector) && (pa.ListenerPort == pb.ListenerPort || pa.ListenerPort == 0 || pb.ListenerPort == 0) {
				errs = append(errs, fmt.Errorf("sources %s and %s select the same proxies (%s): give each its own workload selector",
					b.source.Name, a.source.Name, selectorString(pa.WorkloadSelector)))
			}
			if overlap(gatewaysOf(pa), gatewaysOf(pb)) && overlap(pa.Hosts, pb.Hosts) {
				errs = append(errs, fmt.Errorf("sources %s and %s: both VirtualServices serve hosts %v on gateways %v: render them for different gateways or hosts",
					b.source.Name, a.source.Name, pa.Hosts, gatewaysOf(pa)))
			}
		}
	}
	return errs
}

func gatewaysOf(p Placement) []string {
	if len(p.Gateways) == 0 {
		return []string{Mesh}
	}
	return p.Gateways
}

func overlap(a, b []string) bool {
	return slices.ContainsFunc(a, func(x string) bool { return slices.Contains(b, x) })
}

func selectorString(sel map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		parts = append(parts, k+"="+sel[k])
	}
	return strings.Join(parts, ",")
}

// ParseSelector parses k=v[,k=v...], the form of --workload-selector.
func ParseSelector(s string) (map[string]string, error) {
	out := map[string]string{}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("workload selector %q: want key=value[,key=value...]", s)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("workload selector %q: key %q is given twice", s, k)
		}
		out[k] = v
	}
	return out, nil
}
