package config

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/ilbproject/ilb/internal/bound"
)

// Kubernetes names the API servers that Kubernetes discovery
// (clusters[].discovery.type: kubernetes) reads. Absent or empty, there is
// one, InClusterAPIServer: the API server of the cluster ILB runs in,
// reached with its pod's service account.
type Kubernetes struct {
	// APIServers are the API servers ILB watches, one per Kubernetes
	// cluster (a region, a zone's cluster); 1 to MaxKubeAPIServers.
	APIServers []KubeAPIServer `yaml:"api_servers,omitempty" json:"api_servers,omitempty"`
}

// KubeAPIServer is one Kubernetes API server and how to reach it.
type KubeAPIServer struct {
	// Name is how clusters[].discovery.kubernetes.api_server names it;
	// also a label of ILB's metrics and log lines.
	Name string `yaml:"name" json:"name"`
	// Kubeconfig is a kubeconfig file; empty: the in-cluster
	// configuration (the pod's service account token and CA, and
	// KUBERNETES_SERVICE_HOST/PORT).
	Kubeconfig string `yaml:"kubeconfig,omitempty" json:"kubeconfig,omitempty"`
	// Context is the kubeconfig context to use; empty: its current
	// context. Only with Kubeconfig.
	Context string `yaml:"context,omitempty" json:"context,omitempty"`
}

// InClusterAPIServer is the name of the API server ILB reads when the
// kubernetes section names none: the one of the cluster it runs in.
const InClusterAPIServer = "in-cluster"

// MaxKubeAPIServers bounds kubernetes.api_servers.
const MaxKubeAPIServers = 64

// KubeDiscovery finds a cluster's replicas in Kubernetes: the endpoints
// of a Service (its EndpointSlices) or the Pods of a Gateway API Inference
// Extension InferencePool (inference.networking.k8s.io/v1). ILB watches
// only these objects (by label or field selector), so its memory follows
// what it routes to, not the size of the namespace.
type KubeDiscovery struct {
	// APIServer names one of kubernetes.api_servers; empty: the only one
	// (or the in-cluster one when the section names none).
	APIServer string `yaml:"api_server,omitempty" json:"api_server,omitempty"`
	// Namespace holds the Service or InferencePool; required.
	Namespace string `yaml:"namespace" json:"namespace"`
	// Service is a Service whose EndpointSlices (label
	// kubernetes.io/service-name) list the replicas. An endpoint that is
	// ready is a replica; one that is terminating, or not ready, is
	// draining.
	Service string `yaml:"service,omitempty" json:"service,omitempty"`
	// Port is the name of the Service's port the engines serve on (as
	// in the EndpointSlices' ports); empty: the slices' only port. Only
	// with Service.
	Port string `yaml:"port,omitempty" json:"port,omitempty"`
	// InferencePool is an InferencePool whose selector picks the replica
	// Pods in Namespace and whose targetPorts are their ports. A Pod that
	// is Ready with an IP is a replica on each target port; one being
	// deleted, or not Ready, is draining.
	InferencePool string `yaml:"inference_pool,omitempty" json:"inference_pool,omitempty"`
}

