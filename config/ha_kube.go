package config

import (
	"go.yaml.in/yaml/v3"

	"github.com/ilbproject/ilb/internal/bound"
)

// HAKubernetes keeps an HA group in a Kubernetes API server instead of
// etcd: the replicas elect their leader on a coordination.k8s.io/v1
// Lease, the leader publishes the version in force in that Lease (an
// update fenced by its resourceVersion) and each version's content in
// immutable ConfigMaps, each replica shares its demand in a ConfigMap of
// its own, and the store keeps a ConfigMap per namespace. Every object's
// name starts with Lease.
type HAKubernetes struct {
	// APIServer names one of kubernetes.api_servers; empty: the only one
	// (or the in-cluster one when that section names none).
	APIServer string `yaml:"api_server,omitempty" json:"api_server,omitempty"`
	// Namespace holds the Lease and the ConfigMaps; required (the
	// chart's release namespace).
	Namespace string `yaml:"namespace" json:"namespace"`
	// Lease is the name of the Lease, the prefix of the ConfigMaps'
	// names and the value of their label ilb.dev/ha-group; a DNS-1123
	// label; default "ilb". Two ILBs in one namespace need two names.
	Lease string `yaml:"lease" json:"lease"`
}

// DefaultHAKubernetes returns the settings of an ha.kubernetes section
// that gives only its namespace.
func DefaultHAKubernetes() HAKubernetes { return HAKubernetes{Lease: "ilb"} }

// UnmarshalYAML decodes ha.kubernetes over DefaultHAKubernetes (the
// ha: section checked its fields).
func (k *HAKubernetes) UnmarshalYAML(n *yaml.Node) error {
	type plain HAKubernetes // without this method
	v := plain(DefaultHAKubernetes())
	if err := n.Decode(&v); err != nil {
		return err
	}
	*k = HAKubernetes(v)
	return nil
}

// validateHAKube checks ha.kubernetes; etcd's settings must be absent.
func (c *Config) validateHAKube(p *problems) {
	h := c.HA
	k := h.Kubernetes
	const path = "ha.kubernetes"
	if len(h.Endpoints) > 0 {
		p.addf("ha.endpoints", "lists %d etcd members while ha.kubernetes is set: keep one of them", len(h.Endpoints))
	}
	if h.TLS.Enabled() {
		p.addf("ha.tls", "is set while ha.kubernetes is set: the API server's TLS comes from its kubeconfig (kubernetes.api_servers)")
	}
	c.checkKubeAPIServer(p, path+".api_server", k.APIServer)
	if !dns1123Label.MatchString(k.Namespace) {
		p.addf(path+".namespace", "%s is not a namespace name: want a DNS-1123 label (lower case letters, digits and '-', at most 63)", bound.Quote(k.Namespace, bound.Excerpt))
	}
	if !dns1123Label.MatchString(k.Lease) {
		p.addf(path+".lease", "%s is not a Lease name ILB can use: want a DNS-1123 label (lower case letters, digits and '-', at most 63)", bound.Quote(k.Lease, bound.Excerpt))
	}
	if h.Replica != "" && !KubeReplicaName(h.Replica) {
		p.addf("ha.replica", "%s cannot name a Kubernetes object: with ha.kubernetes want lower case letters, digits, '-' and '.' (at most 63; the pod's name)", bound.Quote(h.Replica, bound.Excerpt))
	}
}

// KubeReplicaName reports whether a replica name can be part of a
// Kubernetes object's name and a Lease's holder: a DNS-1123 subdomain of
// at most 63 characters, as a pod's name is.
func KubeReplicaName(s string) bool { return len(s) <= 63 && dns1123Subdomain.MatchString(s) }
