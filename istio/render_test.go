package istio

import (
	"slices"
	"strings"
	"testing"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	networkingv1 "istio.io/api/networking/v1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/routetable"
	"github.com/ilbproject/ilb/weights"
)

// both renders both example sources at once, each on its own gateway.
var both = Options{
	Placement: Placement{Hosts: []string{"llm.example.com"}},
	PerSource: map[string]Placement{
		"edge-us": {Gateways: []string{"istio-ingress/llm-us"}},
		"edge-eu": {Gateways: []string{"istio-ingress/llm-eu"}},
	},
}

// objects renders, failing the test on error, and indexes the result.
func objects(t *testing.T, c *config.Config, w *weights.Weights, o Options) (vs map[string]*networkingv1.VirtualService, ef map[string]*networkingv1alpha3.EnvoyFilter, dr []Object) {
	t.Helper()
	objs, err := Objects(c, w, o)
	if err != nil {
		t.Fatal(err)
	}
	vs, ef = map[string]*networkingv1.VirtualService{}, map[string]*networkingv1alpha3.EnvoyFilter{}
	for _, obj := range objs {
		source := obj.Metadata.Labels[SourceLabel]
		switch spec := obj.Spec.(type) {
		case *networkingv1.VirtualService:
			vs[source] = spec
		case *networkingv1alpha3.EnvoyFilter:
			ef[source] = spec
		case *networkingv1.DestinationRule:
			dr = append(dr, obj)
		}
	}
	return vs, ef, dr
}

// TestResidency: a source's objects never name a cluster outside its
// allowed regions, whatever route or header.
func TestResidency(t *testing.T) {
	c := loadConfig(t, exampleConfig)
	w := demandWeights(t, c)
	for _, tt := range []struct {
		name   string
		source string
		never  []string
	}{
		{"edge-eu stays in the EU", "edge-eu", []string{"us-east-vllm", "us-west-sglang"}},
		{"edge-us may use every region", "edge-us", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := both
			o.Sources = []string{tt.source}
			vs, _, drs := objects(t, c, w, o)
			js, err := protojson.Marshal(vs[tt.source])
			if err != nil {
				t.Fatal(err)
			}
			for _, cl := range tt.never {
				if strings.Contains(string(js), cl) {
					t.Errorf("the VirtualService of %s names %s:\n%s", tt.source, cl, js)
				}
				for _, dr := range drs {
					if strings.Contains(dr.Spec.(*networkingv1.DestinationRule).GetHost(), cl) {
						t.Errorf("a DestinationRule for %s", cl)
					}
				}
			}
			s, _ := c.Source(tt.source)
			if got, want := len(drs), len(routedClusters(c, s)); got != want {
				t.Errorf("%d DestinationRules, want %d (one per cluster the source may use)", got, want)
			}
		})
	}
}

