package test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ilbproject/ilb/internal/istiotest"
	"github.com/ilbproject/ilb/internal/kubetest"
)

// envoyFilters is the EnvoyFilter resource of networking.istio.io.
var envoyFilters = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1alpha3", Resource: "envoyfilters"}

// TestIstiodAnalysis runs istiod's own analyzers (PILOT_ENABLE_ANALYSIS,
// the checks `istioctl analyze` runs, written to each resource's status)
// over examples/istio/edge-eu.yaml: ILB's EnvoyFilters get no IST0151
// (an EnvoyFilter inserting relative to another filter without a
// priority, whose order Istio does not guarantee) and no other message
// but the warning every EnvoyFilter gets. A control copy of each
// EnvoyFilter without its priority must get IST0151, so the check cannot
// pass because the analysis did not run.
func TestIstiodAnalysis(t *testing.T) {
	k := kubetest.Start(t)
	for _, ns := range []string{"inference", "ilb-system", "istio-ingress"} {
		k.Namespace(t, ns)
	}
	istiotest.Start(t, k, istiotest.Options{Env: []string{"PILOT_ENABLE_ANALYSIS=true", "PILOT_ANALYSIS_INTERVAL=1s"}})
	render, err := os.ReadFile("../examples/istio/edge-eu.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := k.Apply(ctx, []byte(istioWorld)); err != nil {
		t.Fatal(err)
	}
	objs, err := k.Apply(ctx, render)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(k.Config())
	if err != nil {
		t.Fatal(err)
	}
	var ilb, controls []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() != "EnvoyFilter" {
			continue
		}
		ilb = append(ilb, o)
		c := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": o.GetAPIVersion(), "kind": o.GetKind(),
			"metadata": map[string]any{"name": o.GetName() + "-no-priority", "namespace": o.GetNamespace()},
			"spec":     o.Object["spec"],
		}}
		unstructured.RemoveNestedField(c.Object, "spec", "priority")
		if _, err := dyn.Resource(envoyFilters).Namespace(c.GetNamespace()).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		controls = append(controls, c)
	}
	if len(ilb) == 0 {
		t.Fatal("the render has no EnvoyFilter")
	}
	// analysis is what istiod wrote in o's status: each message, and
	// its code.
	analysis := func(o *unstructured.Unstructured) (msgs, codes []string) {
		got, err := dyn.Resource(envoyFilters).Namespace(o.GetNamespace()).Get(ctx, o.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		list, _, _ := unstructured.NestedSlice(got.Object, "status", "validationMessages")
		for _, m := range list {
			code, _, _ := unstructured.NestedString(m.(map[string]any), "type", "code")
			msgs, codes = append(msgs, fmt.Sprint(m)), append(codes, code)
		}
		return msgs, codes
	}
	codes := func(o *unstructured.Unstructured) []string {
		_, c := analysis(o)
		return c
	}
	messages := func(o *unstructured.Unstructured) []string {
		m, _ := analysis(o)
		return m
	}
	waitUntil(t, "istiod's analysis flagging the controls without priority IST0151", 2*time.Minute, func() bool {
		for _, c := range controls {
			if !slices.Contains(codes(c), "IST0151") {
				return false
			}
		}
		return true
	})
	// IST0133 (a schema warning) is given to every EnvoyFilter: "EnvoyFilter
	// exposes internal implementation details..." (istio
	// pkg/config/validation/envoyfilter ValidateEnvoyFilter). Anything
	// else, IST0151 first, is ILB's to fix.
	for _, o := range ilb {
		got := codes(o)
		if slices.ContainsFunc(got, func(c string) bool { return c != "IST0133" }) {
			t.Errorf("EnvoyFilter %s/%s: analysis messages %v, want none but the IST0133 every EnvoyFilter gets", o.GetNamespace(), o.GetName(), messages(o))
		}
		t.Logf("EnvoyFilter %s/%s: analysis messages %v", o.GetNamespace(), o.GetName(), messages(o))
	}
}
