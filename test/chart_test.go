package test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	authv1 "k8s.io/api/authentication/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/ha"
	"github.com/ilbproject/ilb/internal/kubetest"
	"github.com/ilbproject/ilb/kube"
	"github.com/ilbproject/ilb/signals"
	"github.com/ilbproject/ilb/weights"
)

const chartDir = "../charts/ilb"

// renderChart renders the chart as `helm template ilb charts/ilb -n ns`
// with values, and returns its manifests (templates in name order) and
// the documents, decoded.
func renderChart(t *testing.T, ns string, values map[string]any) ([]byte, []map[string]any) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	rv, err := util.ToRenderValues(ch, values, common.ReleaseOptions{Name: "ilb", Namespace: ns, IsInstall: true}, common.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	var all bytes.Buffer
	var docs []map[string]any
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		all.WriteString("---\n" + files[name] + "\n")
		dec := yaml.NewDecoder(strings.NewReader(files[name]))
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); err != nil {
				break
			}
			if len(doc) > 0 {
				docs = append(docs, doc)
			}
		}
	}
	return all.Bytes(), docs
}

// kinds counts the rendered documents by kind.
func kinds(docs []map[string]any) map[string]int {
	out := map[string]int{}
	for _, d := range docs {
		out[d["kind"].(string)]++
	}
	return out
}

// find returns the first document of kind.
func find(t *testing.T, docs []map[string]any, kind string) map[string]any {
	t.Helper()
	for _, d := range docs {
		if d["kind"] == kind {
			return d
		}
	}
	t.Fatalf("no %s rendered", kind)
	return nil
}

