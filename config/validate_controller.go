package config

import (
	"fmt"
	"math"
	"time"
)

// finite reports whether v is a finite number >= 0.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 }

func (c *Config) validateController(p *problems) {
	ct := c.Controller
	for _, f := range []struct {
		path string
		v    float64
	}{
		{"controller.egress_ms_per_usd_per_gb", ct.EgressMsPerUSDPerGB},
		{"controller.movement_cost", ct.MovementCost},
		{"controller.min_cell_demand", ct.MinCellDemand},
	} {
		if !finite(f.v) {
			p.addf(f.path, "%v is not valid: want a finite number >= 0", f.v)
		}
	}
	for _, f := range []struct {
		path string
		v    float64
	}{
		{"controller.max_weight_step", ct.MaxWeightStep},
		{"controller.max_utilization_step", ct.MaxUtilizationStep},
		{"controller.max_capacity_drop", ct.MaxCapacityDrop},
	} {
		if !finite(f.v) || f.v <= 0 || f.v > 1 {
			p.addf(f.path, "%v is out of range: want a number in (0, 1]", f.v)
		}
	}
	if !finite(ct.Deadband) || ct.Deadband >= 1 {
		p.addf("controller.deadband", "%v is out of range: want a number in [0, 1)", ct.Deadband)
	}
	if !finite(ct.MaxDemandJump) || ct.MaxDemandJump <= 1 {
		p.addf("controller.max_demand_jump", "%v is out of range: want a finite factor > 1", ct.MaxDemandJump)
	}
	cl := ct.Capacity
	if cl.Mode != CapacityLearned && cl.Mode != CapacityConfigured {
		p.addf("controller.capacity.mode", "%q is not a mode: want %q or %q", cl.Mode, CapacityLearned, CapacityConfigured)
	}
	if cl.TTFTTarget.Std() <= 0 {
		p.addf("controller.capacity.ttft_target", "%s is not positive: want a duration such as 2s", cl.TTFTTarget)
	}
	if !finite(cl.TTFTQuantile) || cl.TTFTQuantile <= 0 || cl.TTFTQuantile >= 1 {
		p.addf("controller.capacity.ttft_quantile", "%v is out of range: want a number in (0, 1), e.g. 0.99", cl.TTFTQuantile)
	}
	if cl.TimeConstant.Std() < time.Second {
		p.addf("controller.capacity.time_constant", "%s is too short: want at least 1s (60s by default)", cl.TimeConstant)
	}
	if ct.DemandHalfLife.Std() <= 0 {
		p.addf("controller.demand_half_life", "%s is not positive: want a duration such as 30s", ct.DemandHalfLife)
	}
	switch ri := c.ExtProc.ReportInterval; {
	case ct.StaleAfter.Std() < ct.Tick.Std():
		p.addf("controller.stale_after", "%s is shorter than the tick %s: every input would be stale", ct.StaleAfter, ct.Tick)
	case ct.StaleAfter.Std() < ct.Tick.Std()+ri.Std():
		// Demand is dated by the tick after each reporter's last report.
		p.addf("controller.stale_after", "%s is shorter than the tick %s plus extproc.report_interval %s: demand would look stale between two reports", ct.StaleAfter, ct.Tick, ri)
	}
	top, atTarget := c.validateCurve(p, ct.UtilizationCost)
	c.validateShedding(p, top, atTarget)
	for i, m := range c.Models {
		path := fmt.Sprintf("models[%d]", i)
		if !finite(m.PromptTokenCost) {
			p.addf(path+".prompt_token_cost", "%v is not valid: want a finite number >= 0", m.PromptTokenCost)
		}
		if !finite(m.OutputTokenCost) {
			p.addf(path+".output_token_cost", "%v is not valid: want a finite number >= 0", m.OutputTokenCost)
		}
		if !finite(m.TTFTBudgetMs) {
			p.addf(path+".ttft_budget_ms", "%v is not valid: want a finite number >= 0 (0: no budget)", m.TTFTBudgetMs)
		}
		if m.ContextTokens < 16 || m.ContextTokens > 1<<24 {
			p.addf(path+".context_tokens", "%d is out of range: want a number of tokens in 16..%d", m.ContextTokens, 1<<24)
		}
		if m.MaxOutputTokens < 1 || m.MaxOutputTokens > m.ContextTokens {
			p.addf(path+".max_output_tokens", "%d is out of range: want 1..context_tokens (%d)", m.MaxOutputTokens, m.ContextTokens)
		}
	}
}