// TestRouteOrder: clusters, models, hints (fail-open only), default.
func TestRouteOrder(t *testing.T) {
	c := loadConfig(t, exampleConfig)
	w := demandWeights(t, c)
	vs, _, _ := objects(t, c, w, both)
	for _, tt := range []struct {
		source string
		want   []string
	}{
		{"edge-us", []string{
			"ilb-cluster-us-east-vllm", "ilb-cluster-us-west-sglang", "ilb-cluster-eu-west-vllm", "ilb-cluster-eu-west-tgi",
			"ilb-model-llama-3.1-8b-instruct", "ilb-model-qwen2.5-7b-instruct",
			"ilb-hint-llama-3.1-8b-instruct", "ilb-hint-qwen2.5-7b-instruct",
			"ilb-default", "ilb-not-found",
		}},
		{"edge-eu", []string{ // fail-closed: no hint routes, a 503 default
			"ilb-cluster-eu-west-vllm", "ilb-cluster-eu-west-tgi",
			"ilb-model-llama-3.1-8b-instruct", "ilb-model-qwen2.5-7b-instruct",
			"ilb-default", "ilb-not-found",
		}},
	} {
		t.Run(tt.source, func(t *testing.T) {
			var got []string
			for _, r := range vs[tt.source].GetHttp() {
				got = append(got, r.GetName())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("routes %v\nwant %v", got, tt.want)
			}
			for _, r := range vs[tt.source].GetHttp() {
				matchHeaders := map[string][]string{}
				for _, m := range r.GetMatch() {
					for h, sm := range m.GetHeaders() {
						matchHeaders[h] = append(matchHeaders[h], sm.GetExact())
					}
				}
				name := r.GetName()
				switch {
				case strings.HasPrefix(name, routeClusterPrefix):
					want := strings.TrimPrefix(name, routeClusterPrefix)
					if !slices.Equal(matchHeaders[header.RouteCluster], []string{want}) || len(r.GetRoute()) != 1 ||
						r.GetRoute()[0].GetHeaders().GetResponse().GetSet()[header.ServedCluster] != want {
						t.Errorf("%s: match %v, route %v", name, matchHeaders, r.GetRoute())
					}
				case strings.HasPrefix(name, routeModelPrefix):
					if !slices.Equal(matchHeaders[header.RouteModel], []string{strings.TrimPrefix(name, routeModelPrefix)}) {
						t.Errorf("%s: match %v", name, matchHeaders)
					}
				case strings.HasPrefix(name, routeHintPrefix):
					m, _ := c.ResolveModel(strings.TrimPrefix(name, routeHintPrefix))
					var model config.Model
					for _, cm := range c.Models {
						if cm.Name == m {
							model = cm
						}
					}
					if !slices.Equal(slices.Compact(matchHeaders[header.Model]), append([]string{model.Name}, model.Aliases...)) {
						t.Errorf("%s: match %v", name, matchHeaders)
					}
				case name == routeDefault:
					if len(r.GetMatch()) != 1 || r.GetMatch()[0].GetUri().GetPrefix() != "/v1/" || len(r.GetMatch()[0].GetHeaders()) != 0 {
						t.Errorf("the default route matches %v; want the API paths only", r.GetMatch())
					}
				case name == routeNotFound:
					if len(r.GetMatch()) != 0 || r.GetDirectResponse().GetStatus() != 404 || !strings.Contains(r.GetDirectResponse().GetBody().GetString_(), `"code":"path_not_found"`) {
						t.Errorf("the last route %v; want a JSON 404 for every other path", r)
					}
				}
				if r.GetTimeout() != nil || (len(r.GetRoute()) > 0 && r.GetRetries().GetAttempts() != 2) {
					t.Errorf("%s: timeout %v, retries %v", name, r.GetTimeout(), r.GetRetries())
				}
			}
		})
	}
}

// TestWeightsFollowCells: every weighted route's destinations are its
// cell's targets in order, with weights summing to 100 that convert the
// cell's by largest remainder.
func TestWeightsFollowCells(t *testing.T) {
	c := loadConfig(t, exampleConfig)
	for _, tt := range []struct {
		name string
		w    func(t *testing.T) *weights.Weights
	}{
		{"optimizer on the demo demand", func(t *testing.T) *weights.Weights { return demandWeights(t, c) }},
		{"static", func(t *testing.T) *weights.Weights {
			w, err := weights.ComputeStatic(c)
			if err != nil {
				t.Fatal(err)
			}
			return w
		}},
		{"round robin", func(t *testing.T) *weights.Weights {
			w, err := weights.RoundRobin{}.Compute(weights.Input{Config: c, Clusters: weights.StaticState(c)})
			if err != nil {
				t.Fatal(err)
			}
			return w
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := tt.w(t)
			vs, _, _ := objects(t, c, w, both)
			for source, v := range vs {
				s, _ := c.Source(source)
				for _, r := range v.GetHttp() {
					name := r.GetName()
					model := strings.TrimPrefix(strings.TrimPrefix(name, routeModelPrefix), routeHintPrefix)
					if name == routeDefault {
						model = s.DefaultModel
					} else if model == name {
						continue // a cluster route
					}
					cell, _ := w.Cell(source, model)
					targets := cell.Targets
					if name == routeDefault {
						if s.FailMode == config.FailClosed {
							continue
						}
						targets = routetable.ServingAll(c, targets)
					}
					checkWeighted(t, source+"/"+name, c, r, targets)
				}
			}
		})
	}
}

