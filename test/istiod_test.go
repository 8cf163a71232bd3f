package test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/internal/istiotest"
	"github.com/ilbproject/ilb/internal/kubetest"
)

// istioWorld is what the example manifests need in the API server: the
// engine Services, ILB's Service, and the ingress gateway's Gateway and
// Service (port 80 to the pods' 8080, as Istio's default gateway).
const istioWorld = `
apiVersion: v1
kind: Service
metadata: {name: us-east-vllm, namespace: inference}
spec: {ports: [{name: http, port: 8000}], selector: {app: us-east-vllm}}
---
apiVersion: v1
kind: Service
metadata: {name: us-west-sglang, namespace: inference}
spec: {ports: [{name: http, port: 30000}], selector: {app: us-west-sglang}}
---
apiVersion: v1
kind: Service
metadata: {name: eu-west-vllm, namespace: inference}
spec: {ports: [{name: http, port: 8000}], selector: {app: eu-west-vllm}}
---
apiVersion: v1
kind: Service
metadata: {name: eu-west-tgi, namespace: inference}
spec: {ports: [{name: http, port: 80}], selector: {app: eu-west-tgi}}
---
apiVersion: v1
kind: Service
metadata: {name: ilb, namespace: ilb-system}
spec: {ports: [{name: grpc-extproc, port: 18001}], selector: {app: ilb}}
---
apiVersion: v1
kind: Service
metadata: {name: istio-ingressgateway, namespace: istio-ingress}
spec: {ports: [{name: http2, port: 80, targetPort: 8080}], selector: {istio: ingressgateway}}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: llm-gateway, namespace: istio-ingress}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}]
`

// TestIstiodServesTheRender applies examples/istio/edge-eu.yaml (what
// `ilb render istio` writes for the demo's edge-eu behind an ingress
// gateway) to a real API server watched by a real istiod, and reads what
// istiod sends a gateway pod of that source over xDS: its port-80
// listener (the pods' 8080) runs ILB's ext_proc filter before the
// router, and the route configuration holds the render's routes, in
// order, each named ilb-*.
func TestIstiodServesTheRender(t *testing.T) {
	k := kubetest.Start(t)
	for _, ns := range []string{"inference", "ilb-system", "istio-ingress"} {
		k.Namespace(t, ns)
	}
	istiod := istiotest.Start(t, k)
	render, err := os.ReadFile("../examples/istio/edge-eu.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := k.Apply(ctx, []byte(istioWorld)); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Apply(ctx, render); err != nil {
		t.Fatalf("the API server refused the render: %v", err)
	}
	gw := istiotest.Proxy{
		Type: "router", Name: "istio-ingressgateway-0", Namespace: "istio-ingress", IP: "10.9.0.1",
		Labels: map[string]string{"istio": "ingressgateway", "ilb/source": "edge-eu"},
	}
	var filters []string
	var routes []string
	waitUntil(t, "istiod's gateway configuration with ILB's filter and routes", time.Minute, func() bool {
		res, err := istiod.Fetch(ctx, gw)
		if err != nil {
			t.Logf("fetch: %v", err)
			return false
		}
		filters, routes = nil, nil
		for _, l := range res.Listeners {
			if l.GetAddress().GetSocketAddress().GetPortValue() != 8080 {
				continue
			}
			for _, hcm := range istiotest.HCMs(l) {
				for _, f := range hcm.GetHttpFilters() {
					filters = append(filters, f.GetName())
				}
			}
		}
		for _, rc := range res.Routes {
			for _, vh := range rc.GetVirtualHosts() {
				for _, r := range vh.GetRoutes() {
					routes = append(routes, r.GetName())
				}
			}
		}
		return slices.Contains(filters, "envoy.filters.http.ext_proc") && slices.ContainsFunc(routes, func(r string) bool { return strings.HasPrefix(r, "ilb-") })
	})
	ext, router := slices.Index(filters, "envoy.filters.http.ext_proc"), slices.Index(filters, "envoy.filters.http.router")
	if ext < 0 || router < 0 || ext > router {
		t.Errorf("gateway filters %v: want ILB's ext_proc before the router", filters)
	}
	want := []string{"ilb-cluster-eu-west-vllm", "ilb-cluster-eu-west-tgi", "ilb-model-llama-3.1-8b-instruct", "ilb-model-qwen2.5-7b-instruct", "ilb-default", "ilb-not-found"}
	var got []string
	for _, r := range routes {
		if strings.HasPrefix(r, "ilb-") {
			got = append(got, r)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("ILB's routes on the gateway %v, want %v (all routes: %v)", got, want, routes)
	}
	t.Logf("gateway filters %v; routes %v", filters, routes)
}
