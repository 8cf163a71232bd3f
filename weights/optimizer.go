package weights

import (
	"fmt"
	"strings"

	"github.com/ilbproject/ilb/config"
)

// Optimizer is ILB's policy: each tick a capacity-constrained min-cost
// flow (package flow) assigns every cell's demand to regions and clusters,
// minimising latency + egress + a convex utilization cost per cluster +
// the cost of moving traffic + the cost of shedding by priority; then the
// result is bounded in its step from the previous weights, quantized and
// held back by a deadband. docs/controller.md has the model and the math.
//
// The zero Optimizer works in memory of its own each Compute;
// NewOptimizer's keeps it between ticks. Both compute exactly the same
// weights: the result depends only on the Input.
type Optimizer struct {
	ws *workspace // nil: a new one per Compute
}

var _ Policy = Optimizer{}

// NewOptimizer returns an Optimizer that keeps its working memory (the
// flow network's arrays and the tick's dense tables: about 5 MB at 1,000
// sources × 2,000 clusters × 50 models) between Compute calls, so a tick
// allocates little more than the weights it returns hold. The
// controller's policy (NewPolicy) is one. Its Compute is safe for
// concurrent use: a call that finds the memory in use by another works
// in memory of its own.
func NewOptimizer() Optimizer { return Optimizer{ws: &workspace{}} }

// Name returns "optimizer".
func (Optimizer) Name() string { return string(config.PolicyOptimizer) }

// Compute solves one tick.
func (o Optimizer) Compute(in Input) (*Weights, error) {
	if err := in.check(); err != nil {
		return nil, fmt.Errorf("optimizer: %w", err)
	}
	ws := o.workspace()
	defer o.release(ws)
	ix := newIndex(in.Config)
	ws.indexPrevious(ix, in.Previous)
	n := buildNetwork(in, ix, ws)
	if err := n.solve(); err != nil {
		return nil, fmt.Errorf("optimizer: %w", err)
	}
	sol := extract(in, n, ws)
	sol.refine()
	w, err := newWeights(o.Name(), in.Now, sol.cells())
	if err != nil {
		return nil, fmt.Errorf("optimizer: %w", err)
	}
	return w, nil
}

// floorDemand plans every cell for at least MinCellDemand, adding the
// missing part as standard demand, so a cell without traffic still gets
// the weights where its first requests are served best. (The optimizer
// floors into its workspace instead: workspace.floorDemand.)
func floorDemand(c *config.Config, d Demand) Demand {
	out := make(Demand, len(d))
	for k, r := range d {
		out[k] = r
	}
	floor := c.Controller.MinCellDemand
	for _, s := range c.Sources {
		for _, m := range c.Models {
			var total float64
			for _, p := range Priorities {
				total += d[DemandKey{s.Name, m.Name, p}].CostPerSecond
			}
			if total < floor {
				k := DemandKey{s.Name, m.Name, Standard}
				r := out[k]
				r.CostPerSecond += floor - total
				out[k] = r
			}
		}
	}
	return out
}

// summary describes a cell's plan in one line.
func (p *cellPlan) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "optimizer: planned %.0f token-cost/s", p.demand)
	var regs []string
	var classServed float64
	for _, x := range p.regionX {
		classServed += x
	}
	for _, ra := range p.cell.regions {
		if x := p.regionX[ra.region]; x > 0 && classServed > 0 {
			regs = append(regs, fmt.Sprintf("%s %.0f%%", ra.region, 100*x/classServed))
		}
	}
	if len(regs) > 0 {
		fmt.Fprintf(&b, ", served in %s", strings.Join(regs, ", "))
	}
	switch shed := p.demand - p.served; {
	case len(p.cell.regions) == 0:
		b.WriteString(", no eligible cluster has capacity: requests get 503")
	case shed > 1e-9*max(p.demand, 1):
		fmt.Fprintf(&b, ", %.0f shed (demand exceeds the capacity it may use)", shed)
	}
	if p.cell.ttftRelaxed {
		fmt.Fprintf(&b, "; no cluster within the TTFT budget of %.0f ms can serve, so the budget is relaxed", p.cell.model.TTFTBudgetMs)
	}
	switch {
	case p.forced:
		b.WriteString("; a cluster it used lost its capacity or eligibility: moved at once")
	case p.deadband:
		b.WriteString("; change below the deadband: previous weights kept")
	case p.alpha < 1:
		fmt.Fprintf(&b, "; step-bounded: moved %.0f%% of the way to the optimum", 100*p.alpha)
	}
	return b.String()
}
