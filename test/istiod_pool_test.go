package test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	overridehostv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/override_host/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/internal/istiotest"
	"github.com/ilbproject/ilb/internal/kubetest"
)

// poolWorld is an InferencePool whose endpoint picker is ILB (the
// chart's Service, picker port 9002) behind a Gateway API gateway of
// class istio.
const poolWorld = `
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: istio}
spec: {controllerName: istio.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: inference-gateway, namespace: inference}
spec:
  gatewayClassName: istio
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
# The gateway's own Service, as istio's deployment controller would make
# it (the tests run istiod without it).
apiVersion: v1
kind: Service
metadata:
  name: inference-gateway-istio
  namespace: inference
  labels: {gateway.networking.k8s.io/gateway-name: inference-gateway}
spec: {ports: [{name: http, port: 80}], selector: {gateway.networking.k8s.io/gateway-name: inference-gateway}}
---
apiVersion: v1
kind: Service
metadata: {name: ilb, namespace: inference}
spec: {ports: [{name: grpc-picker-0, port: 9002, appProtocol: grpc}], selector: {app: ilb}}
---
apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata: {name: vllm-llama, namespace: inference}
spec:
  selector: {matchLabels: {app: vllm-llama}}
  targetPorts: [{number: 8000}]
  endpointPickerRef: {name: ilb, port: {number: 9002}, failureMode: FailClose}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: llama, namespace: inference}
spec:
  parentRefs: [{name: inference-gateway}]
  rules:
    - matches: [{path: {type: PathPrefix, value: /v1/}}]
      backendRefs: [{group: inference.networking.k8s.io, kind: InferencePool, name: vllm-llama}]
`

