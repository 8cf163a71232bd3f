package experiment

import (
	"context"
	"fmt"
	"runtime"

	"golang.org/x/sync/errgroup"

	"github.com/ilbproject/ilb/sim/workload"
)

// Compare runs every policy on the scenario with the same workload (seed)
// and the same calibrated capacities, as many at once as there are CPUs,
// and returns the results in policy order. requests, when not nil,
// replaces the scenario's workload (a trace replay).
func Compare(ctx context.Context, s Scenario, policies []Policy, seed uint64, requests []workload.Request) ([]*Result, error) {
	return CompareRecorded(ctx, s, policies, seed, requests, false)
}

// CompareRecorded is Compare, keeping every request's Record in each
// result when records is set.
func CompareRecorded(ctx context.Context, s Scenario, policies []Policy, seed uint64, requests []workload.Request, records bool) ([]*Result, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if requests == nil {
		var err error
		if requests, err = s.Workload(seed); err != nil {
			return nil, fmt.Errorf("scenario %s: workload: %w", s.Name, err)
		}
	}
	capacity, err := Calibrate(s.Fleet, requests, s.SLO)
	if err != nil {
		return nil, err
	}
	out := make([]*Result, len(policies))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, p := range policies {
		g.Go(func() error {
			res, err := Run(gctx, Options{Scenario: s, Policy: p, Seed: seed, Requests: requests, Capacity: capacity, Records: records})
			if err != nil {
				return fmt.Errorf("policy %s: %w", p.Name, err)
			}
			out[i] = res
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}
