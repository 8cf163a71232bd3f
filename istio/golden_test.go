package istio

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/weights"
)

var update = flag.Bool("update", false, "rewrite the example manifests in examples/istio")

const (
	exampleDir    = "../examples/istio"
	exampleConfig = exampleDir + "/ilb.yaml"
	demoConfig    = "../examples/demo/ilb.yaml"
	demoDemand    = "../examples/demo/demand.yaml"
)

// examples are the manifests in examples/istio: the demo world in Istio
// mode, one file per source, rendered with the demo demand and the
// options its header comment shows.
var examples = []struct {
	file string
	opts Options
}{
	{"edge-eu.yaml", Options{Sources: []string{"edge-eu"}, Placement: Placement{
		Hosts: []string{"llm.example.com"}, Gateways: []string{"istio-ingress/llm-gateway"}, ListenerPort: 8080,
	}}},
	{"edge-us.yaml", Options{Sources: []string{"edge-us"}, Placement: Placement{
		Hosts: []string{"llm.inference.svc.cluster.local"}, ListenerPort: 80,
	}}},
}

// loadConfig loads a configuration file or fails the test.
func loadConfig(t *testing.T, path string) *config.Config {
	t.Helper()
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// demandWeights computes the weights of c for the demo demand with the
// configured policy: what `ilb render istio --demand` does.
func demandWeights(t *testing.T, c *config.Config) *weights.Weights {
	t.Helper()
	data, err := os.ReadFile(demoDemand)
	if err != nil {
		t.Fatal(err)
	}
	d, states, err := controller.ParseDemandFile(c, data)
	if err != nil {
		t.Fatal(err)
	}
	p, err := weights.NewPolicy(c.Controller.Policy)
	if err != nil {
		t.Fatal(err)
	}
	w, err := p.Compute(weights.Input{Config: c, Clusters: states, Demand: d, Now: time.Unix(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestExamples(t *testing.T) {
	c := loadConfig(t, exampleConfig)
	w := demandWeights(t, c)
	for _, ex := range examples {
		t.Run(ex.file, func(t *testing.T) {
			got, err := Render(c, w, ex.opts)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(exampleDir, ex.file)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./istio -update)", err)
			}
			if string(got) != string(want) {
				t.Errorf("%s is stale (run go test ./istio -update); got:\n%s", path, got)
			}
		})
	}
}

// TestExampleConfigIsTheDemo keeps examples/istio/ilb.yaml the demo world:
// it may differ only by what the Istio mode needs.
func TestExampleConfigIsTheDemo(t *testing.T) {
	demo, ex := loadConfig(t, demoConfig), loadConfig(t, exampleConfig)
	for i := range ex.Sources {
		// Istio's gateways and sidecars listen where Istio says: the
		// demo's listener per source is not the Istio example's.
		ex.Sources[i].Routing, ex.Sources[i].Listener = config.RoutingDraw, demo.Sources[i].Listener
	}
	for i := range ex.Clusters {
		ex.Clusters[i].Service = nil
	}
	if !reflect.DeepEqual(demo, ex) {
		t.Errorf("%s differs from %s beyond routing and services", exampleConfig, demoConfig)
	}
}
