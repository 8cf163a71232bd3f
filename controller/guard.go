package controller

import (
	"fmt"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

// Reasons the controller keeps the last good weights (the values of the
// reason label of ilb_controller_fail_static).
const (
	reasonStaleState     = "stale_state"
	reasonStaleDemand    = "stale_demand"
	reasonDemandJump     = "demand_jump"
	reasonCapacityDrop   = "capacity_drop"
	reasonBadInput       = "bad_input"
	reasonSolver         = "solver_error"
	reasonRejected       = "rejected"
	reasonBlind          = "blind"
	implausibleTolerance = 3 // consecutive ticks after which a jump is believed
)

var failStaticReasons = []string{reasonStaleState, reasonStaleDemand, reasonDemandJump, reasonCapacityDrop, reasonBadInput, reasonSolver, reasonRejected, reasonBlind}

// guard checks a tick's inputs before they are used: fresh, and plausible
// against the inputs last accepted. Both demand and capacity are compared
// with the raw level last accepted (not the moving average, which lags: a
// real change would look like a jump again tick after tick). A jump that
// persists for implausibleTolerance ticks is believed (a real surge or
// outage) and becomes the level later ticks are compared with, so the
// controller never stays frozen on a change that is true, nor flaps on it.
//
// Before all that, a blind signals monitor (blind returns a reason) fails
// every tick: the cluster state it reports is its last known one, held
// because it cannot see, and is not believed however long it lasts.
type guard struct {
	cfg          config.Controller
	blind        func() string // Options.Blind; nil: never blind
	lastCapacity float64       // total capacity last accepted, 0 before
	lastDemand   float64       // total raw demand last accepted, 0 before
	demandJumps  int           // consecutive ticks with an implausible demand
	capDrops     int
}

func (g *guard) check(now time.Time, states map[string]weights.ClusterState, stateAt time.Time, raw weights.Demand, demandAt time.Time) (string, error) {
	if g.blind != nil {
		if why := g.blind(); why != "" {
			return reasonBlind, fmt.Errorf("the engine signals are blind: %s", why)
		}
	}
	if age := now.Sub(stateAt); age > g.cfg.StaleAfter.Std() {
		return reasonStaleState, fmt.Errorf("cluster state observed %s ago (stale after %s)", age.Round(time.Second), g.cfg.StaleAfter)
	}
	if age := now.Sub(demandAt); age > g.cfg.StaleAfter.Std() {
		return reasonStaleDemand, fmt.Errorf("demand measured %s ago (stale after %s)", age.Round(time.Second), g.cfg.StaleAfter)
	}
	if before, after := g.lastDemand, raw.Total(); before > 0 {
		floor := g.cfg.MinCellDemand // tiny totals jump by large factors without meaning
		if hi, lo := max(before, after, floor), max(min(before, after), floor); hi/lo > g.cfg.MaxDemandJump {
			g.demandJumps++
			if g.demandJumps < implausibleTolerance {
				return reasonDemandJump, fmt.Errorf("total demand went from %.0f to %.0f token-cost/s in one tick (more than ×%g); believed if it persists %d ticks",
					before, after, g.cfg.MaxDemandJump, implausibleTolerance)
			}
		}
	}
	if capacity := totalCapacity(states); g.lastCapacity > 0 && capacity < (1-g.cfg.MaxCapacityDrop)*g.lastCapacity {
		g.capDrops++
		if g.capDrops < implausibleTolerance {
			return reasonCapacityDrop, fmt.Errorf("total capacity fell from %.0f to %.0f token-cost/s in one tick (more than %.0f%%); believed if it persists %d ticks",
				g.lastCapacity, capacity, 100*g.cfg.MaxCapacityDrop, implausibleTolerance)
		}
	}
	return "", nil
}

// accept records inputs that were used: the levels later ticks are
// compared with (a believed jump rebases them).
func (g *guard) accept(states map[string]weights.ClusterState, raw weights.Demand) {
	g.lastCapacity = totalCapacity(states)
	g.lastDemand = raw.Total()
	g.demandJumps, g.capDrops = 0, 0
}

func totalCapacity(states map[string]weights.ClusterState) float64 {
	var t float64
	for _, s := range states {
		t += s.Capacity
	}
	return t
}
