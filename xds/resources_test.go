package xds_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	earlyheadermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/weights"
	"github.com/ilbproject/ilb/xds"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func demo(t *testing.T) (*config.Config, *weights.Weights) {
	t.Helper()
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w, err := weights.Proportional{}.Compute(weights.Input{Config: c, Clusters: weights.StaticState(c)})
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

func build(t *testing.T, c *config.Config, w *weights.Weights, source string) *xds.Resources {
	t.Helper()
	r, err := xds.Build(c, w, nil, source)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestGolden pins what the xDS server serves for the demo config, and
// proves the golden YAML decodes strictly into Envoy's protos and passes
// ValidateAll recursively.
func TestGolden(t *testing.T) {
	c, w := demo(t)
	for _, s := range c.Sources {
		t.Run(s.Name, func(t *testing.T) {
			got, err := build(t, c, w, s.Name).YAML()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", s.Name+".yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./xds -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("resources of %s differ from %s (run go test ./xds -update and review the diff):\n%s", s.Name, path, got)
			}
			decodeGolden(t, want)
		})
	}
}

func decodeGolden(t *testing.T, doc []byte) {
	t.Helper()
	var parts map[string][]json.RawMessage
	if err := yaml.Unmarshal(doc, &parts); err != nil {
		t.Fatal(err)
	}
	newMsg := map[string]func() proto.Message{
		"clusters":  func() proto.Message { return &clusterv3.Cluster{} },
		"endpoints": func() proto.Message { return &endpointv3.ClusterLoadAssignment{} },
		"routes":    func() proto.Message { return &routev3.RouteConfiguration{} },
		"listeners": func() proto.Message { return &listenerv3.Listener{} },
	}
	for key, items := range parts {
		for i, raw := range items {
			m := newMsg[key]()
			if err := envoy.DecodeYAML(raw, m); err != nil {
				t.Errorf("%s[%d]: %v", key, i, err)
				continue
			}
			if err := envoy.Validate(m); err != nil {
				t.Errorf("%s[%d]: %v", key, i, err)
			}
		}
	}
}

func TestRoutes(t *testing.T) {
	c, w := demo(t)
	tests := []struct {
		name   string
		source string
		check  func(t *testing.T, routes []*routev3.Route)
	}{
		{"override route first, with cluster_header", "edge-us", func(t *testing.T, routes []*routev3.Route) {
			r := routes[0]
			if r.GetRoute().GetClusterHeader() != header.RouteCluster || r.GetMatch().GetHeaders()[0].GetName() != header.RouteCluster {
				t.Errorf("first route = %v", r)
			}
		}},
		{"one route per model with the cell's weights in order and the draw header", "edge-us", func(t *testing.T, routes []*routev3.Route) {
			for i, m := range c.Models {
				r := routes[1+i]
				if got := r.GetMatch().GetHeaders()[0].GetStringMatch().GetExact(); got != m.Name {
					t.Errorf("route %d matches model %q; want %q", 1+i, got, m.Name)
				}
				wc := r.GetRoute().GetWeightedClusters()
				if wc.GetHeaderName() != header.RouteDraw {
					t.Errorf("route %s: random value header %q", r.GetName(), wc.GetHeaderName())
				}
				cell, _ := w.Cell("edge-us", m.Name)
				var got []weights.Target
				for _, cw := range wc.GetClusters() {
					got = append(got, weights.Target{Cluster: cw.GetName(), Weight: cw.GetWeight().GetValue()})
				}
				// The served cluster is the router's pick, from the route's
				// headers: empty (not added) on a reply made without one.
				var served string
				for _, h := range r.GetResponseHeadersToAdd() {
					if h.GetHeader().GetKey() == header.ServedCluster {
						served = h.GetHeader().GetValue()
					}
				}
				if served != "%UPSTREAM_CLUSTER%" {
					t.Errorf("route %s reports the served cluster as %q", r.GetName(), served)
				}
				if !slices.Equal(got, cell.Targets) {
					t.Errorf("route %s clusters = %v; want %v", r.GetName(), got, cell.Targets)
				}
				if r.GetRoute().GetTimeout().AsDuration() != 0 {
					t.Errorf("route %s has a timeout; streams need 0s", r.GetName())
				}
			}
		}},
		{"fail-open fallback: default model's weights over clusters serving every model, drawn at random", "edge-us", func(t *testing.T, routes []*routev3.Route) {
			r := routes[len(routes)-2]
			wc := r.GetRoute().GetWeightedClusters()
			if len(r.GetMatch().GetHeaders()) != 0 || r.GetMatch().GetPrefix() != "/v1/" || wc == nil || wc.GetHeaderName() != "" {
				t.Fatalf("fallback = %v", r)
			}
			cell, _ := w.Cell("edge-us", "llama-3.1-8b-instruct")
			var want, got []weights.Target
			for _, tg := range cell.Targets {
				if tg.Cluster != "us-west-sglang" { // serves llama only
					want = append(want, tg)
				}
			}
			for _, cw := range wc.GetClusters() {
				got = append(got, weights.Target{Cluster: cw.GetName(), Weight: cw.GetWeight().GetValue()})
			}
			if !slices.Equal(got, want) {
				t.Errorf("fallback clusters = %v; want %v", got, want)
			}
		}},
		{"any other path is a JSON 404", "edge-us", func(t *testing.T, routes []*routev3.Route) {
			r := routes[len(routes)-1]
			if d := r.GetDirectResponse(); r.GetMatch().GetPrefix() != "/" || d.GetStatus() != 404 || !strings.Contains(d.GetBody().GetInlineString(), `"code":"path_not_found"`) {
				t.Fatalf("last route = %v", r)
			}
		}},
		{"fail-closed fallback is a JSON 503", "edge-eu", func(t *testing.T, routes []*routev3.Route) {
			r := routes[len(routes)-2]
			d := r.GetDirectResponse()
			if d.GetStatus() != 503 || !strings.Contains(d.GetBody().GetInlineString(), `"code":"routing_unavailable"`) {
				t.Fatalf("fallback = %v", r)
			}
			var ct string
			for _, h := range r.GetResponseHeadersToAdd() {
				if h.GetHeader().GetKey() == "content-type" {
					ct = h.GetHeader().GetValue()
				}
			}
			if ct != "application/json" {
				t.Errorf("fallback content-type = %q", ct)
			}
		}},
		{"residency: edge-eu routes only to eu clusters", "edge-eu", func(t *testing.T, routes []*routev3.Route) {
			for _, r := range routes {
				for _, cw := range r.GetRoute().GetWeightedClusters().GetClusters() {
					if !strings.HasPrefix(cw.GetName(), "eu-") {
						t.Errorf("route %s sends edge-eu traffic to %s", r.GetName(), cw.GetName())
					}
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := build(t, c, w, tt.source)
			tt.check(t, r.Routes[0].GetVirtualHosts()[0].GetRoutes())
		})
	}
}

func TestClustersFollowResidency(t *testing.T) {
	c, w := demo(t)
	var names []string
	for _, cl := range build(t, c, w, "edge-eu").Clusters {
		names = append(names, cl.GetName())
		if cl.GetLbPolicy() != clusterv3.Cluster_LEAST_REQUEST || cl.GetType() != clusterv3.Cluster_EDS {
			t.Errorf("cluster %s: lb %v type %v", cl.GetName(), cl.GetLbPolicy(), cl.GetType())
		}
	}
	if !slices.Equal(names, []string{"eu-west-vllm", "eu-west-tgi"}) {
		t.Errorf("edge-eu clusters = %v; want only the eu ones", names)
	}
}

func TestListener(t *testing.T) {
	c, w := demo(t)
	l := build(t, c, w, "edge-eu").Listeners[0]
	var hcm hcmv3.HttpConnectionManager
	if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	var early earlyheadermutationv3.HeaderMutation
	if err := hcm.GetEarlyHeaderMutationExtensions()[0].GetTypedConfig().UnmarshalTo(&early); err != nil {
		t.Fatal(err)
	}
	if p := early.GetMutations()[0].GetRemoveOnMatch().GetKeyMatcher().GetPrefix(); p != header.RoutePrefix {
		t.Errorf("early header mutation removes prefix %q; want %q", p, header.RoutePrefix)
	}
	// edge-eu does not allow debug: a header_mutation filter first in the
	// chain (last on the response) strips ILB's internal headers.
	filters := hcm.GetHttpFilters()
	if len(filters) != 3 || filters[0].GetName() != "envoy.filters.http.header_mutation" || filters[1].GetName() != "envoy.filters.http.ext_proc" || filters[2].GetName() != "envoy.filters.http.router" {
		t.Fatalf("filters = %v", filters)
	}
	var strip headermutationv3.HeaderMutation
	if err := filters[0].GetTypedConfig().UnmarshalTo(&strip); err != nil {
		t.Fatal(err)
	}
	var removed []string
	for _, m := range strip.GetMutations().GetResponseMutations() {
		if p := m.GetRemoveOnMatch().GetKeyMatcher().GetPrefix(); p != "" {
			removed = append(removed, p+"*")
			continue
		}
		removed = append(removed, m.GetRemove())
	}
	if !slices.Equal(removed, []string{header.ServedCluster, header.WeightsVersion, header.UpstreamHost, header.EnginePrefix + "*"}) {
		t.Errorf("stripped response headers %v", removed)
	}
	filters = filters[1:]
	// edge-us allows debug: ext_proc alone decides what the client sees.
	var hcmUS hcmv3.HttpConnectionManager
	if err := build(t, c, w, "edge-us").Listeners[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcmUS); err != nil {
		t.Fatal(err)
	}
	if n := len(hcmUS.GetHttpFilters()); n != 2 {
		t.Errorf("edge-us has %d filters; want ext_proc and router", n)
	}
	var ep extprocfilterv3.ExternalProcessor
	if err := filters[0].GetTypedConfig().UnmarshalTo(&ep); err != nil {
		t.Fatal(err)
	}
	md := ep.GetGrpcService().GetInitialMetadata()
	if len(md) != 1 || md[0].GetKey() != header.Source || md[0].GetValue() != "edge-eu" {
		t.Errorf("initial metadata = %v", md)
	}
	pm := ep.GetProcessingMode()
	if pm.GetRequestBodyMode() != extprocfilterv3.ProcessingMode_BUFFERED || pm.GetResponseHeaderMode() != extprocfilterv3.ProcessingMode_SEND ||
		pm.GetResponseBodyMode() != extprocfilterv3.ProcessingMode_NONE || !ep.GetAllowModeOverride() {
		t.Errorf("processing mode = %v, allow_mode_override %v", pm, ep.GetAllowModeOverride())
	}
	if got := ep.GetMessageTimeout().AsDuration(); got != c.Envoy.MessageTimeout.Std() {
		t.Errorf("message timeout %v", got)
	}
}

func TestSnapshotVersionsAreContentHashes(t *testing.T) {
	c, w := demo(t)
	a, err := build(t, c, w, "edge-us").Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := build(t, c, w, "edge-us").Snapshot()
	rr, _ := weights.RoundRobin{}.Compute(weights.Input{Config: c, Clusters: weights.StaticState(c)})
	d, _ := build(t, c, rr, "edge-us").Snapshot()
	for _, typ := range []string{resource.ClusterType, resource.EndpointType, resource.RouteType, resource.ListenerType} {
		if a.GetVersion(typ) != b.GetVersion(typ) {
			t.Errorf("%s: same content, versions %q and %q", typ, a.GetVersion(typ), b.GetVersion(typ))
		}
	}
	if a.GetVersion(resource.RouteType) == d.GetVersion(resource.RouteType) {
		t.Error("other weights, same route version")
	}
	if a.GetVersion(resource.ClusterType) != d.GetVersion(resource.ClusterType) {
		t.Error("weights changed the cluster version; only routes depend on weights")
	}
}

func TestSnapshotRejectsRouteToForeignCluster(t *testing.T) {
	c, _ := demo(t)
	// Weights that send edge-eu traffic to a US cluster: residency would
	// be violated, so the snapshot must be refused.
	cells := []weights.Cell{}
	for _, s := range c.Sources {
		for _, m := range c.Models {
			cells = append(cells, weights.Cell{Source: s.Name, Model: m.Name, Targets: []weights.Target{{Cluster: "us-east-vllm", Weight: weights.Total}}})
		}
	}
	bad, err := weights.New("handmade", time.Time{}, cells)
	if err != nil {
		t.Fatal(err)
	}
	_, err = build(t, c, bad, "edge-eu").Snapshot()
	if err == nil || !strings.Contains(err.Error(), `weighted cluster "us-east-vllm" is not in this source's clusters`) {
		t.Errorf("Snapshot error = %v; want the foreign cluster named", err)
	}
}
