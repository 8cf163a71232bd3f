package istio

import (
	"slices"
	"strings"
	"testing"
	"time"

	networkingv1 "istio.io/api/networking/v1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/weights"
)

// TestVariants covers the settings that change the shape of the objects.
func TestVariants(t *testing.T) {
	base := Options{Sources: []string{"edge-us"}, Placement: Placement{Hosts: []string{"llm.example.com"}}}
	type check func(t *testing.T, vs *networkingv1.VirtualService, ef *networkingv1alpha3.EnvoyFilter, drs []Object)
	for _, tt := range []struct {
		name   string
		edit   func(c *config.Config)
		opts   func(o *Options)
		weight func(t *testing.T, w *weights.Weights) *weights.Weights
		check  check
	}{
		{
			"gateway and mesh: both contexts", nil, func(o *Options) { o.Gateways = []string{"istio-ingress/llm", Mesh} }, nil,
			func(t *testing.T, _ *networkingv1.VirtualService, ef *networkingv1alpha3.EnvoyFilter, _ []Object) {
				ctxs := map[networkingv1alpha3.EnvoyFilter_PatchContext]int{}
				for _, p := range ef.GetConfigPatches() {
					ctxs[p.GetMatch().GetContext()]++
				}
				if len(ctxs) != 2 || ctxs[networkingv1alpha3.EnvoyFilter_GATEWAY] != ctxs[networkingv1alpha3.EnvoyFilter_SIDECAR_OUTBOUND] {
					t.Errorf("contexts %v", ctxs)
				}
			},
		},
		{
			"http2 engines are upgraded", func(c *config.Config) { c.Clusters[0].Protocol = config.ProtocolHTTP2 }, nil, nil,
			func(t *testing.T, _ *networkingv1.VirtualService, _ *networkingv1alpha3.EnvoyFilter, drs []Object) {
				for _, dr := range drs {
					h2 := dr.Spec.(*networkingv1.DestinationRule).GetTrafficPolicy().GetConnectionPool().GetHttp().GetH2UpgradePolicy() == networkingv1.ConnectionPoolSettings_HTTPSettings_UPGRADE
					if h2 != (dr.Metadata.Name == "ilb-us-east-vllm") {
						t.Errorf("%s: h2 upgrade %v", dr.Metadata.Name, h2)
					}
				}
			},
		},
		{"no slow start, no retries, no idle timeout, debug off", func(c *config.Config) {
			c.Envoy.SlowStart, c.Envoy.Retry.Attempts, c.Envoy.RouteIdleTimeout = 0, 0, 0
			c.Sources[0].Debug = false
		}, nil, nil, func(t *testing.T, vs *networkingv1.VirtualService, ef *networkingv1alpha3.EnvoyFilter, drs []Object) {
			if drs[0].Spec.(*networkingv1.DestinationRule).GetTrafficPolicy().GetLoadBalancer().GetWarmup() != nil {
				t.Error("warm-up with slow_start 0")
			}
			if r := vs.GetHttp()[0].GetRetries(); r == nil || r.GetAttempts() != 0 || r.GetRetryOn() != "" {
				t.Errorf("retries %v, want {} (Istio: none)", r)
			}
			var applies []string
			for _, p := range ef.GetConfigPatches() {
				if p.GetApplyTo() == networkingv1alpha3.EnvoyFilter_HTTP_ROUTE { // ext_proc on, per route
					applies = append(applies, "HTTP_ROUTE "+p.GetMatch().GetRouteConfiguration().GetVhost().GetRoute().GetName())
					continue
				}
				applies = append(applies, p.GetApplyTo().String()+" "+p.GetPatch().GetValue().GetFields()["name"].GetStringValue())
			}
			want := []string{"LISTENER ", "NETWORK_FILTER envoy.filters.network.http_connection_manager", "HTTP_FILTER envoy.filters.http.ext_proc"}
			for _, h := range vs.GetHttp() { // no idle timeout: only ext_proc turned on, on every route
				want = append(want, "HTTP_ROUTE "+h.GetName())
			}
			want = append(want, "HTTP_FILTER envoy.filters.http.header_mutation", "CLUSTER ")
			if !slices.Equal(applies, want) {
				t.Errorf("patches %v\nwant %v", applies, want)
			}
		}},
		{"a host without a namespace: the rule goes to Namespace", func(c *config.Config) {
			c.Clusters[0].Service.Host = "vllm.us-east.example.com"
		}, func(o *Options) { o.Namespace = "llm" }, nil, func(t *testing.T, vs *networkingv1.VirtualService, _ *networkingv1alpha3.EnvoyFilter, drs []Object) {
			if drs[0].Metadata.Namespace != "llm" || drs[1].Metadata.Namespace != "inference" {
				t.Errorf("namespaces %s, %s", drs[0].Metadata.Namespace, drs[1].Metadata.Namespace)
			}
		}},
		{"clusters sharing a service share its rule", func(c *config.Config) {
			c.Clusters[2].Service = c.Clusters[3].Service
		}, nil, nil, func(t *testing.T, _ *networkingv1.VirtualService, _ *networkingv1alpha3.EnvoyFilter, drs []Object) {
			if len(drs) != 3 || drs[2].Metadata.Annotations[clusterAnnotation] != "eu-west-vllm,eu-west-tgi" {
				t.Errorf("%d rules, last %+v", len(drs), drs[len(drs)-1].Metadata)
			}
		}},
		{"panic threshold, and no ejection at all", func(c *config.Config) {
			c.Envoy.HealthyPanicThreshold, c.Envoy.Outlier.MaxEjectionPercent = 25, 0
		}, nil, nil, func(t *testing.T, _ *networkingv1.VirtualService, _ *networkingv1alpha3.EnvoyFilter, drs []Object) {
			od := drs[0].Spec.(*networkingv1.DestinationRule).GetTrafficPolicy().GetOutlierDetection()
			if od.GetMinHealthPercent() != 25 || od.GetConsecutive_5XxErrors().GetValue() != 0 || od.GetConsecutiveGatewayErrors() == nil ||
				od.GetConsecutiveGatewayErrors().GetValue() != 0 || od.GetMaxEjectionPercent() != 0 {
				t.Errorf("outlier detection %v", od)
			}
		}},
		{"a cell without capacity answers 503", nil, nil, func(t *testing.T, w *weights.Weights) *weights.Weights {
			return withCell(t, w, "edge-us", "qwen2.5-7b-instruct", nil)
		}, func(t *testing.T, vs *networkingv1.VirtualService, _ *networkingv1alpha3.EnvoyFilter, _ []Object) {
			n := 0
			for _, r := range vs.GetHttp() {
				if strings.HasSuffix(r.GetName(), "qwen2.5-7b-instruct") {
					n++
					if r.GetDirectResponse().GetStatus() != 503 || r.GetHeaders().GetResponse().GetSet()[header.Reason] != "no_capacity" || len(r.GetMatch()) == 0 {
						t.Errorf("%s: %v", r.GetName(), r)
					}
				}
			}
			if n != 2 {
				t.Errorf("%d qwen routes, want 2 (model, hint)", n)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := loadConfig(t, exampleConfig)
			if tt.edit != nil {
				tt.edit(c)
			}
			o := base
			if tt.opts != nil {
				tt.opts(&o)
			}
			w := demandWeights(t, c)
			if tt.weight != nil {
				w = tt.weight(t, w)
			}
			vs, ef, drs := objects(t, c, w, o)
			tt.check(t, vs["edge-us"], ef["edge-us"], drs)
		})
	}
}

// withCell returns w with the targets of one cell replaced.
func withCell(t *testing.T, w *weights.Weights, source, model string, targets []weights.Target) *weights.Weights {
	t.Helper()
	cells := w.Cells()
	for i := range cells {
		if cells[i].Source == source && cells[i].Model == model {
			cells[i].Targets = targets
		}
	}
	nw, err := weights.New(w.Policy(), time.Unix(0, 0), cells)
	if err != nil {
		t.Fatal(err)
	}
	return nw
}
