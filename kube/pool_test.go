package kube_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/internal/kubetest"
	"github.com/ilbproject/ilb/kube"
	"github.com/ilbproject/ilb/signals"
)

// TestInferencePoolPods follows an InferencePool over 4 Pods: 4
// replicas, one not Ready drains, one deleted drains while it
// terminates and is gone once deleted (3), a Pod of another app is never
// seen, a second target port doubles the replicas, and a new selector
// moves the pool to other Pods.
func TestInferencePoolPods(t *testing.T) {
	api := kubetest.Start(t)
	cs := api.Client()
	ctx := context.Background()
	api.InstallInferencePool(t)
	api.Namespace(t, "inference")
	for i := range 4 {
		kubetest.RunningPod(t, cs, "inference", fmt.Sprintf("llama-%d", i), "llama", fmt.Sprintf("10.1.0.%d", i+1), true)
	}
	kubetest.RunningPod(t, cs, "inference", "qwen-0", "qwen", "10.2.0.1", true)
	api.ApplyPool(t, "inference", "llama-pool", "llama", 8000)

	d := kube.NewPool(clientsOf(t, api), "test", config.KubeDiscovery{Namespace: "inference", InferencePool: "llama-pool"}, time.Now)
	run(t, d)
	waitTargets(t, d, "4 pods", is("10.1.0.1:8000 serving", "10.1.0.2:8000 serving", "10.1.0.3:8000 serving", "10.1.0.4:8000 serving"))

	p1, err := cs.CoreV1().Pods("inference").Get(ctx, "llama-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubetest.SetPod(t, cs, p1, "10.1.0.2", false)
	_, took := waitTargets(t, d, "not ready", is("10.1.0.1:8000 serving", "10.1.0.2:8000 draining(pod not ready)", "10.1.0.3:8000 serving", "10.1.0.4:8000 serving"))
	t.Logf("pod not ready: seen %s after the status update", took)

	if err := cs.CoreV1().Pods("inference").Delete(ctx, "llama-3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTargets(t, d, "terminating", is("10.1.0.1:8000 serving", "10.1.0.2:8000 draining(pod not ready)", "10.1.0.3:8000 serving", "10.1.0.4:8000 draining(pod terminating)"))
	if err := cs.CoreV1().Pods("inference").Delete(ctx, "llama-3", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	_, took = waitTargets(t, d, "deleted", is("10.1.0.1:8000 serving", "10.1.0.2:8000 draining(pod not ready)", "10.1.0.3:8000 serving"))
	t.Logf("pod deleted: seen %s after the delete", took)

	api.ApplyPool(t, "inference", "llama-pool", "llama", 8000, 8001)
	waitTargets(t, d, "two ports", is("10.1.0.1:8000 serving", "10.1.0.1:8001 serving", "10.1.0.2:8000 draining(pod not ready)",
		"10.1.0.2:8001 draining(pod not ready)", "10.1.0.3:8000 serving", "10.1.0.3:8001 serving"))

	api.ApplyPool(t, "inference", "llama-pool", "qwen", 8000)
	waitTargets(t, d, "new selector", is("10.2.0.1:8000 serving"))
}

// TestInferencePoolProblems: a pool that does not exist, or one whose
// selector is empty, is an error naming it (the monitor holds the last
// replicas), never an empty fleet.
func TestInferencePoolProblems(t *testing.T) {
	api := kubetest.Start(t)
	api.InstallInferencePool(t)
	api.Namespace(t, "inference")
	d := kube.NewPool(clientsOf(t, api), "test", config.KubeDiscovery{Namespace: "inference", InferencePool: "missing"}, time.Now)
	run(t, d)
	waitTargets(t, d, "missing pool", errorHas("API server test: InferencePool inference/missing does not exist"))

	doc := `apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata: {name: missing, namespace: inference}
spec:
  selector: {matchLabels: {}}
  targetPorts: [{number: 8000}]
  endpointPickerRef: {name: ilb}
`
	if _, err := api.Apply(context.Background(), []byte(doc)); err != nil {
		t.Fatal(err)
	}
	waitTargets(t, d, "empty selector", errorHas("spec.selector.matchLabels is empty: it would select every Pod of the namespace"))
}

func errorHas(s string) func([]signals.Target, error) bool {
	return func(_ []signals.Target, err error) bool { return err != nil && strings.Contains(err.Error(), s) }
}

// TestTwoAPIServers: two clusters in two "regions", each an API server
// named by a kubeconfig context, discovered at once by one Discovery.
func TestTwoAPIServers(t *testing.T) {
	us, eu := kubetest.Start(t), kubetest.Start(t)
	ctx := context.Background()
	for _, a := range []struct {
		api  *kubetest.Server
		addr string
	}{{us, "10.10.0.1"}, {eu, "10.20.0.1"}} {
		cs := a.api.Client()
		a.api.Namespace(t, "inference")
		a.api.Service(t, "inference", "vllm")
		if _, err := cs.DiscoveryV1().EndpointSlices("inference").Create(ctx, endpointSlice("vllm-a", "vllm", a.addr), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := &config.Config{
		Kubernetes: config.Kubernetes{APIServers: []config.KubeAPIServer{
			{Name: "us", Kubeconfig: us.Kubeconfig("us-ctx", ""), Context: "us-ctx"},
			{Name: "eu", Kubeconfig: eu.Kubeconfig("eu-ctx", ""), Context: "eu-ctx"},
		}},
		Clusters: []config.EngineCluster{
			{Name: "us-vllm", Discovery: config.Discovery{Type: config.DiscoveryKube, Kubernetes: &config.KubeDiscovery{APIServer: "us", Namespace: "inference", Service: "vllm", Port: "http"}}},
			{Name: "eu-vllm", Discovery: config.Discovery{Type: config.DiscoveryKube, Kubernetes: &config.KubeDiscovery{APIServer: "eu", Namespace: "inference", Service: "vllm", Port: "http"}}},
			{Name: "static", Endpoints: []string{"127.0.0.1:1"}},
		},
	}
	disc, err := kube.New(cfg, kube.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(disc.APIServers(), ","); got != "us,eu" {
		t.Errorf("API servers %s, want us,eu", got)
	}
	ds := disc.Discoverers()
	if len(ds) != 2 {
		t.Fatalf("%d discoverers, want 2 (the static cluster has none)", len(ds))
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- disc.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for cluster, want := range map[string]string{"us-vllm": "10.10.0.1:8000 serving", "eu-vllm": "10.20.0.1:8000 serving"} {
		waitTargets(t, ds[cluster].(discoverer), cluster, is(want))
	}
}

// TestAPIServerOutage: with the API server stopped, Discover is an error
// that names the API server and since when (the monitor keeps its
// replicas); started again, the watch relists and catches up on what
// changed meanwhile, without a restart of the discoverer.
func TestAPIServerOutage(t *testing.T) {
	api := kubetest.Start(t)
	cs := api.Client()
	ctx := context.Background()
	api.Namespace(t, "inference")
	api.Service(t, "inference", "vllm")
	if _, err := cs.DiscoveryV1().EndpointSlices("inference").Create(ctx, endpointSlice("vllm-a", "vllm", "10.0.0.1", "10.0.0.2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d := kube.NewService(clientsOf(t, api), "us", config.KubeDiscovery{Namespace: "inference", Service: "vllm", Port: "http"}, time.Now)
	run(t, d)
	waitTargets(t, d, "before", is("10.0.0.1:8000 serving", "10.0.0.2:8000 serving"))

	api.Stop()
	_, took := waitTargets(t, d, "stale", errorHas("Service inference/vllm: the API server does not answer since "))
	t.Logf("stale reported %s after the API server was killed", took)

	api.Restart()
	start := time.Now()
	if _, err := cs.DiscoveryV1().EndpointSlices("inference").Create(ctx, endpointSlice("vllm-b", "vllm", "10.0.0.3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTargets(t, d, "caught up", is("10.0.0.1:8000 serving", "10.0.0.2:8000 serving", "10.0.0.3:8000 serving"))
	t.Logf("caught up %s after the API server was ready again", time.Since(start))
}
