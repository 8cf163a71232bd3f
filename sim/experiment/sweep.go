package experiment

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/ilbproject/ilb/weights"
)

// Sweep is one workload run at several loads: Results[i] are the policies'
// results at Loads[i] (fractions of the fleet's measured saturation
// throughput), in increasing order.
type Sweep struct {
	Workload string      `json:"workload"`
	Loads    []float64   `json:"loads"`
	Results  [][]*Result `json:"results"`
	// Attain is the share of requests within the SLO a policy must serve
	// for a load to count as sustained.
	Attain float64 `json:"attain"`
}

// deployable are the baselines ILB is held to: the controller's policies
// that plan with the fleet's capacity, as ILB does, and the greedy router
// fed what ILB sees. least_loaded, an oracle (each request's true output,
// every replica's state at once), is shown and not held to.
var deployable = []string{"proportional", "waterfall", "least_loaded_seen"}

// saturatedLoad is the load (a fraction of the fleet's measured saturation
// throughput) from which a fleet with all of its capacity cannot serve all
// of the demand: where the sweep has no oracle, the loads from it on are
// past saturation.
const saturatedLoad = 1.0

// Saturation is the load past which the sweep's fleet cannot serve the
// demand within the SLO: the oracle least_loaded's maximum sustainable
// load (it knows every request's true output and every replica's state at
// once, and sheds nothing; a load it cannot sustain is past what the
// fleet, as the scenario changes it, can serve), or just under
// saturatedLoad when the sweep has no oracle. The load is scaled to the
// whole fleet's saturation throughput: a scenario that takes capacity
// away (an outage, a drain), confines sources (residency) or bursts
// saturates below 1.
func (s Sweep) Saturation() float64 {
	for _, rs := range s.Results {
		for _, r := range rs {
			if r.Policy == "least_loaded" {
				return s.MaxSustainable()["least_loaded"]
			}
		}
	}
	return math.Nextafter(saturatedLoad, 0)
}

// policies lists the sweep's policies in run order.
func (s Sweep) policies() []string {
	var out []string
	for _, rs := range s.Results {
		for _, r := range rs {
			if !slices.Contains(out, r.Policy) {
				out = append(out, r.Policy)
			}
		}
	}
	return out
}

func (s Sweep) result(i int, policy string) *Result {
	for _, r := range s.Results[i] {
		if r.Policy == policy {
			return r
		}
	}
	return nil
}

// MaxSustainable is, per policy, the highest load of the sweep up to which
// it serves at least Attain of the requests within the SLO at every load
// of the sweep (0: not even the lowest).
func (s Sweep) MaxSustainable() map[string]float64 {
	out := map[string]float64{}
	for _, p := range s.policies() {
		for i, l := range s.Loads {
			r := s.result(i, p)
			if r == nil || r.Totals.GoodShare < s.Attain {
				break
			}
			out[p] = l
		}
	}
	return out
}

// Check is one rule of the sweep ILB must keep.
type Check struct {
	Load float64
	Rule string
	OK   bool
}

