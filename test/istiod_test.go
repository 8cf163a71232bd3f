package test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/ilbproject/ilb/envoy"
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
apiVersion: v1
kind: Service
metadata: {name: llm, namespace: inference}
spec: {ports: [{name: http, port: 80}], selector: {app: llm}}
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
	istiod := istiotest.Start(t, k, istiotest.Options{})
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

	// `ilb validate --envoy` reads what istiod sent (TypedStruct, Istio's
	// ALPN filter) and checks it.
	res, err := istiod.Fetch(ctx, gw)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "istiod-gateway.json")
	if err := os.WriteFile(path, resourceFile(t, res), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := envoy.LoadBundle(path)
	if err != nil {
		t.Fatalf("ilb validate --envoy cannot read istiod's output: %v", err)
	}
	for _, p := range b.Check() {
		if !p.Warning {
			t.Errorf("istiod's output: %s", p)
		} else {
			t.Logf("istiod's output: %s", p)
		}
	}
}

// resourceFile writes what istiod sent as the resource file `ilb validate
// --envoy` reads: lists of clusters, routes and listeners, proto JSON.
func resourceFile(t *testing.T, res *istiotest.Resources) []byte {
	t.Helper()
	var b bytes.Buffer
	list := func(key string, ms []proto.Message, last bool) {
		b.WriteString(`"` + key + `": [`)
		for i, m := range ms {
			js, err := protojson.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if i > 0 {
				b.WriteString(",")
			}
			b.Write(js)
		}
		b.WriteString("]")
		if !last {
			b.WriteString(",")
		}
	}
	b.WriteString("{")
	list("clusters", protos(res.Clusters), false)
	list("routes", protos(res.Routes), false)
	list("listeners", protos(res.Listeners), true)
	b.WriteString("}")
	return b.Bytes()
}

func protos[M proto.Message](ms []M) []proto.Message {
	out := make([]proto.Message, len(ms))
	for i, m := range ms {
		out[i] = m
	}
	return out
}

// TestIstiodScopesExtProc: what istiod sends a client sidecar of edge-us
// (examples/istio/edge-us.yaml, ILB on the mesh's port 80, where
// eu-west-tgi, llm and the passthrough allow_any share the listener):
// ILB's ext_proc filter is on the port-80 listener with every processing
// mode off, and turned on (typed_per_filter_config, ILB's processing
// mode) on every route of ILB's VirtualService and on no other route of
// any listener. A gateway of edge-eu gets the same on its listener.
func TestIstiodScopesExtProc(t *testing.T) {
	k := kubetest.Start(t)
	for _, ns := range []string{"inference", "ilb-system", "istio-ingress", "apps"} {
		k.Namespace(t, ns)
	}
	istiod := istiotest.Start(t, k, istiotest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := k.Apply(ctx, []byte(istioWorld)); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"../examples/istio/edge-us.yaml", "../examples/istio/edge-eu.yaml"} {
		render, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k.Apply(ctx, render); err != nil {
			t.Fatalf("the API server refused %s: %v", f, err)
		}
	}
	tests := []struct {
		name  string
		proxy istiotest.Proxy
		port  uint32   // the listener ILB's filter is on
		host  string   // the virtual host of ILB's routes
		share []string // other virtual hosts on that listener's routes, left alone
	}{
		{"client sidecar, mesh port 80", istiotest.Proxy{
			Type: "sidecar", Name: "client-0", Namespace: "apps", IP: "10.9.1.1", Labels: map[string]string{"app": "client", "ilb/source": "edge-us"},
		}, 80, "llm.inference.svc.cluster.local", []string{"allow_any", "eu-west-tgi.inference.svc.cluster.local:80"}},
		{"ingress gateway", istiotest.Proxy{
			Type: "router", Name: "istio-ingressgateway-0", Namespace: "istio-ingress", IP: "10.9.0.1", Labels: map[string]string{"istio": "ingressgateway", "ilb/source": "edge-eu"},
		}, 8080, "llm.example.com", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var on, others, vhosts []string
			var mode string
			// istiod applies each EnvoyFilter as its informer delivers it:
			// a push may carry the routes' patch before the listener's
			// (seen on a loaded machine), so both are waited for.
			waitUntil(t, "ILB's filter on the listener and its routes turned on", time.Minute, func() bool {
				res, err := istiod.Fetch(ctx, tt.proxy)
				if err != nil {
					t.Logf("fetch: %v", err)
					return false
				}
				on, others, mode = extProcScope(t, res, tt.port, tt.host)
				vhosts = nil
				for _, rc := range res.Routes {
					for _, vh := range rc.GetVirtualHosts() {
						vhosts = append(vhosts, vh.GetName())
					}
				}
				return len(on) > 0 && mode != "missing"
			})
			if mode != "off" {
				t.Errorf("ext_proc on the port-%d listener: %s, want every mode off", tt.port, mode)
			}
			if len(others) > 0 {
				t.Errorf("routes outside ILB's virtual host with ext_proc on: %v", others)
			}
			for _, v := range tt.share {
				if !slices.Contains(vhosts, v) {
					t.Errorf("no virtual host %s beside ILB's (virtual hosts: %v): the test would prove nothing", v, vhosts)
				}
			}
			for _, r := range on {
				if !strings.HasPrefix(r, "ilb-") {
					t.Errorf("route %s of ILB's host has ext_proc on but is not ILB's", r)
				}
			}
			t.Logf("ext_proc on for %v", on)
		})
	}
}

