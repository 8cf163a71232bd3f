package routetable_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/istio"
	"github.com/ilbproject/ilb/routetable"
	"github.com/ilbproject/ilb/weights"
	"github.com/ilbproject/ilb/xds"
)

// world is the demo world in Istio mode (every cluster has a service) and
// its weights under the demo demand, with the cluster drop ("*": every
// one) out of capacity.
func world(t *testing.T, drop string) (*config.Config, *weights.Weights) {
	t.Helper()
	c, err := config.Load("../examples/istio/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../examples/demo/demand.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, states, err := controller.ParseDemandFile(c, data)
	if err != nil {
		t.Fatal(err)
	}
	for name, st := range states {
		if drop == "*" || name == drop {
			st.Ready, st.Warming, st.Capacity = 0, nil, 0
			states[name] = st
		}
	}
	p, err := weights.NewPolicy(c.Controller.Policy)
	if err != nil {
		t.Fatal(err)
	}
	w, err := p.Compute(weights.Input{Config: c, Clusters: states, Demand: d, Now: time.Unix(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

// TestRenderersFollowThePlan is the parity of ILB's two route tables:
// every step of the plan is rendered, with the same targets or the same
// reply, by ILB's listener (RDS) and by the Istio VirtualService, and
// neither renders a route the plan does not have. Either renderer
// changing alone fails it.
func TestRenderersFollowThePlan(t *testing.T) {
	for _, drop := range []string{"", "eu-west-vllm", "*"} {
		c, w := world(t, drop)
		objs, err := istio.Objects(c, w, istio.Options{
			Placement: istio.Placement{Hosts: []string{"llm.example.com"}},
			PerSource: map[string]istio.Placement{"edge-us": {Gateways: []string{"istio-ingress/llm-us"}}, "edge-eu": {Gateways: []string{"istio-ingress/llm-eu"}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range c.Sources {
			t.Run(fmt.Sprintf("%s/without %q", s.Name, drop), func(t *testing.T) {
				res, err := xds.Build(c, w, nil, s.Name)
				if err != nil {
					t.Fatal(err)
				}
				rds := res.Routes[0].GetVirtualHosts()[0].GetRoutes()
				var vs *networkingv1.VirtualService
				for _, o := range objs {
					if v, ok := o.Spec.(*networkingv1.VirtualService); ok && o.Metadata.Labels[istio.SourceLabel] == s.Name {
						vs = v
					}
				}
				if vs == nil {
					t.Fatal("no VirtualService")
				}
				plan := routetable.Plan(c, w, s)
				if drop == "*" && !slices.ContainsFunc(plan, func(st routetable.Step) bool { return st.Reply != nil && st.Reply.Code == "no_capacity" }) {
					t.Fatal("no cell without capacity: the replies of such cells go unchecked")
				}
				checkParity(t, plan, rds, vs.GetHttp())
			})
		}
	}
}

// checkParity walks the plan over both renderings in step.
func checkParity(t *testing.T, plan []routetable.Step, rds []*routev3.Route, http []*networkingv1.HTTPRoute) {
	t.Helper()
	i, j := 0, 0 // next RDS route, next Istio route
	for _, st := range plan {
		switch st.Kind {
		case routetable.ToCluster:
			if rds[i].GetRoute().GetClusterHeader() != header.RouteCluster {
				t.Errorf("RDS %s: not the cluster_header route", rds[i].GetName())
			}
			i++
			for _, e := range st.Clusters {
				if got := http[j].GetMatch()[0].GetHeaders()[header.RouteCluster].GetExact(); got != e.Name {
					t.Errorf("Istio %s: matches cluster %q; want %q", http[j].GetName(), got, e.Name)
				}
				j++
			}
			continue
		case routetable.NotFound:
			checkReply(t, st, rds[i], http[j])
			i, j = i+1, j+1
			continue
		}
		// ByModel, ByHint, Fallback: one Istio route; on RDS one route
		// (ByModel), one per prefix (Fallback), one per prefix and name
		// (ByHint).
		n := 1
		switch st.Kind {
		case routetable.ByHint:
			n = len(st.Prefixes) * len(st.Names)
			var want []string
			for range st.Prefixes {
				want = append(want, st.Names...)
			}
			var got []string
			for _, m := range http[j].GetMatch() {
				got = append(got, m.GetHeaders()[header.Model].GetExact())
			}
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("Istio %s: hints %v; want %v", http[j].GetName(), got, want)
			}
		case routetable.Fallback:
			n = len(st.Prefixes)
		}
		for k := range n {
			if st.Reply != nil {
				checkReply(t, st, rds[i+k], http[j])
				continue
			}
			var got []string
			for _, wc := range rds[i+k].GetRoute().GetWeightedClusters().GetClusters() {
				got = append(got, fmt.Sprintf("%s=%d", wc.GetName(), wc.GetWeight().GetValue()))
			}
			var want []string
			for _, tg := range st.Targets {
				want = append(want, fmt.Sprintf("%s=%d", tg.Cluster, tg.Weight))
			}
			if !slices.Equal(got, want) {
				t.Errorf("RDS %s: %v; want %v", rds[i+k].GetName(), got, want)
			}
		}
		if st.Reply == nil {
			var got, want []string
			for _, d := range http[j].GetRoute() {
				got = append(got, d.GetHeaders().GetResponse().GetSet()[header.ServedCluster])
			}
			for _, tg := range st.Targets {
				if tg.Weight > 0 {
					want = append(want, tg.Cluster)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("Istio %s: destinations %v; want %v", http[j].GetName(), got, want)
			}
		}
		i, j = i+n, j+1
	}
	if i != len(rds) || j != len(http) {
		t.Errorf("rendered %d RDS and %d Istio routes; the plan has %d and %d", len(rds), len(http), i, j)
	}
}

// checkReply checks that both routes answer st's reply.
func checkReply(t *testing.T, st routetable.Step, r *routev3.Route, h *networkingv1.HTTPRoute) {
	t.Helper()
	body := string(st.Reply.Body())
	if dr := r.GetDirectResponse(); dr.GetStatus() != st.Reply.Status || dr.GetBody().GetInlineString() != body {
		t.Errorf("RDS %s: %d %s; want %d %s", r.GetName(), dr.GetStatus(), dr.GetBody().GetInlineString(), st.Reply.Status, body)
	}
	if dr := h.GetDirectResponse(); dr.GetStatus() != st.Reply.Status || dr.GetBody().GetString_() != body {
		t.Errorf("Istio %s: %d %s; want %d %s", h.GetName(), dr.GetStatus(), dr.GetBody().GetString_(), st.Reply.Status, body)
	}
	if !strings.Contains(body, st.Reply.Code) {
		t.Errorf("reply body %s lacks its code %s", body, st.Reply.Code)
	}
}
