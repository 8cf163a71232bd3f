package experiment

import (
	"errors"
	"fmt"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/sim/workload"
)

// Scenario is one experiment: a fleet, its workload and what happens to
// its replicas over time.
type Scenario struct {
	Name, Summary string
	Fleet         Fleet
	Duration      time.Duration
	// Workload generates the requests for a seed; every policy of a run
	// gets the same requests.
	Workload func(seed uint64) ([]workload.Request, error)
	Changes  []Change
	// SLO: a request is good when its time to first token is at most
	// TTFT. Goodput counts good requests.
	SLO time.Duration
	// Strict is an optional second, stricter SLO reported beside SLO
	// (zero: none): a request is good under it when its time to first
	// token and its time per output token are both within its bounds
	// (goodput as DistServe defines it).
	Strict SLOClass
	// SignalsInterval is how often ILB's signals scrape the engines
	// (signals.interval, unjittered); 0: the configuration's default.
	SignalsInterval time.Duration
	// Flood, when set, is a tenant's flood: the run reports every
	// tenant's goodput before it and during it (Result.Tenants).
	Flood *Flood
	// gen is the synthetic workload's spec when Workload generates one
	// (nil for a workload given otherwise): what Scaled rescales.
	gen *workload.Spec
}

// Flood is one tenant asking for more than its share from From to To.
type Flood struct {
	Tenant   string
	From, To time.Duration
}

// SLOClass is a latency class a request may meet: time to first token
// at most TTFT and time per output token (after the first) at most TPOT.
type SLOClass struct {
	Name       string
	TTFT, TPOT time.Duration
}

// met reports whether a request with these latencies meets the class.
func (c SLOClass) met(ttft, tpot time.Duration) bool { return ttft <= c.TTFT && tpot <= c.TPOT }

// Scaled returns s with every source's request rate multiplied by f (> 0),
// bursts included; only scenarios whose workload is synthetic scale.
func (s Scenario) Scaled(f float64) (Scenario, error) {
	if s.gen == nil {
		return Scenario{}, fmt.Errorf("scenario %s: its workload is not synthetic: it cannot be scaled", s.Name)
	}
	if !(f > 0) || f > 1e6 {
		return Scenario{}, fmt.Errorf("scenario %s: rate factor %v, want > 0", s.Name, f)
	}
	spec := *s.gen
	spec.Sources = append([]workload.SourceSpec(nil), spec.Sources...)
	for i := range spec.Sources {
		spec.Sources[i].MeanRate *= f
	}
	s.gen = &spec
	s.Workload = func(seed uint64) ([]workload.Request, error) {
		sp := spec
		sp.Seed = seed
		return workload.Generate(sp)
	}
	return s, nil
}

// Action is what a Change does to replicas.
type Action uint8

// Actions.
const (
	// Fail crashes replicas: every request in them fails; Envoy notices
	// after the health-check delay, ILB's signals after a scrape.
	Fail Action = iota
	// Recover restarts failed replicas: starting, then warming, then ready.
	Recover
	// Drain stops sending new requests to replicas; they finish theirs.
	Drain
	// Restore makes drained replicas ready again.
	Restore
)

