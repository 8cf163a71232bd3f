package experiment_test

import (
	"testing"
	"time"

	"github.com/ilbproject/ilb/sim/experiment"
)

// BenchmarkSimulatedHour runs one simulated hour of the diurnal scenario
// (3 regions, 10 engine clusters, 26 replicas, ~120 req/s, 430k requests)
// under one policy, the workload and calibration prepared outside the
// timer. The goal is well under a minute per op on 2 cores.
//
//	go test -run '^$' -bench SimulatedHour -benchtime 1x ./sim/experiment/
func BenchmarkSimulatedHour(b *testing.B) {
	s, err := experiment.LookupScenario("diurnal", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	reqs, err := s.Workload(1)
	if err != nil {
		b.Fatal(err)
	}
	capacity, err := experiment.Calibrate(s.Fleet, reqs, s.SLO)
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"ilb", "round_robin", "least_loaded"} {
		p, _ := experiment.LookupPolicy(name)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, err := experiment.Run(b.Context(), experiment.Options{Scenario: s, Policy: p, Seed: 1, Requests: reqs, Capacity: capacity})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(res.Totals.Requests), "requests/op")
			}
		})
	}
}
