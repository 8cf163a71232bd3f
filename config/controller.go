package config

import "time"

// Policy names a weights policy.
type Policy string

// Policies ILB knows.
const (
	PolicyOptimizer    Policy = "optimizer"
	PolicyRoundRobin   Policy = "round_robin"
	PolicyProportional Policy = "proportional"
	PolicyWaterfall    Policy = "waterfall"
)

// Policies lists the valid policies.
var Policies = []Policy{PolicyOptimizer, PolicyRoundRobin, PolicyProportional, PolicyWaterfall}

// Token cost defaults of a model (see Model).
const (
	DefaultPromptTokenCost = 1
	DefaultOutputTokenCost = 4
)

// Controller configures the slow loop that computes weights. Costs are in
// milliseconds-equivalent per token-cost unit per second: one unit of
// traffic sent over a link of RTT r costs r. See docs/controller.md.
type Controller struct {
	// Tick is the period of the weights computation; default 5s, >= 100ms.
	Tick Duration `yaml:"tick" json:"tick"`
	// TargetUtilization is the share of a cluster's capacity the
	// controller plans to use, in (0, 1]; default 0.8.
	TargetUtilization float64 `yaml:"target_utilization" json:"target_utilization"`
	// Policy selects how weights are computed; default "optimizer".
	Policy Policy `yaml:"policy" json:"policy"`

	// EgressMsPerUSDPerGB prices egress in the latency currency: 1 $/GB of
	// egress costs as much as this many ms of round trip; default 100.
	EgressMsPerUSDPerGB float64 `yaml:"egress_ms_per_usd_per_gb" json:"egress_ms_per_usd_per_gb"`
	// UtilizationCost is the marginal cost of load on a cluster, per
	// utilization band: convex (costs non-decreasing), the last band ending
	// at 1. Empty: the default curve around TargetUtilization, gentle below
	// it and steep above (see DefaultUtilizationCost).
	UtilizationCost []CostBand `yaml:"utilization_cost,omitempty" json:"utilization_cost,omitempty"`
	// MovementCost is charged per unit of a cell's traffic moved between
	// regions, against the previous weights; default 5.
	MovementCost float64 `yaml:"movement_cost" json:"movement_cost"`
	// Shedding prices shedding per priority.
	Shedding Shedding `yaml:"shedding" json:"shedding"`

	// DemandHalfLife is the half-life of the EWMA that smooths measured
	// demand; default 30s.
	DemandHalfLife Duration `yaml:"demand_half_life" json:"demand_half_life"`
	// MinCellDemand is the demand, in token-cost units per second, every
	// (source, model) is planned for at least, so that a cell without
	// traffic still has weights where its first requests are best served;
	// default 1, >= 0.
	MinCellDemand float64 `yaml:"min_cell_demand" json:"min_cell_demand"`
	// MaxWeightStep bounds how far a weight moves per tick, as a fraction
	// of its cell's traffic, in (0, 1]; default 0.25. Traffic on a cluster
	// that lost its capacity or eligibility moves at once.
	MaxWeightStep float64 `yaml:"max_weight_step" json:"max_weight_step"`
	// MaxUtilizationStep bounds how far the planned load of a cluster moves
	// per tick, as a fraction of its capacity, in (0, 1]; default 0.25.
	MaxUtilizationStep float64 `yaml:"max_utilization_step" json:"max_utilization_step"`
	// Deadband: a new solution whose weights and shed fractions all moved
	// less than this fraction keeps the previous version; default 0.01,
	// in [0, 1).
	Deadband float64 `yaml:"deadband" json:"deadband"`

	// StaleAfter: inputs observed longer ago than this keep the last good
	// weights (fail-static); default 30s.
	StaleAfter Duration `yaml:"stale_after" json:"stale_after"`
	// MaxDemandJump: total demand changing by more than this factor in one
	// tick is implausible (fail-static); default 10, > 1.
	MaxDemandJump float64 `yaml:"max_demand_jump" json:"max_demand_jump"`
	// MaxCapacityDrop: total capacity falling by more than this fraction
	// in one tick is implausible (fail-static); default 0.5, in (0, 1].
	MaxCapacityDrop float64 `yaml:"max_capacity_drop" json:"max_capacity_drop"`
	// Capacity configures what is learned of each cluster's capacity from
	// its engines.
	Capacity CapacityLearning `yaml:"capacity" json:"capacity"`
}

// Capacity modes.
const (
	// CapacityLearned plans with the capacity learned from the engines,
	// the profiles being the prior (package capacity).
	CapacityLearned = "learned"
	// CapacityConfigured plans with the profiles as written; the learned
	// estimates are still computed and shown.
	CapacityConfigured = "configured"
)

