package kube

import (
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Clients are the REST clients of one API server that ILB uses: core/v1
// (Pods, Services; ConfigMaps for HA), discovery.k8s.io/v1
// (EndpointSlices), coordination.k8s.io/v1 (the HA Lease), and a dynamic
// client (InferencePools, a CRD). They are built on a scheme of those
// three groups only: client-go's clientset registers every API group of
// Kubernetes, which doubled the size of ILB's binary.
type Clients struct {
	Core, Discovery, Coordination rest.Interface
	Dynamic                       dynamic.Interface
}

// codecs decode the types of the three groups ILB reads.
var codecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, discoveryv1.AddToScheme, coordinationv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err) // a static registration: cannot fail
		}
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(s)
}()

// NewClients builds the clients of the API server rc reaches.
func NewClients(rc *rest.Config) (*Clients, error) {
	rest1 := func(api string, gv schema.GroupVersion) (rest.Interface, error) {
		c := rest.CopyConfig(rc)
		c.APIPath, c.GroupVersion = api, &gv
		c.NegotiatedSerializer = codecs.WithoutConversion()
		if c.UserAgent == "" {
			c.UserAgent = "ilb"
		}
		return rest.RESTClientFor(c)
	}
	core, err := rest1("/api", corev1.SchemeGroupVersion)
	if err != nil {
		return nil, fmt.Errorf("core/v1 client: %w", err)
	}
	disc, err := rest1("/apis", discoveryv1.SchemeGroupVersion)
	if err != nil {
		return nil, fmt.Errorf("discovery/v1 client: %w", err)
	}
	coord, err := rest1("/apis", coordinationv1.SchemeGroupVersion)
	if err != nil {
		return nil, fmt.Errorf("coordination/v1 client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return &Clients{Core: core, Discovery: disc, Coordination: coord, Dynamic: dyn}, nil
}
