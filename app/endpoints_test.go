package app

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/ilbproject/ilb/signals"
	"github.com/ilbproject/ilb/xds"
)

// TestEndpointsOfOneRamp: a warming replica ramps in one place only: in
// quarters of ILB's weight when envoy.slow_start is off, at full weight
// (Envoy's slow start ramps it) when it is on; the other states map the
// same either way.
func TestEndpointsOfOneRamp(t *testing.T) {
	tests := []struct {
		name       string
		state      signals.State
		ramp       float64
		ilbRamps   bool
		wantHealth corev3.HealthStatus
		wantWeight uint32
	}{
		{"warming at 0.1, ILB ramps: a quarter", signals.StateWarming, 0.1, true, corev3.HealthStatus_HEALTHY, 25},
		{"warming at 0.49, ILB ramps: still a quarter", signals.StateWarming, 0.49, true, corev3.HealthStatus_HEALTHY, 25},
		{"warming at 0.5, ILB ramps: a half", signals.StateWarming, 0.5, true, corev3.HealthStatus_HEALTHY, 50},
		{"warming at 0.8, ILB ramps: three quarters", signals.StateWarming, 0.8, true, corev3.HealthStatus_HEALTHY, 75},
		{"warming at 0, ILB ramps: never zero", signals.StateWarming, 0, true, corev3.HealthStatus_HEALTHY, 25},
		{"warming at 0.1, Envoy's slow start ramps: full weight", signals.StateWarming, 0.1, false, corev3.HealthStatus_HEALTHY, xds.MaxWeight},
		{"ready", signals.StateReady, 1, true, corev3.HealthStatus_HEALTHY, xds.MaxWeight},
		{"starting: a tenth either way", signals.StateStarting, 0, false, corev3.HealthStatus_HEALTHY, xds.MaxWeight / 10},
		{"draining", signals.StateDraining, 0, true, corev3.HealthStatus_DRAINING, xds.MaxWeight},
		{"unhealthy", signals.StateUnhealthy, 0, false, corev3.HealthStatus_UNHEALTHY, xds.MaxWeight},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := &signals.Snapshot{Replicas: []signals.Replica{{Cluster: "c", Address: "10.0.0.1:8000", State: tc.state, Ramp: tc.ramp}}}
			got := endpointsOf(snap, tc.ilbRamps)["c"]
			if len(got) != 1 || got[0].Health != tc.wantHealth || got[0].Weight != tc.wantWeight {
				t.Errorf("EDS %+v; want one endpoint %v weight %d", got, tc.wantHealth, tc.wantWeight)
			}
		})
	}
}