func (a Action) String() string {
	switch a {
	case Fail:
		return "fail"
	case Recover:
		return "recover"
	case Drain:
		return "drain"
	case Restore:
		return "restore"
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// Change is a scheduled change to the replicas of some clusters: those of
// Cluster, or every cluster of Region, Fraction of their replicas (the
// first ones; 0 means all).
type Change struct {
	At       time.Duration
	Action   Action
	Cluster  string
	Region   string
	Fraction float64
}

// Policy is a routing policy under test.
type Policy struct {
	Name string
	// Weights is the weights policy the controller runs; "" for
	// LeastLoaded.
	Weights config.Policy
	// FastLoop turns on ext_proc's request-path signals: clusters with no
	// serving replica are excluded at once, sheddable requests are shed
	// when every remaining cluster is saturated.
	FastLoop bool
	// LeastLoaded is the greedy reference: per request, the eligible
	// cluster with the least predicted time to first token (round trip
	// plus its outstanding work over its capacity), from exact
	// instantaneous state. It never sheds.
	LeastLoaded bool
	// Seen feeds LeastLoaded only what ILB sees (least_loaded_seen): the
	// requests in flight at ext_proc's estimate of their cost, and the
	// serving replicas of the signals monitor's last round. Without it,
	// least_loaded is an oracle no router can deploy: it knows each
	// request's output length before it is generated, and every replica's
	// state at once.
	Seen bool
	// LearnCapacity: the controller plans with the capacity package's
	// estimates, learned from the replicas' token counters and queues,
	// with the calibrated capacity as the prior; otherwise with the
	// calibrated capacity, as configured.
	LearnCapacity bool
	// Hosts picks the replica inside the chosen cluster; "" is
	// HostLeastRequest (Envoy's default).
	Hosts HostPolicy
	// Tenants: the sources trust the requests' tenants (x-ilb-tenant),
	// so the planned shedding is fair between them (package tenant);
	// with FastLoop only.
	Tenants bool
}

// Policies are the policies every scenario compares: the three baselines
// the controller offers, ILB's optimizer with its fast loop, and the
// greedy per-request reference.
func Policies() []Policy {
	return []Policy{
		{Name: "round_robin", Weights: config.PolicyRoundRobin},
		{Name: "proportional", Weights: config.PolicyProportional},
		{Name: "waterfall", Weights: config.PolicyWaterfall},
		{Name: "ilb", Weights: config.PolicyOptimizer, FastLoop: true, LearnCapacity: true, Tenants: true},
		{Name: "least_loaded", LeastLoaded: true},
		{Name: "least_loaded_seen", LeastLoaded: true, Seen: true},
	}
}

// LookupPolicy finds a policy of Policies by name; "ilb-slow" is ILB
// without the fast loop, "ilb-prior" ILB planning with the configured
// capacity instead of the learned one, "ilb-untenanted" ILB whose sources
// do not trust the tenant header (shedding blind to tenants).
func LookupPolicy(name string) (Policy, bool) {
	switch name {
	case "ilb-untenanted":
		return Policy{Name: name, Weights: config.PolicyOptimizer, FastLoop: true, LearnCapacity: true}, true
	case "ilb-slow":
		return Policy{Name: name, Weights: config.PolicyOptimizer, LearnCapacity: true}, true
	case "ilb-prior":
		return Policy{Name: name, Weights: config.PolicyOptimizer, FastLoop: true}, true
	}
	for _, p := range Policies() {
		if p.Name == name {
			return p, true
		}
	}
	return Policy{}, false
}

// Validate reports every problem of s.
func (s Scenario) Validate() error {
	var errs []error
	if s.Name == "" {
		errs = append(errs, errors.New("scenario: name is empty"))
	}
	if s.Duration <= 0 {
		errs = append(errs, fmt.Errorf("scenario %s: duration %s, want > 0", s.Name, s.Duration))
	}
	if s.SLO <= 0 {
		errs = append(errs, fmt.Errorf("scenario %s: SLO %s, want > 0", s.Name, s.SLO))
	}
	if s.Strict != (SLOClass{}) && (s.Strict.TTFT <= 0 || s.Strict.TPOT <= 0 || s.Strict.Name == "") {
		errs = append(errs, fmt.Errorf("scenario %s: strict SLO %q: TTFT %s, TPOT %s: want a name and both > 0", s.Name, s.Strict.Name, s.Strict.TTFT, s.Strict.TPOT))
	}
	if s.Workload == nil {
		errs = append(errs, fmt.Errorf("scenario %s: no workload", s.Name))
	}
	if err := s.Fleet.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("scenario %s: %w", s.Name, err))
	}
	for i, c := range s.Changes {
		if c.Cluster == "" && c.Region == "" {
			errs = append(errs, fmt.Errorf("scenario %s: changes[%d]: name a cluster or a region", s.Name, i))
		}
		if c.Fraction < 0 || c.Fraction > 1 {
			errs = append(errs, fmt.Errorf("scenario %s: changes[%d].fraction %v, want [0, 1]", s.Name, i, c.Fraction))
		}
	}
	return errors.Join(errs...)
}
