package istio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

// API versions and kinds of the rendered objects.
const (
	NetworkingV1        = "networking.istio.io/v1"
	NetworkingV1alpha3  = "networking.istio.io/v1alpha3"
	KindVirtualService  = "VirtualService"
	KindDestinationRule = "DestinationRule"
	KindEnvoyFilter     = "EnvoyFilter"
)

// Labels and annotations on every rendered object.
const (
	managedByLabel    = "app.kubernetes.io/managed-by"
	managedBy         = "ilb"
	versionAnnotation = "ilb/weights-version"
	policyAnnotation  = "ilb/weights-policy"
	clusterAnnotation = "ilb/clusters"
)

// Object is one rendered Istio resource.
type Object struct {
	APIVersion string
	Kind       string
	Metadata   Metadata
	// Spec is a *networkingv1.VirtualService, *networkingv1.DestinationRule
	// or *networkingv1alpha3.EnvoyFilter (istio.io/api), by Kind.
	Spec proto.Message
}

// Metadata is the Kubernetes object metadata ILB sets.
type Metadata struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Objects renders the Istio objects of the sources o selects, in a stable
// order: the DestinationRules (configuration order of their clusters),
// then each source's VirtualService, then each source's EnvoyFilter —
// applied in that order, a route never names a service before its policy
// exists, and ext_proc never names a cluster before a route matches it.
//
// c must be valid and w computed for it (every cell of a rendered source,
// targets within its residency). Every problem is reported, joined: an
// option, a cluster the sources may use without a service, a weights cell
// that does not fit the configuration, a duration Istio cannot express.
func Objects(c *config.Config, w *weights.Weights, o Options) ([]Object, error) {
	if o.TLS != nil && o.ExtProcCluster != "" {
		return nil, fmt.Errorf("ext_proc cluster %q and TLS: with TLS the EnvoyFilter adds ILB's own cluster %q; leave the cluster unset", o.ExtProcCluster, c.Envoy.ExtProcCluster)
	}
	o = o.withDefaults(c)
	ps, err := o.plans(c)
	if err != nil {
		return nil, fmt.Errorf("istio: %w", err)
	}
	r := &renderer{c: c, w: w, o: o}
	drs := r.destinationRules(ps)
	var vss, efs []Object
	for _, p := range ps {
		vs, ok := r.virtualService(p)
		if ok {
			vss = append(vss, vs)
		}
		if ef, ok := r.envoyFilter(p, routeNames(vs, true), routeNames(vs, false)); ok {
			efs = append(efs, ef)
		}
	}
	if err := errors.Join(r.errs...); err != nil {
		return nil, fmt.Errorf("istio: %w", err)
	}
	return append(append(drs, vss...), efs...), nil
}

// Render renders Objects as multi-document YAML ("---" separated), with
// keys sorted, after a comment naming the weights version: the form
// `ilb render istio` writes for GitOps.
func Render(c *config.Config, w *weights.Weights, o Options) ([]byte, error) {
	objs, err := Objects(c, w, o)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Rendered by `ilb render istio` from weights %s (policy %s). Do not edit: render again.\n", w.Version(), w.Policy())
	for i, obj := range objs {
		y, err := obj.YAML()
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return b.Bytes(), nil
}

// YAML encodes the object as one YAML document: the spec in Istio's JSON
// form (protojson, lowerCamelCase field names, as the CRDs define them).
func (o Object) YAML() ([]byte, error) {
	spec, err := protojson.Marshal(o.Spec)
	if err != nil {
		return nil, fmt.Errorf("istio: %s %s: %w", o.Kind, o.Metadata.Name, err)
	}
	js, err := json.Marshal(struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Metadata   Metadata        `json:"metadata"`
		Spec       json.RawMessage `json:"spec"`
	}{o.APIVersion, o.Kind, o.Metadata, spec})
	if err != nil {
		return nil, fmt.Errorf("istio: %s %s: %w", o.Kind, o.Metadata.Name, err)
	}
	y, err := yaml.JSONToYAML(js)
	if err != nil {
		return nil, fmt.Errorf("istio: %s %s: %w", o.Kind, o.Metadata.Name, err)
	}
	return y, nil
}

// renderer gathers every problem while building the objects.
type renderer struct {
	c    *config.Config
	w    *weights.Weights
	o    Options
	errs []error
}

func (r *renderer) errorf(format string, a ...any) {
	r.errs = append(r.errs, fmt.Errorf(format, a...))
}

// meta is the metadata of an object named after name ("ilb-" + name);
// objects of one source carry its name in the SourceLabel label.
func (r *renderer) meta(name, namespace string, annotations map[string]string, source string) (Metadata, bool) {
	n, err := objectName(name)
	if err != nil {
		r.errs = append(r.errs, err)
		return Metadata{}, false
	}
	labels := map[string]string{managedByLabel: managedBy}
	if source != "" {
		labels[SourceLabel] = source
	}
	return Metadata{Name: n, Namespace: namespace, Labels: labels, Annotations: annotations}, true
}

// routeNames lists the names of the VirtualService's routes: those that
// have destinations (not direct responses) when destinations, else all.
func routeNames(vs Object, destinations bool) []string {
	spec, ok := vs.Spec.(*networkingv1.VirtualService)
	if !ok {
		return nil
	}
	var out []string
	for _, h := range spec.GetHttp() {
		if !destinations || len(h.GetRoute()) > 0 {
			out = append(out, h.GetName())
		}
	}
	return out
}
