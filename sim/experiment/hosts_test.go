package experiment_test

import (
	"context"
	"testing"
	"time"

	"github.com/ilbproject/ilb/sim/experiment"
)

// TestReplicaPickingBeatsLeastRequest runs the replica workloads briefly
// at 0.8 of the fleet's capacity: on multi-turn conversations ILB's
// replica picker halves the median time to first token of Envoy's least
// request and holds far more of the prompts in cache; with no reuse it
// serves as well (the same goodput, a median within 10%). Each run is
// deterministic per seed, so the figures do not depend on the machine.
func TestReplicaPickingBeatsLeastRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 2 workloads × 2 policies")
	}
	for _, tc := range []struct {
		scenario       string
		maxP50, minHit float64 // ILB's p50 over least request's; ILB's hit rate minus least request's
		minGood        float64
		minStrict      float64 // ILB's share within the interactive SLO over least request's
	}{
		{"multi-turn", 0.7, 0.15, 1, 1.03},
		{"no-reuse", 1.1, 0, 0.99, 0.98},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			s, err := experiment.LookupReplicaScenario(tc.scenario, 4*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := experiment.CompareHosts(context.Background(), s, []float64{0.8}, []experiment.HostPolicy{experiment.HostLeastRequest, experiment.HostILB}, 1)
			if err != nil {
				t.Fatal(err)
			}
			lr, ilb := rows[0].Result, rows[1].Result
			t.Logf("least request: p50 %.3f s, good %.3f, interactive %.3f, hit %.3f; ilb: p50 %.3f s, good %.3f, interactive %.3f, hit %.3f, index %d bytes",
				lr.Totals.TTFTp50, lr.Totals.GoodShare, lr.Totals.StrictShare, lr.Replicas.PrefixHit, ilb.Totals.TTFTp50, ilb.Totals.GoodShare, ilb.Totals.StrictShare, ilb.Replicas.PrefixHit, ilb.Replicas.PickerBytes)
			if ilb.Totals.TTFTp50 > tc.maxP50*lr.Totals.TTFTp50 {
				t.Errorf("ILB's p50 TTFT %.3f s > %.2f × least request's %.3f s", ilb.Totals.TTFTp50, tc.maxP50, lr.Totals.TTFTp50)
			}
			if ilb.Replicas.PrefixHit < lr.Replicas.PrefixHit+tc.minHit {
				t.Errorf("ILB's prefix hit %.3f < least request's %.3f + %.2f", ilb.Replicas.PrefixHit, lr.Replicas.PrefixHit, tc.minHit)
			}
			if ilb.Totals.Goodput < tc.minGood*lr.Totals.Goodput {
				t.Errorf("ILB's goodput %.2f/s < %.2f × least request's %.2f/s", ilb.Totals.Goodput, tc.minGood, lr.Totals.Goodput)
			}
			for _, r := range []*experiment.Result{lr, ilb} {
				if f := r.Totals; f.StrictGood > f.Good || f.StrictShare <= 0 {
					t.Errorf("%s: %d requests within the interactive SLO (share %.3f), %d within the 2 s one: want 0 < strict <= good", r.Policy, f.StrictGood, f.StrictShare, f.Good)
				}
			}
			if ilb.Totals.StrictShare < tc.minStrict*lr.Totals.StrictShare {
				t.Errorf("ILB's share within the interactive SLO %.3f < %.2f × least request's %.3f", ilb.Totals.StrictShare, tc.minStrict, lr.Totals.StrictShare)
			}
			if ilb.Replicas.PickerBytes <= 0 {
				t.Error("the picker's index size is not reported")
			}
		})
	}
}