// Checks holds ILB to its bar at every load, against the best deployable
// baseline there (the most goodput; among equals, the lowest p99 TTFT),
// whether or not any of them attains: up to the sweep's Saturation, ILB's
// goodput within the SLO at least 0.98× the baseline's, its p99 TTFT at
// most 1.1× the baseline's and at most 1% of standard requests shed; past
// it, its goodput at least the baseline's, with importance kept: critical
// and standard requests shed no more than sheddable ones, and served
// within the SLO no less often. And ILB's maximum sustainable load at
// least that of every policy but the oracle.
func (s Sweep) Checks() []Check {
	var out []Check
	sat := s.Saturation()
	for i, l := range s.Loads {
		ilb := s.result(i, "ilb")
		if ilb == nil {
			continue
		}
		var best *Result
		for _, p := range deployable {
			r := s.result(i, p)
			if r == nil {
				continue
			}
			if best == nil || r.Totals.Goodput > best.Totals.Goodput*1.001 ||
				r.Totals.Goodput >= best.Totals.Goodput*0.999 && r.Totals.TTFTp99 < best.Totals.TTFTp99 {
				best = r
			}
		}
		if best == nil {
			continue
		}
		if l <= sat {
			out = append(out,
				Check{l, fmt.Sprintf("goodput %.2f/s ≥ 0.98 × %s's %.2f/s", ilb.Totals.Goodput, best.Policy, best.Totals.Goodput), ilb.Totals.Goodput >= 0.98*best.Totals.Goodput},
				Check{l, fmt.Sprintf("p99 TTFT %s ≤ 1.1 × %s's %s", secs(ilb.Totals.TTFTp99), best.Policy, secs(best.Totals.TTFTp99)), ilb.Totals.TTFTp99 <= 1.1*best.Totals.TTFTp99},
				Check{l, fmt.Sprintf("standard shed %s ≤ 1%%", pct(ilb.Totals.Shed[1])), ilb.Totals.Shed[1] <= 0.01})
			continue
		}
		sh := ilb.Totals.Shed
		out = append(out,
			Check{l, fmt.Sprintf("goodput %.2f/s ≥ %s's %.2f/s (past saturation)", ilb.Totals.Goodput, best.Policy, best.Totals.Goodput), ilb.Totals.Goodput >= best.Totals.Goodput},
			Check{l, fmt.Sprintf("shed critical %s ≤ standard %s ≤ sheddable %s", pct(sh[0]), pct(sh[1]), pct(sh[2])), sh[0] <= sh[1] && sh[1] <= sh[2]},
			importanceKept(l, ilb.Totals))
	}
	sustained := s.MaxSustainable()
	for _, p := range s.policies() {
		if p == "ilb" || p == "least_loaded" || strings.HasPrefix(p, "ilb-") {
			continue
		}
		out = append(out, Check{0, fmt.Sprintf("max sustainable load %.2f ≥ %s's %.2f", sustained["ilb"], p, sustained[p]), sustained["ilb"] >= sustained[p]})
	}
	return out
}

// importanceKept checks that the more important of any two priorities
// with requests is served within the SLO at least as often, but for
// sampling noise: two standard errors of the difference of the two
// shares (critical requests, never shed, go to overloaded clusters too,
// and may match standard ones to a tenth of a point).
func importanceKept(load float64, f Figures) Check {
	var parts []string
	ok := true
	prev, prevN := -1.0, 0
	for p, n := range f.ByPriority {
		if n == 0 {
			continue
		}
		g := f.GoodByPriority[p]
		parts = append(parts, fmt.Sprintf("%s %s", weights.Priority(p), pct(g)))
		if prev >= 0 && g > prev+2*math.Sqrt(prev*(1-prev)/float64(prevN)+g*(1-g)/float64(n)) {
			ok = false
		}
		prev, prevN = g, n
	}
	return Check{load, "within the SLO: " + strings.Join(parts, " ≥ "), ok}
}

// WriteSweep prints the sweep as a Markdown table: per policy and load,
// the share served within the SLO and the p99 TTFT, then each policy's
// maximum sustainable load; then ILB's checks.
func WriteSweep(w io.Writer, s Sweep) error {
	head := []string{"policy"}
	for _, l := range s.Loads {
		head = append(head, fmt.Sprintf("load %.2f", l))
	}
	head = append(head, fmt.Sprintf("max load ≥ %.0f%% good", 100*s.Attain))
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
	sustained := s.MaxSustainable()
	for _, p := range s.policies() {
		cells := []string{p}
		for i := range s.Loads {
			r := s.result(i, p)
			if r == nil {
				cells = append(cells, "–")
				continue
			}
			c := pct(r.Totals.GoodShare) + " · " + secs(r.Totals.TTFTp99)
			if sh := r.Totals.Shed[1]; sh > 0 {
				c += " · std shed " + pct(sh)
			}
			cells = append(cells, c)
		}
		cells = append(cells, fmt.Sprintf("%.2f", sustained[p]))
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
	for _, c := range s.Checks() {
		mark := "✓"
		if !c.OK {
			mark = "✗ LOSS:"
		}
		if c.Load > 0 {
			fmt.Fprintf(w, "- %s at load %.2f: ILB %s\n", mark, c.Load, c.Rule)
		} else {
			fmt.Fprintf(w, "- %s ILB %s\n", mark, c.Rule)
		}
	}
	_, err := fmt.Fprintln(w)
	return err
}
