package experiment

import (
	"errors"
	"fmt"
	"time"

	"github.com/ilbproject/ilb/sim/replica"
	"github.com/ilbproject/ilb/sim/workload"
)

// FleetSaturation is the fleet's measured saturation throughput on the
// mix, in token-cost units per second: every cluster's replicas times the
// SaturationThroughput of its profile on requests sampled evenly over the
// mix. Loads are fractions of it.
func FleetSaturation(f Fleet, mix []workload.Request) (float64, error) {
	if len(mix) == 0 {
		return 0, errors.New("fleet saturation: no requests")
	}
	mix = sample(mix, calibrationRequests)
	per := map[string]float64{}
	var total float64
	for _, c := range f.Clusters {
		x, ok := per[c.Profile]
		if !ok {
			p, found := replica.LookupProfile(c.Profile)
			if !found {
				return 0, fmt.Errorf("fleet saturation: cluster %s: unknown replica profile %q", c.Name, c.Profile)
			}
			var err error
			if x, err = SaturationThroughput(p, mix); err != nil {
				return 0, fmt.Errorf("fleet saturation: profile %s: %w", c.Profile, err)
			}
			per[c.Profile] = x
		}
		total += float64(c.Replicas) * x
	}
	return total, nil
}

// DemandRate is the mean demand of reqs over d, in token-cost units per
// second (prompt + 4 × output, ILB's default costs).
func DemandRate(reqs []workload.Request, d time.Duration) float64 {
	var cost float64
	for _, q := range reqs {
		if q.At < d {
			cost += requestCost(q)
		}
	}
	return cost / d.Seconds()
}

// Load is a workload at a measured fraction of the fleet's saturation
// throughput.
type Load struct {
	// Requests are the workload; Factor the rate factor applied to the
	// workload's own rates to reach the load.
	Requests []workload.Request
	Factor   float64
	// Saturation is the fleet's saturation throughput on this mix and
	// Demand the workload's mean demand, token-cost units per second.
	Saturation, Demand float64
}

// AtLoad generates a workload whose mean demand is load × the fleet's
// saturation throughput on the workload's own mix: gen(f) must give the
// workload with every rate multiplied by f. It measures at f = 1, then
// generates at the factor that reaches the load.
func AtLoad(f Fleet, d time.Duration, load float64, gen func(factor float64) ([]workload.Request, error)) (Load, error) {
	if !(load > 0) || load > 100 {
		return Load{}, fmt.Errorf("load %v: want a fraction of the fleet's saturation throughput in (0, 100]", load)
	}
	probe, err := gen(1)
	if err != nil {
		return Load{}, err
	}
	demand := DemandRate(probe, d)
	if demand <= 0 {
		return Load{}, errors.New("load: the workload has no request within the duration")
	}
	sat, err := FleetSaturation(f, probe)
	if err != nil {
		return Load{}, err
	}
	factor := load * sat / demand
	reqs, err := gen(factor)
	if err != nil {
		return Load{}, err
	}
	return Load{Requests: reqs, Factor: factor, Saturation: sat, Demand: DemandRate(reqs, d)}, nil
}
