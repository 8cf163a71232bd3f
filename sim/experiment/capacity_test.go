package experiment_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ilbproject/ilb/sim/experiment"
	"github.com/ilbproject/ilb/sim/replica"
	"github.com/ilbproject/ilb/sim/workload"
)

// TestLearnedCapacityConverges runs one cluster of two replicas at 1.5×
// its measured saturation throughput for five simulated minutes, with a
// prior (the calibrated capacity the controller starts from) three times
// too low or too high, on short and on long prompts, and checks that the
// learned saturation throughput is within ±20% of the measured one, and
// that the capacity the controller plans with moved from a prior 3× too
// high to at most that.
func TestLearnedCapacityConverges(t *testing.T) {
	mixes := []struct {
		name    string
		lengths workload.Lengths
	}{
		{"short prompts", workload.Lengths{InputMean: 1155, InputP99: 4142, OutputMean: 211, OutputP99: 900}},
		{"long prompts", workload.Lengths{InputMean: 12000, InputP99: 85000, OutputMean: 350, OutputP99: 2000}},
	}
	p, _ := replica.LookupProfile(replica.ProfileLlama3x8BH100)
	for _, mix := range mixes {
		probe, err := oneClusterWorkload(mix.lengths, 1, 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		guess, err := experiment.SaturationThroughput(p, probe)
		if err != nil {
			t.Fatal(err)
		}
		rate := 1.5 * 2 * guess / meanCost(probe) // requests/s for two replicas
		reqs, err := oneClusterWorkload(mix.lengths, rate, 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		// The run's own mix is what its saturation is measured on (a
		// long-tailed mix differs from sample to sample).
		measured, err := experiment.SaturationThroughput(p, reqs)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %.2f requests/s, %.2f× the measured saturation of two replicas", mix.name, rate, rate*meanCost(reqs)/(2*measured))
		for _, scale := range []float64{1.0 / 3, 3} {
			t.Run(fmt.Sprintf("%s, prior x%.2f", mix.name, scale), func(t *testing.T) {
				s := experiment.Scenario{
					Name: "one-cluster", Duration: 5 * time.Minute, SLO: 2 * time.Second,
					Workload: func(uint64) ([]workload.Request, error) { return reqs, nil },
					Fleet: experiment.Fleet{
						Regions: []string{"r"}, Sources: []experiment.Source{{Name: "edge", Region: "r"}}, Models: []string{"m"},
						Clusters: []experiment.Cluster{{Name: "c", Region: "r", Models: []string{"m"}, Replicas: 2, Profile: replica.ProfileLlama3x8BH100}},
					},
				}
				pol, _ := experiment.LookupPolicy("ilb")
				res, err := experiment.Run(t.Context(), experiment.Options{
					Scenario: s, Policy: pol, Seed: 1, Requests: reqs,
					Capacity: map[string]float64{replica.ProfileLlama3x8BH100: scale * measured},
				})
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Capacity) != 1 {
					t.Fatalf("capacity estimates %+v; want one", res.Capacity)
				}
				est := res.Capacity[0]
				t.Logf("measured %.0f, prior %.0f: learned saturation %.0f, plans with %.0f (%s: %s)", measured, est.Prior, est.Saturation, est.PerReplica, est.From, est.Evidence)
				if math.Abs(est.Saturation-measured) > 0.2*measured {
					t.Errorf("learned saturation %.0f token-cost/s per replica; want within 20%% of the measured %.0f", est.Saturation, measured)
				}
				if scale > 1 && est.PerReplica > 1.2*measured {
					t.Errorf("plans with %.0f, from a prior of %.0f; want at most 1.2 × the measured %.0f", est.PerReplica, est.Prior, measured)
				}
			})
		}
	}
}

func meanCost(reqs []workload.Request) float64 {
	var cost float64
	for _, q := range reqs {
		cost += float64(q.Prompt) + 4*float64(q.Output)
	}
	return cost / float64(len(reqs))
}

func oneClusterWorkload(l workload.Lengths, rate float64, d time.Duration) ([]workload.Request, error) {
	return workload.Generate(workload.Spec{Duration: d, Seed: 3, Sources: []workload.SourceSpec{{
		Name: "edge", MeanRate: rate, Lengths: l,
		Models: []workload.Share{{Name: "m", Weight: 1}}, Priorities: []workload.Share{{Name: "standard", Weight: 1}},
	}}})
}