// TestIstiodInferencePool: a real istiod with InferencePool support wires
// a pool whose picker is ILB the way ILB expects, and ILB answers that
// wiring. Read over xDS as the gateway pod: the route to the pool turns
// ext_proc on with full-duplex request and response bodies (trailers
// SEND), fail-closed, calling ILB's picker Service; the listener's filter
// receives and forwards envoy.lb; the pool's cluster picks hosts from
// envoy.lb x-gateway-destination-endpoint (override_host) and writes the
// served one back. Then ILB's picker listener (demo world, a source with
// routing picker) is played the stream that processing mode makes Envoy
// send, 50 times; and istiod's own wiring (listener filter, per-route
// override, pool load balancing, as fetched) runs in envoysim in front of
// ILB and the engines: 200 chat requests, each served by the replica ILB
// picked.
func TestIstiodInferencePool(t *testing.T) {
	k := kubetest.Start(t)
	k.Namespace(t, "inference")
	istiod := istiotest.Start(t, k, istiotest.Options{GatewayAPI: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := k.Apply(ctx, []byte(poolWorld)); err != nil {
		t.Fatal(err)
	}
	gw := istiotest.Proxy{
		Type: "router", Name: "inference-gateway-istio-0", Namespace: "inference", IP: "10.9.2.1",
		Labels: map[string]string{"gateway.networking.k8s.io/gateway-name": "inference-gateway"},
	}
	var per *extprocfilterv3.ExtProcOverrides
	var perAny *anypb.Any
	var listenerFilter *extprocfilterv3.ExternalProcessor
	var pool *clusterv3.Cluster
	waitUntil(t, "istiod's InferencePool wiring for the gateway", time.Minute, func() bool {
		res, err := istiod.Fetch(ctx, gw)
		if err != nil {
			t.Logf("fetch: %v", err)
			return false
		}
		per, listenerFilter, pool = nil, nil, nil
		for _, l := range res.Listeners {
			for _, hcm := range istiotest.HCMs(l) {
				for _, f := range hcm.GetHttpFilters() {
					if f.GetName() == envoy.ExtProcFilter {
						listenerFilter = &extprocfilterv3.ExternalProcessor{}
						if err := f.GetTypedConfig().UnmarshalTo(listenerFilter); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
		}
		for _, rc := range res.Routes {
			for _, vh := range rc.GetVirtualHosts() {
				for _, r := range vh.GetRoutes() {
					if a, ok := r.GetTypedPerFilterConfig()[envoy.ExtProcFilter]; ok {
						var pr extprocfilterv3.ExtProcPerRoute
						if err := a.UnmarshalTo(&pr); err != nil {
							t.Fatal(err)
						}
						per, perAny = pr.GetOverrides(), a
					}
				}
			}
		}
		for _, c := range res.Clusters {
			if strings.Contains(c.GetName(), "vllm-llama-ip-") {
				pool = c
			}
		}
		return per != nil && listenerFilter != nil && pool != nil
	})
	m := per.GetProcessingMode()
	if m.GetRequestBodyMode() != extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED || m.GetResponseBodyMode() != extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED ||
		m.GetRequestHeaderMode() != extprocfilterv3.ProcessingMode_SEND || m.GetRequestTrailerMode() != extprocfilterv3.ProcessingMode_SEND {
		t.Errorf("istiod's per-route processing mode %v: ILB's picker tests play full-duplex bodies with headers and trailers SEND", m)
	}
	if c := per.GetGrpcService().GetEnvoyGrpc().GetClusterName(); c != "outbound|9002||ilb.inference.svc.cluster.local" {
		t.Errorf("the picker's cluster %q, want ILB's Service port", c)
	}
	if per.GetFailureModeAllow().GetValue() {
		t.Error("failure_mode_allow on a FailClose pool")
	}
	if md := listenerFilter.GetMetadataOptions(); !strings.Contains(fmt.Sprint(md.GetReceivingNamespaces().GetUntyped()), header.LBNamespace) ||
		!strings.Contains(fmt.Sprint(md.GetForwardingNamespaces().GetUntyped()), header.LBNamespace) {
		t.Errorf("the listener's ext_proc metadata options %v: ILB's answer and the served host travel in %s", md, header.LBNamespace)
	}
	var oh overridehostv3.OverrideHost
	if p := pool.GetLoadBalancingPolicy().GetPolicies(); len(p) != 1 || p[0].GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(&oh) != nil {
		t.Fatalf("the pool's cluster %s: load balancing %v, want override_host", pool.GetName(), pool.GetLoadBalancingPolicy())
	}
	src := oh.GetOverrideHostSources()
	if len(src) == 0 || src[0].GetMetadata().GetKey() != header.LBNamespace || src[0].GetMetadata().GetPath()[0].GetKey() != header.DestinationEndpoint ||
		oh.GetSelectedHostKey().GetPath()[0].GetKey() != header.DestinationEndpointServed {
		t.Errorf("override_host %v: ILB sets %s/%s and reads the served host from %s", &oh, header.LBNamespace, header.DestinationEndpoint, header.DestinationEndpointServed)
	}

	// ILB, as that pool's picker, played the stream of that mode; then
	// istiod's wiring itself (its listener filter, its per-route
	// override, its pool cluster's load balancing) in envoysim in front
	// of ILB and the engines: 200 chat requests, each served by the
	// replica ILB picked.
	s := startPickerWorld(t)
	conn, err := grpc.NewClient(s.App.PickerAddr("gateway-us"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := extprocv3.NewExternalProcessorClient(conn)
	replicas := mustCluster(t, s, "us-east-vllm")
	for i := range 50 {
		body := fmt.Sprintf(`{"model":"llama3-8b","messages":[{"role":"user","content":"q%d"}],"stream":%v}`, i, i%2 == 0)
		kinds, list := playPickerMode(t, client, m, "", fmt.Sprintf("pool-%d", i), body)
		if ep := strings.Split(list, ",")[0]; !strings.Contains(strings.Join(replicas.Endpoints, " "), ep) || ep == "" {
			t.Fatalf("request %d: answers %v, picked %q; want a replica of %v", i, kinds, list, replicas.Endpoints)
		}
	}
	wiring := poolWiring{listenerFilter: listenerFilter, perRoute: perAny, lb: pool.GetLoadBalancingPolicy(), pickerCluster: per.GetGrpcService().GetEnvoyGrpc().GetClusterName()}
	url, _ := startPoolGateway(t, wiring, replicas.Endpoints, s.App.PickerAddr("gateway-us"))
	served := playPool(t, s, url, 200)
	t.Logf("istiod's wiring in envoysim: 200 requests served by %v", served)
}
