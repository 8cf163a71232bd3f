// Package configtest holds configurations the tests of several packages
// share.
package configtest

import (
	"testing"

	"github.com/ilbproject/ilb/config"
)

// SmallWorldYAML is a world of two regions (us, eu; 80 ms and $0.05/GB
// apart), two sources (edge-eu restricted to eu), two models and three
// clusters: us-a (big profile, 300 units a replica, 2 replicas, both
// models), us-b (small, 100, 1 replica, m1) and eu-a (small, 1 replica,
// both models, TGI).
const SmallWorldYAML = `
regions: [{name: us}, {name: eu}]
network:
  - {from: us, to: eu, rtt_ms: 80, egress_usd_per_gb: 0.05}
  - {from: eu, to: us, rtt_ms: 80, egress_usd_per_gb: 0.05}
sources:
  - {name: edge-us, region: us}
  - {name: edge-eu, region: eu, allowed_regions: [eu]}
models: [{name: m1}, {name: m2}]
profiles: [{name: big, capacity_per_replica: 300}, {name: small, capacity_per_replica: 100}]
clusters:
  - {name: us-a, region: us, engine: vllm, models: [m1, m2], profile: big, endpoints: ["10.0.0.1:80", "10.0.0.2:80"]}
  - {name: us-b, region: us, engine: vllm, models: [m1], profile: small, endpoints: ["10.0.0.3:80"]}
  - {name: eu-a, region: eu, engine: tgi, models: [m1, m2], profile: small, endpoints: ["10.1.0.1:80"]}
`

// SmallWorld is SmallWorldYAML, parsed and validated.
func SmallWorld(t testing.TB) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(SmallWorldYAML))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TwoRegionsYAML is a world of two regions 50 ms apart with no egress
// cost, sources src (anywhere) and local-only (region a only), one model
// m, and clusters near (region a) and far (region b) of one 100-unit
// replica each; the controller's smoothing is off (no minimum cell
// demand, no step limits, no deadband), so one tick shows a policy's
// answer.
const TwoRegionsYAML = `
regions: [{name: a}, {name: b}]
network:
  - {from: a, to: b, rtt_ms: 50, egress_usd_per_gb: 0}
  - {from: b, to: a, rtt_ms: 50, egress_usd_per_gb: 0}
sources:
  - {name: src, region: a}
  - {name: local-only, region: a, allowed_regions: [a]}
models: [{name: m}]
profiles: [{name: p, capacity_per_replica: 100}]
clusters:
  - {name: near, region: a, engine: vllm, models: [m], profile: p, endpoints: ["10.0.0.1:80"]}
  - {name: far, region: b, engine: vllm, models: [m], profile: p, endpoints: ["10.0.1.1:80"]}
controller: {min_cell_demand: 0, max_weight_step: 1, max_utilization_step: 1, deadband: 0}
`

// TwoRegions is TwoRegionsYAML, parsed and validated afresh.
func TwoRegions(t testing.TB) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(TwoRegionsYAML))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