// findNamed returns the document of kind named name.
func findNamed(t *testing.T, docs []map[string]any, kind, name string) map[string]any {
	t.Helper()
	for _, d := range docs {
		if d["kind"] == kind && d["metadata"].(map[string]any)["name"] == name {
			return d
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return nil
}

// chartConfig is ILB's configuration in the rendered ConfigMap, parsed.
func chartConfig(t *testing.T, docs []map[string]any) *config.Config {
	t.Helper()
	text := find(t, docs, "ConfigMap")["data"].(map[string]any)["ilb.yaml"].(string)
	c, err := config.Parse([]byte(text))
	if err != nil {
		t.Fatalf("the chart's ILB configuration does not validate: %v\n%s", err, text)
	}
	return c
}

// TestChartRenders renders the chart with named sets of values (helm's
// own engine and linter): it lints clean, ILB's configuration in the
// ConfigMap passes ilb's validation with listen: on the container ports,
// the pod runs as non-root on a read-only root filesystem with its
// probes on /healthz, and each option brings its objects.
func TestChartRenders(t *testing.T) {
	demo, err := os.ReadFile("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		values map[string]any
		want   map[string]int // kinds
		check  func(t *testing.T, docs []map[string]any)
	}{
		{
			"config file with a Service and a pool, two watched namespaces, monitoring",
			map[string]any{
				"configYAML":     kubeDemo,
				"replicaCount":   2,
				"rbac":           map[string]any{"namespaces": []any{"inference", "models"}},
				"serviceMonitor": map[string]any{"enabled": true},
				"prometheusRule": map[string]any{"enabled": true},
			},
			map[string]int{
				"ConfigMap": 1, "Secret": 1, "Deployment": 1, "Service": 1, "ServiceAccount": 1, "Role": 3, "RoleBinding": 3,
				"PodDisruptionBudget": 1, "ServiceMonitor": 1, "PrometheusRule": 1,
			},
			func(t *testing.T, docs []map[string]any) {
				if got := ruleResources(find(t, docs, "Role")); got != "endpointslices,services,pods,inferencepools" {
					t.Errorf("Role rules on %s, want endpointslices,services,pods,inferencepools", got)
				}
				// Two replicas: HA on a Lease in the release's namespace.
				ha := findNamed(t, docs, "Role", "ilb-ha")
				if got := ruleResources(ha); got != "leases,configmaps" || ha["metadata"].(map[string]any)["namespace"] != "inference" {
					t.Errorf("HA Role on %s in %v, want leases,configmaps in inference", got, ha["metadata"])
				}
				c := chartConfig(t, docs)
				if c.HA == nil || c.HA.Kubernetes == nil || *c.HA.Kubernetes != (config.HAKubernetes{Namespace: "inference", Lease: "ilb"}) {
					t.Errorf("ha = %+v; want ha.kubernetes in inference on Lease ilb", c.HA)
				}
				rule := find(t, docs, "PrometheusRule")
				alerts, err := os.ReadFile("../examples/observability/prometheus-alerts.yaml")
				if err != nil {
					t.Fatal(err)
				}
				var want map[string]any
				if err := yaml.Unmarshal(alerts, &want); err != nil {
					t.Fatal(err)
				}
				got, _ := yaml.Marshal(rule["spec"])
				wantY, _ := yaml.Marshal(want)
				if !bytes.Equal(got, wantY) {
					t.Errorf("the PrometheusRule's spec is not examples/observability/prometheus-alerts.yaml")
				}
			},
		},
		{
			"several replicas on your own etcd: no HA Role",
			map[string]any{"configYAML": string(demo) + "ha: {endpoints: [\"https://etcd-0:2379\"]}\n", "replicaCount": 3},
			map[string]int{"ConfigMap": 1, "Secret": 1, "Deployment": 1, "Service": 1, "ServiceAccount": 1, "PodDisruptionBudget": 1},
			func(t *testing.T, docs []map[string]any) {
				if c := chartConfig(t, docs); c.HA == nil || c.HA.Kubernetes != nil || len(c.HA.Endpoints) != 1 {
					t.Errorf("ha = %+v; want the configuration's etcd section kept", c.HA)
				}
			},
		},
		{
			"token budgets over three replicas: each enforces a third",
			map[string]any{"configYAML": string(demo) + "ha: {endpoints: [\"https://etcd-0:2379\"]}\ntenants: {budgets: [{name: acme, tokens_per_minute: 9000}]}\n", "replicaCount": 3},
			map[string]int{"ConfigMap": 1, "Secret": 1, "Deployment": 1, "Service": 1, "ServiceAccount": 1, "PodDisruptionBudget": 1},
			func(t *testing.T, docs []map[string]any) {
				if c := chartConfig(t, docs); c.Tenants.BudgetSplit != 3 || len(c.Tenants.Budgets) != 1 {
					t.Errorf("tenants = %+v; want the budget split over the 3 replicas", c.Tenants)
				}
			},
		},
		{
			"ha.kubernetes of your own: the chart fills its namespace",
			map[string]any{"configYAML": string(demo) + "ha: {kubernetes: {lease: fleet-a}}\n"},
			map[string]int{"ConfigMap": 1, "Secret": 1, "Deployment": 1, "Service": 1, "ServiceAccount": 1, "Role": 1, "RoleBinding": 1, "PodDisruptionBudget": 1},
			func(t *testing.T, docs []map[string]any) {
				if c := chartConfig(t, docs); c.HA == nil || c.HA.Kubernetes == nil || *c.HA.Kubernetes != (config.HAKubernetes{Namespace: "inference", Lease: "fleet-a"}) {
					t.Errorf("ha = %+v; want Lease fleet-a in the release's namespace", c.HA)
				}
			},
		},
		{
			"an endpoint picker: its port on the pod and the Service",
			map[string]any{"configYAML": strings.Replace(kubeDemo, "sources:\n", "sources:\n  - {name: gateway, region: us-east, allowed_regions: [us-east], routing: picker, picker: {listen: \"0.0.0.0:9002\", cluster: us-east-vllm}}\n", 1)},
			map[string]int{"ConfigMap": 1, "Secret": 1, "Deployment": 1, "Service": 1, "ServiceAccount": 1, "Role": 1, "RoleBinding": 1, "PodDisruptionBudget": 1},
			func(t *testing.T, docs []map[string]any) {
				svc := fmt.Sprint(find(t, docs, "Service")["spec"].(map[string]any)["ports"])
				if !strings.Contains(svc, "name:grpc-picker-0") || !strings.Contains(svc, "port:9002") {
					t.Errorf("Service ports %s lack the picker's 9002", svc)
				}
				pod := find(t, docs, "Deployment")["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
				if ports := fmt.Sprint(pod["containers"].([]any)[0].(map[string]any)["ports"]); !strings.Contains(ports, "containerPort:9002") {
					t.Errorf("container ports %s lack the picker's 9002", ports)
				}
			},
		},
		{
			"static endpoints: no Role",
			map[string]any{"configYAML": string(demo)},
			map[string]int{"ConfigMap": 1, "Secret": 1, "Deployment": 1, "Service": 1, "ServiceAccount": 1, "PodDisruptionBudget": 1},
			nil,
		},
		{
			"defaults: a Service, EndpointSlices only", nil,
			map[string]int{"ConfigMap": 1, "Secret": 1, "Deployment": 1, "Service": 1, "ServiceAccount": 1, "Role": 1, "RoleBinding": 1, "PodDisruptionBudget": 1},
			func(t *testing.T, docs []map[string]any) {
				if got := ruleResources(find(t, docs, "Role")); got != "endpointslices,services" {
					t.Errorf("Role rules on %s, want endpointslices and services", got)
				}
			},
		},
		{
			"admin over TLS, IPv6, extra volumes",
			map[string]any{
				"configYAML":        kubeDemo + "security:\n  tls: {cert_file: /etc/ilb/tls/tls.crt, key_file: /etc/ilb/tls/tls.key}\n  admin: {tls: true}\n",
				"listenHost":        "::",
				"extraVolumes":      []any{map[string]any{"name": "tls", "secret": map[string]any{"secretName": "ilb-tls"}}},
				"extraVolumeMounts": []any{map[string]any{"name": "tls", "mountPath": "/etc/ilb/tls", "readOnly": true}},
			},
			map[string]int{"ConfigMap": 1, "Secret": 1, "Deployment": 1, "Service": 1, "ServiceAccount": 1, "Role": 1, "RoleBinding": 1, "PodDisruptionBudget": 1},
			func(t *testing.T, docs []map[string]any) {
				pod := find(t, docs, "Deployment")["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
				ctr := pod["containers"].([]any)[0].(map[string]any)
				if got := ctr["readinessProbe"].(map[string]any)["httpGet"].(map[string]any)["scheme"]; got != "HTTPS" {
					t.Errorf("probe scheme %v, want HTTPS for an admin API over TLS", got)
				}
				if got := fmt.Sprint(ctr["volumeMounts"]); !strings.Contains(got, "/etc/ilb/tls") {
					t.Errorf("mounts %s lack the extra one", got)
				}
			},
		},
		{"istio manifests, no RBAC, no PDB", map[string]any{
			"istio":               map[string]any{"manifests": "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x}\nspec: {host: x}\n"},
			"rbac":                map[string]any{"create": false},
			"podDisruptionBudget": map[string]any{"enabled": false},
		}, map[string]int{"ConfigMap": 1, "Secret": 1, "Deployment": 1, "Service": 1, "ServiceAccount": 1, "DestinationRule": 1}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			linter := lint.RunAll(chartDir, tt.values, "inference")
			for _, m := range linter.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m.Err)
				}
			}
			_, docs := renderChart(t, "inference", tt.values)
			if got := kinds(docs); !mapsEqual(got, tt.want) {
				t.Errorf("kinds %v, want %v", got, tt.want)
			}
			cm := find(t, docs, "ConfigMap")
			text := cm["data"].(map[string]any)["ilb.yaml"].(string)
			c, err := config.Parse([]byte(text))
			if err != nil {
				t.Fatalf("the chart's ILB configuration does not validate: %v\n%s", err, text)
			}
			host := "0.0.0.0"
			if tt.values["listenHost"] == "::" {
				host = "[::]"
			}
			if c.Listen != (config.Listen{XDS: host + ":18000", ExtProc: host + ":18001", Admin: host + ":18002"}) {
				t.Errorf("listen %+v, want the container ports on %s", c.Listen, host)
			}
			if !c.Security.Admin.TLS && c.Security.Admin.TokenFile != "/etc/ilb/admin/token" {
				t.Errorf("security.admin.token_file %q, want the mounted admin token /etc/ilb/admin/token", c.Security.Admin.TokenFile)
			}
			pod := find(t, docs, "Deployment")["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
			ctr := pod["containers"].([]any)[0].(map[string]any)
			sc := ctr["securityContext"].(map[string]any)
			if sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false || pod["securityContext"].(map[string]any)["runAsNonRoot"] != true {
				t.Errorf("security context %v / %v: want non-root, read-only root, no privilege escalation", pod["securityContext"], sc)
			}
			for _, p := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
				if got := ctr[p].(map[string]any)["httpGet"].(map[string]any)["path"]; got != "/healthz" {
					t.Errorf("%s on %v, want /healthz", p, got)
				}
			}
			if tt.check != nil {
				tt.check(t, docs)
			}
		})
	}
}