// extProcScope reads, from what istiod sent a proxy: the processing mode
// of ext_proc on the listener on port ("off", "on" or "missing"); the
// routes of the virtual host host with ext_proc turned on per route,
// failing the test for a route of that host left off; and the routes of
// any other virtual host turned on.
func extProcScope(t *testing.T, res *istiotest.Resources, port uint32, host string) (on, others []string, mode string) {
	t.Helper()
	mode = "missing"
	for _, l := range res.Listeners {
		if l.GetAddress().GetSocketAddress().GetPortValue() != port {
			continue
		}
		for _, hcm := range istiotest.HCMs(l) {
			for _, f := range hcm.GetHttpFilters() {
				if f.GetName() != envoy.ExtProcFilter {
					continue
				}
				var ep extprocfilterv3.ExternalProcessor
				if err := f.GetTypedConfig().UnmarshalTo(&ep); err != nil {
					t.Fatal(err)
				}
				mode = "on"
				if ep.GetProcessingMode().GetRequestHeaderMode() == extprocfilterv3.ProcessingMode_SKIP {
					mode = "off"
				}
			}
		}
	}
	var off []string
	for _, rc := range res.Routes {
		for _, vh := range rc.GetVirtualHosts() {
			ilb := slices.Contains(vh.GetDomains(), host)
			for _, r := range vh.GetRoutes() {
				pf, ok := r.GetTypedPerFilterConfig()[envoy.ExtProcFilter]
				var per extprocfilterv3.ExtProcPerRoute
				if ok {
					if err := pf.UnmarshalTo(&per); err != nil {
						t.Fatal(err)
					}
				}
				turnedOn := per.GetOverrides().GetProcessingMode().GetRequestHeaderMode() == extprocfilterv3.ProcessingMode_SEND
				switch {
				case ilb && turnedOn:
					on = append(on, r.GetName())
				case ilb:
					off = append(off, r.GetName())
				case turnedOn:
					others = append(others, rc.GetName()+"/"+vh.GetName()+"/"+r.GetName())
				}
			}
		}
	}
	if len(off) > 0 && len(on) > 0 {
		t.Errorf("routes of ILB's host %s with ext_proc off: %v", host, off)
	}
	return on, others, mode
}

// TestIstiodPickingClusterWithLocality: with a mesh-wide locality
// distribute setting, the outbound cluster of an engine service where ILB
// picks replicas (us-east-vllm) is what Envoy accepts: the override_host
// policy, lb_policy CLUSTER_PROVIDED and no locality-weighted config
// beside it (the rendered DestinationRule turns locality off for that
// service), and it passes Envoy's proto validation; a cluster where ILB
// does not pick (us-west-sglang) keeps the mesh's locality weighting,
// which shows the setting is in force.
func TestIstiodPickingClusterWithLocality(t *testing.T) {
	k := kubetest.Start(t)
	for _, ns := range []string{"inference", "ilb-system", "istio-ingress", "apps"} {
		k.Namespace(t, ns)
	}
	istiod := istiotest.Start(t, k, istiotest.Options{Mesh: `
localityLbSetting:
  enabled: true
  distribute:
    - from: "us-east/*"
      to: {"us-east/*": 80, "eu-west/*": 20}
`})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := k.Apply(ctx, []byte(istioWorld)); err != nil {
		t.Fatal(err)
	}
	render, err := os.ReadFile("../examples/istio/edge-us.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Apply(ctx, render); err != nil {
		t.Fatal(err)
	}
	client := istiotest.Proxy{
		Type: "sidecar", Name: "client-0", Namespace: "apps", IP: "10.9.1.1", Region: "us-east",
		Labels: map[string]string{"app": "client", "ilb/source": "edge-us"},
	}
	const picking, plain = "outbound|8000||us-east-vllm.inference.svc.cluster.local", "outbound|30000||us-west-sglang.inference.svc.cluster.local"
	var got map[string]*clusterv3.Cluster
	waitUntil(t, "the engine clusters, override_host merged", time.Minute, func() bool {
		res, err := istiod.Fetch(ctx, client)
		if err != nil {
			t.Logf("fetch: %v", err)
			return false
		}
		got = map[string]*clusterv3.Cluster{}
		for _, c := range res.Clusters {
			got[c.GetName()] = c
		}
		return got[picking].GetLoadBalancingPolicy() != nil && got[plain] != nil
	})
	c := got[picking]
	if err := c.ValidateAll(); err != nil {
		t.Errorf("%s fails Envoy's proto validation: %v", picking, err)
	}
	if c.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED || c.GetCommonLbConfig().GetLocalityWeightedLbConfig() != nil {
		t.Errorf("%s: lb_policy %v, locality_weighted_lb_config %v; want CLUSTER_PROVIDED and none beside load_balancing_policy", picking, c.GetLbPolicy(), c.GetCommonLbConfig().GetLocalityWeightedLbConfig())
	}
	if name := c.GetLoadBalancingPolicy().GetPolicies()[0].GetTypedExtensionConfig().GetName(); name != envoy.OverrideHostPolicyName {
		t.Errorf("%s: load_balancing_policy %s, want %s", picking, name, envoy.OverrideHostPolicyName)
	}
	if got[plain].GetCommonLbConfig().GetLocalityWeightedLbConfig() == nil {
		t.Errorf("%s has no locality weighting: the mesh's distribute setting is not in force, and the test proves nothing", plain)
	}
}
