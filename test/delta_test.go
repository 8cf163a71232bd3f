package test

import (
	"context"
	"net/http"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/xds"
)

// TestDeltaEnvoysFollowEveryChange: with envoy.xds_api_type DELTA_GRPC the
// bootstraps ask for incremental ADS, and Envoys (envoysim's delta client,
// holding what each response changed) serve traffic and follow every
// version ILB sets: the initial configuration, then an EDS-only change
// (a replica unhealthy, pushed at once) and back.
func TestDeltaEnvoysFollowEveryChange(t *testing.T) {
	s := startWorld(t, nil, func(c *config.Config) {
		c.Controller.Policy = config.PolicyProportional
		c.Envoy.XDSAPIType = "DELTA_GRPC"
		c.Signals.Disabled = true  // EDS changes come from the test alone
		c.Envoy.EDSMinInterval = 0 // and each is pushed at once
	})
	for _, e := range s.Envoys {
		if got := e.Boot.GetDynamicResources().GetAdsConfig().GetApiType(); got != corev3.ApiConfigSource_DELTA_GRPC {
			t.Fatalf("%s: bootstrap ads_config.api_type %v; want DELTA_GRPC", e.Source, got)
		}
	}
	// follows waits until every Envoy runs the versions ILB set for its
	// source, of every type.
	follows := func(what string) {
		t.Helper()
		waitUntil(t, what, 20*time.Second, func() bool {
			for _, e := range s.Envoys {
				snap, err := s.App.XDS.Snapshot(e.Source)
				if err != nil {
					return false
				}
				have := e.Sim.Versions()
				for _, typ := range []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType} {
					if have[typ] != snap.GetVersion(typ) {
						return false
					}
				}
			}
			return true
		})
	}
	follows("every delta Envoy holds the initial configuration")
	for _, e := range s.Envoys {
		for _, model := range []string{"llama-3.1-8b-instruct", "qwen2.5-7b-instruct"} {
			if r, body := chat(t, e.URL, model, nil); r.StatusCode != http.StatusOK {
				t.Fatalf("%s via %s: %d %s", model, e.Source, r.StatusCode, body)
			}
		}
	}

	ctx := context.Background()
	eps := xds.StaticEndpoints(s.Config)
	before, _ := s.App.XDS.Snapshot("edge-eu")
	down := xds.Endpoints{}
	for name, list := range eps {
		down[name] = append([]xds.Endpoint(nil), list...)
	}
	down["eu-west-tgi"][0].Health = corev3.HealthStatus_UNHEALTHY
	if err := s.App.XDS.SetEndpoints(ctx, down); err != nil {
		t.Fatal(err)
	}
	after, _ := s.App.XDS.Snapshot("edge-eu")
	if after.GetVersion(resource.EndpointType) == before.GetVersion(resource.EndpointType) {
		t.Fatal("an unhealthy replica did not change the EDS version at once")
	}
	follows("every delta Envoy takes the EDS change")
	if err := s.App.XDS.SetEndpoints(ctx, eps); err != nil {
		t.Fatal(err)
	}
	if back, _ := s.App.XDS.Snapshot("edge-eu"); back.GetVersion(resource.EndpointType) == after.GetVersion(resource.EndpointType) {
		t.Fatal("the replica back did not change the EDS version")
	}
	follows("every delta Envoy takes the replica back")
}