// kubeDemo is the demo configuration with us-east-vllm's replicas from
// Service vllm and us-west-sglang's from InferencePool sglang.
var kubeDemo = func() string {
	b, err := os.ReadFile("../examples/demo/ilb.yaml")
	if err != nil {
		panic(err)
	}
	s := strings.Replace(string(b), `endpoints: ["127.0.0.1:18101", "127.0.0.1:18102"]`,
		`discovery: {type: kubernetes, kubernetes: {namespace: inference, service: vllm, port: http}}`, 1)
	return strings.Replace(s, `endpoints: ["127.0.0.1:18111"]`,
		`discovery: {type: kubernetes, kubernetes: {namespace: models, inference_pool: sglang}}`, 1)
}()

// ruleResources lists a Role's resources, comma-separated, in order.
func ruleResources(role map[string]any) string {
	var out []string
	for _, r := range role["rules"].([]any) {
		for _, res := range r.(map[string]any)["resources"].([]any) {
			out = append(out, res.(string))
		}
	}
	return strings.Join(out, ",")
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestChartAlertsAreTheExamples: the chart's copy of the alerting rules
// is the example file, byte for byte.
func TestChartAlertsAreTheExamples(t *testing.T) {
	a, err := os.ReadFile("../examples/observability/prometheus-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(chartDir + "/files/prometheus-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("charts/ilb/files/prometheus-alerts.yaml differs from examples/observability/prometheus-alerts.yaml: copy it over")
	}
}

// monitoringCRDs stand in for the Prometheus Operator's CRDs (any
// content accepted) so that the chart's ServiceMonitor and
// PrometheusRule can be applied.
const monitoringCRDs = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: ServiceMonitor, plural: servicemonitors, singular: servicemonitor, listKind: ServiceMonitorList}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: prometheusrules.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: PrometheusRule, plural: prometheusrules, singular: prometheusrule, listKind: PrometheusRuleList}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
`

// TestChartOnAPIServer applies the rendered chart to a real API server
// with server-side apply (every object accepted, the pod template
// validated), then acts as the chart's ServiceAccount with a token the
// API server issues for it: ILB's discovery lists and watches what it
// needs in the watched namespace, and everything else is refused 403 —
// Secrets and ConfigMaps there, Pods elsewhere, any write.
func TestChartOnAPIServer(t *testing.T) {
	api := kubetest.Start(t)
	ctx := context.Background()
	api.InstallInferencePool(t)
	api.Namespace(t, "inference")
	api.Namespace(t, "models")
	api.Namespace(t, "elsewhere")
	api.Service(t, "inference", "vllm")
	if _, err := api.Apply(ctx, []byte(monitoringCRDs)); err != nil {
		t.Fatal(err)
	}
	// A Service in inference, an InferencePool in models: the Role in
	// each namespace grants both (the rules follow the configuration).
	manifests, docs := renderChart(t, "inference", map[string]any{
		"configYAML":     kubeDemo,
		"replicaCount":   2,
		"rbac":           map[string]any{"namespaces": []any{"inference", "models"}},
		"serviceMonitor": map[string]any{"enabled": true},
		"prometheusRule": map[string]any{"enabled": true},
	})
	applied, err := api.Apply(ctx, manifests)
	if err != nil {
		t.Fatalf("the API server refused the chart: %v", err)
	}
	if len(applied) != len(docs) {
		t.Errorf("%d objects applied, %d rendered", len(applied), len(docs))
	}

	admin := api.Client()
	tr, err := admin.CoreV1().ServiceAccounts("inference").CreateToken(ctx, "ilb",
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	as, err := kubernetes.NewForConfig(api.ConfigFor(tr.Status.Token))
	if err != nil {
		t.Fatal(err)
	}
	allowed := []struct {
		name string
		do   func() error
	}{
		{"list services", func() error { _, err := as.CoreV1().Services("inference").List(ctx, metav1.ListOptions{}); return err }},
		{"list endpointslices", func() error {
			_, err := as.DiscoveryV1().EndpointSlices("inference").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list pods", func() error { _, err := as.CoreV1().Pods("models").List(ctx, metav1.ListOptions{}); return err }},
		{"list inferencepools", func() error {
			kc, err := kube.NewClients(api.ConfigFor(tr.Status.Token))
			if err != nil {
				return err
			}
			_, err = kc.Dynamic.Resource(schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}).Namespace("models").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"watch pods", func() error {
			w, err := as.CoreV1().Pods("models").Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}},
	}
	for _, a := range allowed {
		if err := a.do(); err != nil {
			t.Errorf("as the chart's ServiceAccount, %s: %v; want allowed", a.name, err)
		}
	}
	refused := []struct {
		name string
		do   func() error
	}{
		{"list secrets", func() error { _, err := as.CoreV1().Secrets("inference").List(ctx, metav1.ListOptions{}); return err }},
		{"get a secret", func() error {
			_, err := as.CoreV1().Secrets("inference").Get(ctx, "any", metav1.GetOptions{})
			return err
		}},
		{"list configmaps where no HA group lives", func() error {
			_, err := as.CoreV1().ConfigMaps("models").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"delete a lease", func() error {
			return as.CoordinationV1().Leases("inference").Delete(ctx, "ilb", metav1.DeleteOptions{})
		}},
		{"list leases elsewhere", func() error {
			_, err := as.CoordinationV1().Leases("models").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list pods elsewhere", func() error { _, err := as.CoreV1().Pods("elsewhere").List(ctx, metav1.ListOptions{}); return err }},
		{"list pods cluster-wide", func() error { _, err := as.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); return err }},
		{"delete a pod", func() error { return as.CoreV1().Pods("inference").Delete(ctx, "any", metav1.DeleteOptions{}) }},
		{"list nodes", func() error { _, err := as.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err }},
	}
	for _, r := range refused {
		if err := r.do(); !errors.IsForbidden(err) {
			t.Errorf("as the chart's ServiceAccount, %s: %v; want 403 Forbidden", r.name, err)
		}
	}

	// ILB's HA group, as the rendered configuration says, with that token:
	// a replica leads on the Lease and publishes.
	haReplicaAs(t, api, chartConfig(t, docs), api.Kubeconfig("sa", tr.Status.Token))

	// ILB's own discovery, with that token from a kubeconfig.
	if _, err := admin.DiscoveryV1().EndpointSlices("inference").Create(ctx, endpointSliceOf("vllm", "10.3.0.1", 8000), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{
		Kubernetes: config.Kubernetes{APIServers: []config.KubeAPIServer{{Name: "here", Kubeconfig: api.Kubeconfig("sa", tr.Status.Token)}}},
		Clusters: []config.EngineCluster{{Name: "vllm", Discovery: config.Discovery{
			Type:       config.DiscoveryKube,
			Kubernetes: &config.KubeDiscovery{Namespace: "inference", Service: "vllm", Port: "http"},
		}}},
	}
	kd, err := kube.New(cfg, kube.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- kd.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	d := kd.Discoverers()["vllm"].(signals.Watcher)
	deadline := time.After(time.Minute)
	for {
		ts, err := d.Discover(ctx)
		if err == nil && len(ts) == 1 && ts[0].Address == "10.3.0.1:8000" {
			break
		}
		select {
		case <-d.Changed():
		case <-deadline:
			t.Fatalf("discovery as the chart's ServiceAccount: %v, %v", ts, err)
		}
	}
}

// endpointSliceOf is an EndpointSlice of Service svc listing ip, ready,
// on port "http" = port.
func endpointSliceOf(svc, ip string, port int32) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svc + "-a", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(port)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
}

// haReplicaAs runs an HA replica of c (ha.kubernetes) against the API
// server through kubeconfig: it must lead, publish a version and share
// its demand, each a request the chart's RBAC must allow.
func haReplicaAs(t *testing.T, api *kubetest.Server, c *config.Config, kubeconfig string) {
	t.Helper()
	c.Kubernetes.APIServers = []config.KubeAPIServer{{Name: "here", Kubeconfig: kubeconfig}}
	c.HA.Kubernetes.APIServer = "here"
	c.HA.Replica = "ilb-0"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	w, err := weights.New("test", time.Now(), []weights.Cell{{Source: c.Sources[0].Name, Model: c.Models[0].Name, Targets: []weights.Target{{Cluster: c.Clusters[0].Name, Weight: weights.Total}}}})
	if err != nil {
		t.Fatal(err)
	}
	published := make(chan error, 1)
	var rep *ha.Replica
	rep, err = ha.New(ha.Options{
		Config: c,
		Demand: func(now time.Time) (weights.Demand, time.Time) { return weights.Demand{}, now },
		Lead: func(ctx context.Context) error {
			_, err := rep.Publisher().Prepare(ctx, w)
			published <- err
			<-ctx.Done()
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rep.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	select {
	case err := <-published:
		if err != nil {
			t.Fatalf("as the chart's ServiceAccount, the HA leader's publication: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("as the chart's ServiceAccount, no replica led within a minute: %+v", rep.Status())
	}
	deadline := time.Now().Add(time.Minute)
	for rep.Current() == nil || rep.Current().Version() != w.Version() {
		if time.Now().After(deadline) {
			t.Fatalf("the published version was not installed: %+v", rep.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cms, err := api.Client().CoreV1().ConfigMaps(c.HA.Kubernetes.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "ilb.dev/ha-group=" + c.HA.Kubernetes.Lease})
	if err != nil || len(cms.Items) == 0 {
		t.Fatalf("the HA group's ConfigMaps: %d, %v", len(cms.Items), err)
	}
}