// CapacityLearning configures the capacity estimator (docs/controller.md,
// "Capacity learned from the engines").
type CapacityLearning struct {
	// Mode is "learned" (default) or "configured".
	Mode string `yaml:"mode" json:"mode"`
	// TTFTTarget is the time to first token the engines should give,
	// measured at the engine (the engines' own TTFT histograms), without
	// the network; default 2s. The capacity estimator learns against it,
	// and ext_proc moves a request whose predicted first token on the
	// chosen cluster is past it to a cluster predicted within it.
	TTFTTarget Duration `yaml:"ttft_target" json:"ttft_target"`
	// TTFTQuantile is the share of requests that should get it, in
	// (0, 1); default 0.99.
	TTFTQuantile float64 `yaml:"ttft_quantile" json:"ttft_quantile"`
	// TimeConstant weighs the evidence (the prior keeps e^-t/τ of its
	// weight after t of evidence); default 60s, >= 1s.
	TimeConstant Duration `yaml:"time_constant" json:"time_constant"`
}

// CostBand is one band of the utilization cost curve: from the previous
// band's end to UpTo (a utilization in (0, 1]) each unit costs Cost.
type CostBand struct {
	UpTo float64 `yaml:"up_to" json:"up_to"`
	Cost float64 `yaml:"cost" json:"cost"`
}

// Shedding prices shedding a unit of demand of each priority. The
// standard and critical prices must exceed the dearest way of serving (the
// steepest utilization band plus the longest round trip and its egress,
// plus twice the movement cost), so that ILB sheds them only when it
// cannot serve them; the sheddable price must exceed the dearest way of
// serving up to the target utilization. Its default (2000) lies between
// the default bands of 85-90% (1500) and 90-95% (3000): ILB sheds
// sheddable demand rather than run a cluster past 90% of its capacity,
// where queues build up (docs/benchmarks.md, outage), and keeps the rest
// for standard and critical demand. Lower priorities are cheaper, so that
// they are shed first. Costs are bounded above:
// sheddable and standard below OverflowCost (1e6, what serving critical
// demand above a cluster's capacity costs, so shedding them is always
// preferred to overloading), critical at most MaxShedCost (1e6), which
// also keeps the solver's integer costs from overflowing.
type Shedding struct {
	SheddableCost float64 `yaml:"sheddable_cost" json:"sheddable_cost"` // default 2000
	StandardCost  float64 `yaml:"standard_cost" json:"standard_cost"`   // default 100000
	// ShedCritical allows shedding critical requests (at CriticalCost);
	// default false: critical demand is served even above a cluster's
	// capacity when nothing else can serve it.
	ShedCritical bool    `yaml:"shed_critical" json:"shed_critical"`
	CriticalCost float64 `yaml:"critical_cost" json:"critical_cost"` // default 1000000
}

// DefaultController returns the controller defaults.
func DefaultController() Controller {
	return Controller{
		Tick:                Duration(5 * time.Second),
		TargetUtilization:   0.8,
		Policy:              PolicyOptimizer,
		EgressMsPerUSDPerGB: 100,
		MovementCost:        5,
		Shedding:            Shedding{SheddableCost: 2000, StandardCost: 1e5, CriticalCost: 1e6},
		DemandHalfLife:      Duration(30 * time.Second),
		MinCellDemand:       1,
		MaxWeightStep:       0.25,
		MaxUtilizationStep:  0.25,
		Deadband:            0.01,
		StaleAfter:          Duration(30 * time.Second),
		MaxDemandJump:       10,
		MaxCapacityDrop:     0.5,
		Capacity: CapacityLearning{
			Mode: CapacityLearned, TTFTTarget: Duration(2 * time.Second), TTFTQuantile: 0.99, TimeConstant: Duration(time.Minute),
		},
	}
}

// DefaultUtilizationCost is the curve used when the file gives none, for
// target utilization t: rising from zero load, 0.25, 0.5, 1, 2, 4 and 8
// per unit in six bands up to t (gentle: every unit of load costs
// something, so ties spread rather than pile onto one cluster, and load
// spreads over the clusters of one region before it leaves it), then
// 1000, 1500, 3000 and 6000 in four bands up to 1 (steep: past the target
// an engine is on the knee of its TTFT curve, so any cluster up to a
// second away is preferred, and the rising steps spread the load evenly
// rather than fill the nearest clusters first; see docs/benchmarks.md).
func DefaultUtilizationCost(t float64) []CostBand {
	var b []CostBand
	for i, c := range []float64{0.25, 0.5, 1, 2, 4, 8} {
		b = append(b, CostBand{UpTo: t * float64(i+1) / 6, Cost: c})
	}
	b[len(b)-1].UpTo = t // exactly, whatever the rounding
	if t < 1 {
		for i, c := range []float64{1000, 1500, 3000, 6000} {
			b = append(b, CostBand{UpTo: t + (1-t)*float64(i+1)/4, Cost: c})
		}
		b[len(b)-1].UpTo = 1 // exactly, whatever the rounding
	}
	return b
}

// CostCurve is the utilization cost curve in force.
func (c Controller) CostCurve() []CostBand {
	if len(c.UtilizationCost) > 0 {
		return c.UtilizationCost
	}
	return DefaultUtilizationCost(c.TargetUtilization)
}
