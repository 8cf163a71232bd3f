package app

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/signals"
)

// TestOlderSignalsSnapshotIsDropped: followRamps and OnChange push
// snapshots from different goroutines; one read before a newer one was
// applied must not put stale replica health back into EDS.
func TestOlderSignalsSnapshotIsDropped(t *testing.T) {
	// Every change is pushed at once here (eds_min_interval 0): what is
	// read is the order of snapshots, not the batching (xds tests it).
	a, ctx := startDemo(t, func(c *config.Config) { c.Signals.Disabled = true; c.Envoy.EDSMinInterval = 0 })

	snap := func(at time.Time, st signals.State) *signals.Snapshot {
		return &signals.Snapshot{
			At:       at,
			Replicas: []signals.Replica{{Cluster: "eu-west-tgi", Address: "127.0.0.1:18131", State: st}},
			Clusters: map[string]signals.Cluster{"eu-west-tgi": {}},
		}
	}
	health := func() corev3.HealthStatus {
		s, err := a.XDS.Snapshot("edge-eu")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range s.GetResources(resource.EndpointType) {
			cla := r.(*endpointv3.ClusterLoadAssignment)
			if cla.GetClusterName() == "eu-west-tgi" {
				return cla.GetEndpoints()[0].GetLbEndpoints()[0].GetHealthStatus()
			}
		}
		t.Fatalf("no EDS for eu-west-tgi in %v", s.GetResources(resource.EndpointType))
		return 0
	}
	t0 := time.Now()
	cases := []struct {
		name string
		snap *signals.Snapshot
		want corev3.HealthStatus
	}{
		{"newer unhealthy applies", snap(t0.Add(time.Second), signals.StateUnhealthy), corev3.HealthStatus_UNHEALTHY},
		{"older ready is dropped", snap(t0, signals.StateReady), corev3.HealthStatus_UNHEALTHY},
		{"newest ready applies", snap(t0.Add(2*time.Second), signals.StateReady), corev3.HealthStatus_HEALTHY},
	}
	for _, tc := range cases {
		a.onSignals(ctx, tc.snap, nil)
		if got := health(); got != tc.want {
			t.Errorf("%s: EDS health %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestOverloadHoldsAcrossSnapshots: the fast loop's view carries an
// overload from one snapshot to the next (live.FromSignals' hold): a
// cluster over the TTFT target for capacity.LastingFor (two 1 s
// intervals) stays overloaded while its queue lasts, then not. The
// monitor publishes a snapshot at every saturation mark's change too, so
// views come closer together than an interval: two of them over the
// target 100 ms apart are a burst, not a sustained overload.
func TestOverloadHoldsAcrossSnapshots(t *testing.T) {
	a, ctx := startDemo(t, func(c *config.Config) { c.Signals.Disabled = true; c.Envoy.EDSMinInterval = 0 })
	const name = "eu-west-tgi"
	snap := func(at time.Time, waiting, slow float64) *signals.Snapshot {
		return signals.NewSnapshot(at, []string{name}, [][]signals.Replica{{{
			Cluster: name, Address: "127.0.0.1:18131", State: signals.StateReady, Ramp: 1, LastScrape: at,
			Metrics: signals.Metrics{Waiting: waiting, Running: 8, TTFTKnown: true, FirstTokensPerSecond: 10, SlowFirstTokensPerSecond: slow},
		}}})
	}
	t0 := time.Now()
	for _, tc := range []struct {
		name string
		snap *signals.Snapshot
		want bool
	}{
		{"first tokens late with a queue", snap(t0, 4, 2), true},
		{"a view 100 ms later, late", snap(t0.Add(100*time.Millisecond), 4, 2), true},
		{"in time 100 ms later: not held", snap(t0.Add(200*time.Millisecond), 3, 0), false},
		{"late from 300 ms", snap(t0.Add(300*time.Millisecond), 4, 2), true},
		{"late again", snap(t0.Add(1300*time.Millisecond), 4, 2), true},
		{"in time, the queue still there", snap(t0.Add(2300*time.Millisecond), 3, 0), true},
		{"the queue gone", snap(t0.Add(3300*time.Millisecond), 0, 0), false},
	} {
		a.onSignals(ctx, tc.snap, nil)
		if got := a.live.Clusters[name].Overloaded; got != tc.want {
			t.Errorf("%s: overloaded %v, want %v", tc.name, got, tc.want)
		}
	}
}
