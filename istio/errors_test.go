package istio

import (
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

// TestErrors: every problem is reported, naming the field and the value.
func TestErrors(t *testing.T) {
	eu := Options{Sources: []string{"edge-eu"}, Placement: Placement{Hosts: []string{"llm.example.com"}}}
	us := Options{Sources: []string{"edge-us"}, Placement: Placement{Hosts: []string{"llm.example.com"}}}
	for _, tt := range []struct {
		name   string
		config string // default exampleConfig
		edit   func(c *config.Config)
		opts   Options
		weight func(t *testing.T, w *weights.Weights) *weights.Weights
		want   []string // each must appear in the error; none: no error
	}{
		{
			name: "no source has routing cluster", config: demoConfig, opts: Options{Placement: eu.Placement},
			want: []string{`no source has routing "cluster"`},
		},
		{
			name: "an unknown source", opts: Options{Sources: []string{"edge-mars"}, Placement: eu.Placement},
			want: []string{`sources[0]: unknown source "edge-mars"`},
		},
		{
			name: "a draw source", edit: func(c *config.Config) { c.Sources[0].Routing = config.RoutingDraw }, opts: us,
			want: []string{`sources[0]: source "edge-us" has routing "draw": Istio needs routing "cluster"`},
		},
		{name: "several problems at once", opts: Options{
			Namespace: "Bad_NS", Sources: []string{"edge-eu"},
			Placement: Placement{Hosts: []string{"*", "LLM.example.com"}, WorkloadSelector: map[string]string{"bad key": "v"}},
			PerSource: map[string]Placement{"edge-mars": {}},
		}, want: []string{
			`namespace "Bad_NS": want a Kubernetes namespace name`,
			`per-source placement "edge-mars": unknown source`,
			`source edge-eu: hosts[0] "*": Istio allows the wildcard host only for gateways`,
			`hosts[1] "LLM.example.com": want a lowercase DNS name`,
			`workload selector bad key=v: want a Kubernetes label key and value`,
		}},
		{
			name: "no hosts", opts: Options{Sources: []string{"edge-eu"}},
			want: []string{"source edge-eu: hosts: none given"},
		},
		{
			name: "a bad gateway", opts: Options{Sources: []string{"edge-eu"}, Placement: Placement{Hosts: []string{"a.b"}, Gateways: []string{"a/b/c"}}},
			want: []string{`gateways[0] "a/b/c": want namespace/name, name or "mesh"`},
		},
		{name: "two sources on the same proxies and hosts", opts: Options{Placement: Placement{
			Hosts: []string{"llm.example.com"}, WorkloadSelector: map[string]string{"istio": "ingressgateway"},
		}}, want: []string{
			"sources edge-us and edge-eu select the same proxies (istio=ingressgateway)",
			"sources edge-us and edge-eu: both VirtualServices serve hosts [llm.example.com] on gateways [mesh]",
		}},
		{
			name: "a cluster the source may use has no service", edit: func(c *config.Config) { c.Clusters[0].Service = nil }, opts: us,
			want: []string{"clusters[0].service: cluster us-east-vllm has none, and sources edge-us may use it"},
		},
		{name: "a cluster outside the residency needs no service", edit: func(c *config.Config) { c.Clusters[0].Service = nil }, opts: eu},
		{name: "a shared host with two protocols", edit: func(c *config.Config) {
			c.Clusters[3].Service = c.Clusters[2].Service
			c.Clusters[3].Protocol = config.ProtocolHTTP2
		}, opts: eu, want: []string{
			"clusters[3].service.host: eu-west-vllm.inference.svc.cluster.local is also the host of cluster eu-west-vllm, which speaks http1, not http2",
		}},
		{name: "weights outside the residency", opts: eu, weight: func(t *testing.T, w *weights.Weights) *weights.Weights {
			return withCell(t, w, "edge-eu", "llama-3.1-8b-instruct", []weights.Target{{Cluster: "us-east-vllm", Weight: weights.Total}})
		}, want: []string{"cell (edge-eu, llama-3.1-8b-instruct): cluster us-east-vllm is in region us-east, outside the allowed regions [eu-west] of source edge-eu"}},
		{name: "weights without a cell", opts: eu, weight: func(t *testing.T, w *weights.Weights) *weights.Weights {
			var cells []weights.Cell
			for _, cl := range w.Cells() {
				if cl.Model != "qwen2.5-7b-instruct" {
					cells = append(cells, cl)
				}
			}
			nw, err := weights.New("test", time.Unix(0, 0), cells)
			if err != nil {
				t.Fatal(err)
			}
			return nw
		}, want: []string{"no cell for source edge-eu and model qwen2.5-7b-instruct: were they computed for this configuration?"}},
		{name: "a duration Istio cannot take", edit: func(c *config.Config) {
			c.Envoy.Outlier.Interval = config.Duration(500 * time.Microsecond)
			c.Envoy.SlowStart = config.Duration(1500 * time.Microsecond)
		}, opts: eu, want: []string{
			"envoy.outlier.interval: 500µs: Istio takes whole milliseconds, at least 1ms",
			"envoy.slow_start: 1.5ms",
		}},
		{
			name: "a fractional panic threshold", edit: func(c *config.Config) { c.Envoy.HealthyPanicThreshold = 12.5 }, opts: eu,
			want: []string{"envoy.healthy_panic_threshold: 12.5: Istio takes whole percents in [0, 100]"},
		},
		{
			name: "a name Kubernetes refuses", edit: func(c *config.Config) { c.Clusters[3].Name = "eu-west-tgi_" }, opts: eu,
			want: []string{`"eu-west-tgi_" cannot name a Kubernetes object ("ilb-eu-west-tgi-" is not a DNS-1123 subdomain)`},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.config
			if path == "" {
				path = exampleConfig
			}
			c := loadConfig(t, path)
			if tt.edit != nil {
				tt.edit(c)
			}
			w, err := weights.ComputeStatic(c)
			if err != nil {
				t.Fatal(err)
			}
			if tt.weight != nil {
				w = tt.weight(t, w)
			}
			_, err = Render(c, w, tt.opts)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error lacks %q:\n%v", want, err)
				}
			}
		})
	}
}