// Kubernetes name rules: a namespace, Service or Service port name is a
// DNS-1123 label (RFC 1123, lower case, at most 63 characters), an
// InferencePool's name a DNS-1123 subdomain (at most 253).
var (
	dns1123Label     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// KubeAPIServerNames lists the API servers clusters may name, in order:
// the configured ones, or InClusterAPIServer alone.
func (c *Config) KubeAPIServerNames() []string {
	if len(c.Kubernetes.APIServers) == 0 {
		return []string{InClusterAPIServer}
	}
	out := make([]string, len(c.Kubernetes.APIServers))
	for i, a := range c.Kubernetes.APIServers {
		out[i] = a.Name
	}
	return out
}

// KubeAPIServer returns the API server a cluster's discovery names ("":
// the only one), with its settings; false when there is no such server.
func (c *Config) KubeAPIServer(name string) (KubeAPIServer, bool) {
	if len(c.Kubernetes.APIServers) == 0 {
		if name == "" || name == InClusterAPIServer {
			return KubeAPIServer{Name: InClusterAPIServer}, true
		}
		return KubeAPIServer{}, false
	}
	if name == "" && len(c.Kubernetes.APIServers) == 1 {
		return c.Kubernetes.APIServers[0], true
	}
	for _, a := range c.Kubernetes.APIServers {
		if a.Name == name {
			return a, true
		}
	}
	return KubeAPIServer{}, false
}

// validateKubernetes checks the kubernetes section.
func (c *Config) validateKubernetes(p *problems) {
	k := c.Kubernetes
	if len(k.APIServers) > MaxKubeAPIServers {
		p.addf("kubernetes.api_servers", "%d API servers: want at most %d", len(k.APIServers), MaxKubeAPIServers)
		return
	}
	seen := map[string]bool{}
	for i, a := range k.APIServers {
		path := fmt.Sprintf("kubernetes.api_servers[%d]", i)
		checkName(p, path+".name", "API server", a.Name, seen)
		if a.Context != "" && a.Kubeconfig == "" {
			p.addf(path+".context", "context %s needs a kubeconfig file (the in-cluster configuration has no contexts)", bound.Quote(a.Context, bound.Excerpt))
		}
		if len(a.Kubeconfig) > 4096 {
			p.addf(path+".kubeconfig", "a path of %d bytes: want at most 4096", len(a.Kubeconfig))
		}
		if len(a.Context) > 253 {
			p.addf(path+".context", "a context name of %d bytes: want at most 253", len(a.Context))
		}
	}
}

// checkKubeAPIServer checks that name ("": the only one) names one of
// the API servers.
func (c *Config) checkKubeAPIServer(p *problems, path, name string) {
	if _, ok := c.KubeAPIServer(name); ok {
		return
	}
	want := "one of " + strings.Join(c.KubeAPIServerNames(), ", ")
	if name == "" {
		p.addf(path, "kubernetes.api_servers has %d API servers: name %s", len(c.Kubernetes.APIServers), want)
	} else {
		p.addf(path, "unknown API server %s: want %s", bound.Quote(name, bound.Excerpt), want)
	}
}

// validateKubeDiscovery checks a cluster's kubernetes discovery.
func (c *Config) validateKubeDiscovery(p *problems, path string, k *KubeDiscovery) {
	path += ".discovery.kubernetes"
	if c.Signals.Disabled {
		p.addf(path, "kubernetes discovery needs the signals monitor: signals.disabled is set")
	}
	if k == nil {
		p.addf(path, "a kubernetes discovery needs this section: namespace and service (or inference_pool)")
		return
	}
	c.checkKubeAPIServer(p, path+".api_server", k.APIServer)
	if !dns1123Label.MatchString(k.Namespace) {
		p.addf(path+".namespace", "%s is not a namespace name: want a DNS-1123 label (lower case letters, digits and '-', at most 63)", bound.Quote(k.Namespace, bound.Excerpt))
	}
	switch {
	case k.Service == "" && k.InferencePool == "":
		p.addf(path, "name a service or an inference_pool to take the replicas from")
	case k.Service != "" && k.InferencePool != "":
		p.addf(path, "service %s and inference_pool %s are both set: keep one", bound.Quote(k.Service, bound.Excerpt), bound.Quote(k.InferencePool, bound.Excerpt))
	case k.Service != "" && !dns1123Label.MatchString(k.Service):
		p.addf(path+".service", "%s is not a Service name: want a DNS-1123 label (lower case letters, digits and '-', at most 63)", bound.Quote(k.Service, bound.Excerpt))
	case k.InferencePool != "" && (len(k.InferencePool) > 253 || !dns1123Subdomain.MatchString(k.InferencePool)):
		p.addf(path+".inference_pool", "%s is not an InferencePool name: want a DNS-1123 subdomain (at most 253)", bound.Quote(k.InferencePool, bound.Excerpt))
	}
	if k.Port != "" {
		switch {
		case k.InferencePool != "":
			p.addf(path+".port", "port %s is for a service: an InferencePool's targetPorts give its ports", bound.Quote(k.Port, bound.Excerpt))
		case !dns1123Label.MatchString(k.Port):
			p.addf(path+".port", "%s is not a Service port name: want a DNS-1123 label (lower case letters, digits and '-', at most 63)", bound.Quote(k.Port, bound.Excerpt))
		}
	}
}
