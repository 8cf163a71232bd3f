package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/ilbproject/ilb/weights"
)

// printCells writes cells as tables: with explain, every cluster serving
// the model with its cost terms and binding constraint; without, the
// targets only.
func printCells(w io.Writer, cells []weights.Cell, explain bool) {
	for _, c := range cells {
		fmt.Fprintf(w, "\n%s / %s", c.Source, c.Model)
		if c.Demand > 0 {
			fmt.Fprintf(w, "   demand %.0f, served %.0f token-cost/s", c.Demand, c.Served)
		}
		fmt.Fprintf(w, "   shed: critical %.1f%%, standard %.1f%%, sheddable %.1f%%\n",
			100*c.Shed[weights.Critical], 100*c.Shed[weights.Standard], 100*c.Shed[weights.Sheddable])
		if !explain || c.Explanation == nil {
			for _, t := range c.Targets {
				fmt.Fprintf(w, "  %-24s %6.2f%%\n", t.Cluster, 100*float64(t.Weight)/weights.Total)
			}
			if len(c.Targets) == 0 {
				fmt.Fprintln(w, "  (no cluster: requests get 503)")
			}
			continue
		}
		e := c.Explanation
		fmt.Fprintf(w, "  %s\n", e.Summary)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  CLUSTER\tREGION\tWEIGHT\tPREV\tRTT ms\tEGRESS\tMARGINAL\tFLOW\tUTIL\tWHY")
		for _, t := range e.Terms {
			why := t.Binding
			if t.Excluded != "" {
				why = "excluded: " + t.Excluded
			}
			fmt.Fprintf(tw, "  %s\t%s\t%.2f%%\t%.2f%%\t%.0f\t%.1f\t%s\t%.0f\t%s\t%s\n", t.Cluster, t.Region,
				100*float64(t.Weight)/weights.Total, 100*float64(t.PrevWeight)/weights.Total, t.LatencyMs, t.EgressCost,
				marginal(t), t.Flow, orDashPct(t.Utilization, t.Excluded == ""), why)
		}
		_ = tw.Flush()
		if len(e.Changes) > 0 {
			fmt.Fprintf(w, "  changes: %s\n", strings.Join(e.Changes, "; "))
		}
	}
}

// marginal is the cost of one more unit on the cluster; "full" when that
// unit would be over its capacity.
func marginal(t weights.Term) string {
	switch {
	case t.Excluded != "":
		return "-"
	case t.Utilization >= 1-1e-6:
		return "full"
	}
	return fmt.Sprintf("%.1f", t.MarginalCost)
}

func orDashPct(v float64, ok bool) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}
