package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/config"
)

// kubeCluster is a cluster of base found through Kubernetes discovery.
const kubeCluster = `  - name: k8s
    region: us
    engine: vllm
    models: [m1]
    profile: p
    discovery:
      type: kubernetes
      kubernetes: {namespace: inference, service: vllm, port: http}
`

func TestKubernetesParses(t *testing.T) {
	tests := []struct {
		name, yaml   string
		wantAPI      string // the API server the cluster resolves to
		wantAPIs     []string
		wantDiscover config.KubeDiscovery
	}{
		{
			"in-cluster by default", base + kubeCluster, config.InClusterAPIServer,
			[]string{config.InClusterAPIServer},
			config.KubeDiscovery{Namespace: "inference", Service: "vllm", Port: "http"},
		},
		{
			"a long, numeric Service port name", base + strings.Replace(kubeCluster, "port: http", "port: \"8000-openai-compatible-http-port\"", 1),
			config.InClusterAPIServer,
			[]string{config.InClusterAPIServer},
			config.KubeDiscovery{Namespace: "inference", Service: "vllm", Port: "8000-openai-compatible-http-port"},
		},
		{
			"the only API server", base + kubeCluster + "kubernetes:\n  api_servers: [{name: us, kubeconfig: /etc/kube/us, context: us-east}]\n", "us",
			[]string{"us"},
			config.KubeDiscovery{Namespace: "inference", Service: "vllm", Port: "http"},
		},
		{
			"an InferencePool on a named API server", base + strings.Replace(kubeCluster, "{namespace: inference, service: vllm, port: http}", "{api_server: eu, namespace: inference, inference_pool: llama.pool}", 1) +
				"kubernetes:\n  api_servers: [{name: us, kubeconfig: k}, {name: eu, kubeconfig: k, context: eu}]\n", "eu",
			[]string{"us", "eu"},
			config.KubeDiscovery{APIServer: "eu", Namespace: "inference", InferencePool: "llama.pool"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			cl := c.Clusters[2]
			if cl.Discovery.Type != config.DiscoveryKube || *cl.Discovery.Kubernetes != tt.wantDiscover {
				t.Errorf("discovery %+v %+v, want kubernetes %+v", cl.Discovery, cl.Discovery.Kubernetes, tt.wantDiscover)
			}
			if a, ok := c.KubeAPIServer(cl.Discovery.Kubernetes.APIServer); !ok || a.Name != tt.wantAPI {
				t.Errorf("API server %+v %v, want %s", a, ok, tt.wantAPI)
			}
			if got := strings.Join(c.KubeAPIServerNames(), ","); got != strings.Join(tt.wantAPIs, ",") {
				t.Errorf("API servers %s, want %v", got, tt.wantAPIs)
			}
		})
	}
}

// TestKubernetesProblems: every problem of the section and of a cluster's
// kubernetes discovery is named by its field path, with the value and
// what was expected, all at once.
func TestKubernetesProblems(t *testing.T) {
	disc := func(d string) string {
		return base + strings.Replace(kubeCluster, "{namespace: inference, service: vllm, port: http}", d, 1)
	}
	tests := []struct {
		name, yaml string
		want       []string // each in one problem
	}{
		{
			"no section", base + strings.Replace(kubeCluster, "      kubernetes: {namespace: inference, service: vllm, port: http}\n", "", 1),
			[]string{"clusters[2].discovery.kubernetes: a kubernetes discovery needs this section: namespace and service (or inference_pool)"},
		},
		{
			"neither service nor pool", disc("{namespace: inference}"),
			[]string{"clusters[2].discovery.kubernetes: name a service or an inference_pool to take the replicas from"},
		},
		{
			"both", disc("{namespace: inference, service: a, inference_pool: b}"),
			[]string{`clusters[2].discovery.kubernetes: service "a" and inference_pool "b" are both set: keep one`},
		},
		{"bad names", disc(`{namespace: Inference, service: "vllm_svc", port: "HTTP"}`), []string{
			`clusters[2].discovery.kubernetes.namespace: "Inference" is not a namespace name`,
			`clusters[2].discovery.kubernetes.service: "vllm_svc" is not a Service name`,
			`clusters[2].discovery.kubernetes.port: "HTTP" is not a Service port name`,
		}},
		{
			"port name with an underscore", disc(`{namespace: inference, service: vllm, port: "grpc_api"}`),
			[]string{`clusters[2].discovery.kubernetes.port: "grpc_api" is not a Service port name`},
		},
		{
			"port with a pool", disc(`{namespace: inference, inference_pool: pool, port: http}`),
			[]string{`clusters[2].discovery.kubernetes.port: port "http" is for a service: an InferencePool's targetPorts give its ports`},
		},
		{
			"bad pool name", disc(`{namespace: inference, inference_pool: "-pool"}`),
			[]string{`clusters[2].discovery.kubernetes.inference_pool: "-pool" is not an InferencePool name`},
		},
		{
			"unknown API server", disc(`{api_server: mars, namespace: inference, service: vllm}`),
			[]string{`clusters[2].discovery.kubernetes.api_server: unknown API server "mars": want one of in-cluster`},
		},
		{
			"API server unnamed among several", disc(`{namespace: inference, service: vllm}`) + "kubernetes:\n  api_servers: [{name: us, kubeconfig: k}, {name: eu, kubeconfig: k}]\n",
			[]string{"clusters[2].discovery.kubernetes.api_server: kubernetes.api_servers has 2 API servers: name one of us, eu"},
		},
		{"API server problems", base + "kubernetes:\n  api_servers: [{name: us, context: x}, {name: us, kubeconfig: k}, {name: 'a b'}]\n", []string{
			`kubernetes.api_servers[0].context: context "x" needs a kubeconfig file`,
			`kubernetes.api_servers[1].name: duplicate API server "us"`,
			`kubernetes.api_servers[2].name: API server name "a b" is not valid`,
		}},
		{
			"section on another type", base + "  - {name: x, region: us, engine: vllm, models: [m1], profile: p, endpoints: [\"a:1\"], discovery: {kubernetes: {namespace: n, service: s}}}\n",
			[]string{"clusters[2].discovery.kubernetes: set, but discovery.type is static: want type kubernetes, or remove the section"},
		},
		{
			"signals off", base + kubeCluster + "signals: {disabled: true}\n",
			[]string{"clusters[2].discovery.kubernetes: kubernetes discovery needs the signals monitor: signals.disabled is set"},
		},
		{
			"endpoints too", base + strings.Replace(kubeCluster, "    discovery:", "    endpoints: [\"a:1\"]\n    discovery:", 1),
			[]string{`clusters[2].endpoints: cluster "k8s" lists endpoints and uses kubernetes discovery: keep one`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("missing %q in:\n%s", w, msg)
				}
			}
			var fe *config.FieldError
			if !errors.As(err, &fe) {
				t.Errorf("%T is not a *config.FieldError", err)
			}
		})
	}
}

// TestKubernetesUnknownField: the section decodes strictly.
func TestKubernetesUnknownField(t *testing.T) {
	_, err := config.Parse([]byte(strings.Replace(base+kubeCluster, "port: http}", "port: http, selector: x}", 1)))
	if err == nil || !strings.Contains(err.Error(), "field selector not found in type config.KubeDiscovery") {
		t.Errorf("err = %v, want the unknown field named", err)
	}
}