// validateCurve checks a utilization cost curve and returns its top cost.
// validateCurve checks the utilization cost curve and returns the cost of
// its top band and of the band that reaches the target utilization.
func (c *Config) validateCurve(p *problems, bands []CostBand) (top, atTarget float64) {
	if len(bands) == 0 {
		bands = c.Controller.CostCurve()
	}
	prevUp, prevCost := 0.0, 0.0
	target := c.Controller.TargetUtilization
	for i, b := range bands {
		if prevUp < target {
			atTarget = b.Cost
		}
		path := fmt.Sprintf("controller.utilization_cost[%d]", i)
		if !finite(b.UpTo) || b.UpTo <= prevUp || b.UpTo > 1 {
			p.addf(path+".up_to", "%v is out of order: want a utilization in (%v, 1], above the previous band's", b.UpTo, prevUp)
		}
		if !finite(b.Cost) || b.Cost < prevCost {
			p.addf(path+".cost", "%v is not valid: want a finite cost >= %v (the curve must be convex: costs never decrease)", b.Cost, prevCost)
		}
		prevUp, prevCost = b.UpTo, b.Cost
	}
	if prevUp != 1 {
		p.addf("controller.utilization_cost", "the last band ends at %v: want 1 (full capacity)", prevUp)
	}
	return prevCost, atTarget
}

// Cost limits of the optimizer, in ms-equivalent per token-cost unit.
const (
	// OverflowCost is charged per unit of demand served above a cluster's
	// capacity, which only critical demand that may not be shed is (an
	// overflow arc open to every priority: sheddable and standard demand
	// is shed instead because their shed costs are below it).
	OverflowCost = 1e6
	// MaxShedCost bounds every shed cost. The solver works in int64: costs
	// × 100 times flows scaled to 2^34 units of total demand, so the
	// dearest path (a link, the movement cost and the overflow cost, or a
	// shed cost) must stay well below 2^63 / (100 × 2^34) ≈ 5.4e6.
	MaxShedCost = 1e6
)

// validateShedding checks that shedding sheddable demand is dearer than
// any way of serving it up to the target utilization, and shedding
// standard and critical demand dearer than any way of serving at all; that
// lower priorities are cheaper to shed; that standard and sheddable demand
// is cheaper to shed than to run a cluster over capacity (the overflow
// cost); and that no cost is too large for the solver.
func (c *Config) validateShedding(p *problems, topBand, atTarget float64) {
	sh := c.Controller.Shedding
	dearestWith := func(band float64) float64 {
		d := band + 2*c.Controller.MovementCost
		for _, l := range c.Network {
			d = math.Max(d, band+2*c.Controller.MovementCost+l.RTTMs+l.EgressUSDPerGB*c.Controller.EgressMsPerUSDPerGB)
		}
		return d
	}
	dearest, dearestAtTarget := dearestWith(topBand), dearestWith(atTarget)
	// check wants v in (floor, ceiling), or (floor, ceiling] when closed.
	check := func(path string, v, floor float64, what string, ceiling float64, closed bool, why string) {
		switch {
		case !finite(v) || v <= floor:
			p.addf(path, "%v is too low: want more than %v (%s)", v, floor, what)
		case v > ceiling || (!closed && v == ceiling):
			end := ")"
			if closed {
				end = "]"
			}
			p.addf(path, "%v is too high: want a cost in (%v, %v%s: %s", v, floor, ceiling, end, why)
		}
	}
	// below is v as the floor of the next priority, when v is valid.
	below := func(v, ceiling float64) float64 {
		if finite(v) && v < ceiling {
			return v
		}
		return 0
	}
	overflow := fmt.Sprintf("shedding it must cost less than serving critical demand above a cluster's capacity (%v), or ILB overloads a cluster instead of shedding", float64(OverflowCost))
	check("controller.shedding.sheddable_cost", sh.SheddableCost, dearestAtTarget,
		"the dearest way of serving up to the target utilization: ILB must not shed sheddable demand while a cluster it may use is below its target", OverflowCost, false, overflow)
	check("controller.shedding.standard_cost", sh.StandardCost, math.Max(dearest, below(sh.SheddableCost, OverflowCost)),
		"sheddable_cost: lower priorities are shed first", OverflowCost, false, overflow)
	if sh.ShedCritical {
		check("controller.shedding.critical_cost", sh.CriticalCost, math.Max(dearest, below(sh.StandardCost, OverflowCost)),
			"standard_cost: lower priorities are shed first", MaxShedCost, true,
			"larger costs overflow the solver's int64 arithmetic (costs × 100 × 2^34 flow units)")
	}
}