func checkWeighted(t *testing.T, name string, c *config.Config, r *networkingv1.HTTPRoute, targets []weights.Target) {
	t.Helper()
	pct := percents(targets)
	var want []string
	for i, tg := range targets {
		if pct[i] > 0 {
			e, _ := c.Cluster(tg.Cluster)
			want = append(want, e.Service.Host+"="+strings.Repeat("|", int(pct[i])))
		}
	}
	var got []string
	sum := int32(0)
	for _, d := range r.GetRoute() {
		got = append(got, d.GetDestination().GetHost()+"="+strings.Repeat("|", int(d.GetWeight())))
		sum += d.GetWeight()
	}
	if sum != IstioTotal || !slices.Equal(got, want) {
		t.Errorf("%s: destinations %v (sum %d), want %v", name, got, sum, want)
	}
}

func TestPercents(t *testing.T) {
	for _, tt := range []struct {
		name    string
		weights []uint32
		want    []uint32
	}{
		{"one target", []uint32{10000}, []uint32{100}},
		{"halves", []uint32{5000, 5000}, []uint32{50, 50}},
		{"thirds: the largest remainder wins", []uint32{3333, 3333, 3334}, []uint32{33, 33, 34}},
		{"ties go to the earlier target", []uint32{3334, 3333, 3333}, []uint32{34, 33, 33}},
		{"a sliver rounds to nothing", []uint32{9960, 40}, []uint32{100, 0}},
		{"half a percent each way: the earlier wins", []uint32{50, 9950}, []uint32{1, 99}},
		{"the optimizer's 71.87/28.13", []uint32{7187, 2813}, []uint32{72, 28}},
		{"a subset (default route) is renormalised", []uint32{3000, 3000}, []uint32{50, 50}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			targets := make([]weights.Target, len(tt.weights))
			for i, w := range tt.weights {
				targets[i] = weights.Target{Cluster: string(rune('a' + i)), Weight: w}
			}
			if got := percents(targets); !slices.Equal(got, tt.want) {
				t.Errorf("percents(%v) = %v, want %v", tt.weights, got, tt.want)
			}
		})
	}
}

// TestEnvoyFilterPerSource: each source's EnvoyFilter selects its own
// proxies and tells ext_proc its name.
func TestEnvoyFilterPerSource(t *testing.T) {
	c := loadConfig(t, exampleConfig)
	w := demandWeights(t, c)
	_, efs, _ := objects(t, c, w, both)
	if len(efs) != 2 {
		t.Fatalf("%d EnvoyFilters, want 2", len(efs))
	}
	for source, ef := range efs {
		if got := ef.GetWorkloadSelector().GetLabels(); len(got) != 1 || got[SourceLabel] != source {
			t.Errorf("%s: selector %v", source, got)
		}
		found := 0
		for _, p := range ef.GetConfigPatches() {
			if p.GetMatch().GetContext() != networkingv1alpha3.EnvoyFilter_GATEWAY {
				t.Errorf("%s: context %s, want GATEWAY", source, p.GetMatch().GetContext())
			}
			if p.GetPatch().GetValue().GetFields()["name"].GetStringValue() != envoy.ExtProcFilter {
				continue
			}
			found++
			js, err := protojson.Marshal(p.GetPatch().GetValue().GetFields()["typed_config"])
			if err != nil {
				t.Fatal(err)
			}
			a, ep := &anypb.Any{}, &extprocfilterv3.ExternalProcessor{}
			if err := protojson.Unmarshal(js, a); err != nil {
				t.Fatal(err)
			}
			if err := a.UnmarshalTo(ep); err != nil {
				t.Fatal(err)
			}
			md := ep.GetGrpcService().GetInitialMetadata()
			if len(md) != 1 || md[0].GetKey() != header.Source || md[0].GetValue() != source {
				t.Errorf("%s: initial metadata %v", source, md)
			}
			if p.GetPatch().GetOperation() != networkingv1alpha3.EnvoyFilter_Patch_INSERT_BEFORE ||
				p.GetMatch().GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName() != "envoy.filters.http.router" {
				t.Errorf("%s: ext_proc is not inserted before the router: %v", source, p)
			}
		}
		if found != 1 {
			t.Errorf("%s: %d ext_proc filters", source, found)
		}
	}
}
