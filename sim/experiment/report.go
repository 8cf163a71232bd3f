package experiment

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// columns of the comparison table.
var columns = []string{
	"policy", "goodput/s", "good", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99",
	"shed crit", "shed std", "shed shed", "failed", "cross-region", "egress $", "residency viol.",
}

func row(r *Result) []string {
	t := r.Totals
	return []string{
		r.Policy,
		fmt.Sprintf("%.1f", t.Goodput),
		pct(t.GoodShare),
		secs(t.TTFTp50), secs(t.TTFTp99),
		ms(t.TPOTp50), ms(t.TPOTp99),
		pct(t.Shed[0]), pct(t.Shed[1]), pct(t.Shed[2]),
		fmt.Sprint(t.Failed),
		pct(t.CrossRegion),
		fmt.Sprintf("%.2f", t.EgressUSD),
		fmt.Sprint(t.ResidencyViolations),
	}
}

func pct(f float64) string  { return fmt.Sprintf("%.1f%%", 100*f) }
func secs(f float64) string { return fmt.Sprintf("%.2fs", f) }
func ms(f float64) string   { return fmt.Sprintf("%.1fms", 1000*f) }

// WriteTable prints the comparison of results (one scenario) as aligned
// text, then ILB's ratios to each baseline.
func WriteTable(w io.Writer, results []*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(columns, "\t")+"\t")
	for _, r := range results {
		fmt.Fprintln(tw, strings.Join(row(r), "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, line := range ratios(results) {
		fmt.Fprintln(w, line)
	}
	for _, line := range tenantLines(results) {
		fmt.Fprintln(w, line)
	}
	return nil
}

// tenantLines says, per policy of a run with a flood, what each tenant
// kept of its goodput during the flood and what was shed of it.
func tenantLines(results []*Result) []string {
	var out []string
	for _, r := range results {
		if len(r.Tenants) == 0 {
			continue
		}
		var parts []string
		for _, t := range r.Tenants {
			parts = append(parts, fmt.Sprintf("%s %.1f→%.1f/s (%s kept, %s shed)", t.Tenant, t.GoodputBefore, t.GoodputDuring, pct(t.Kept), pct(t.ShedDuring)))
		}
		out = append(out, fmt.Sprintf("%s, goodput per tenant before → during the flood: %s", r.Policy, strings.Join(parts, "; ")))
	}
	return out
}

// WriteMarkdown prints the comparison as a Markdown table, then ILB's
// ratios and the per-source figures of ILB.
func WriteMarkdown(w io.Writer, results []*Result) error {
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(columns, " | "), strings.Repeat("---|", len(columns)))
	for _, r := range results {
		fmt.Fprintf(w, "| %s |\n", strings.Join(row(r), " | "))
	}
	fmt.Fprintln(w)
	for _, line := range ratios(results) {
		fmt.Fprintf(w, "- %s\n", line)
	}
	for _, line := range tenantLines(results) {
		fmt.Fprintf(w, "- %s\n", line)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Per source: TTFT p50 / p99 · time per output token (inter-token latency) p50 / p99 · goodput per second · share of sheddable requests shed:")
	fmt.Fprintln(w)
	if len(results) == 0 {
		return nil
	}
	head := []string{"policy"}
	for _, s := range results[0].Sources {
		head = append(head, s.Source)
	}
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
	for _, r := range results {
		cells := []string{r.Policy}
		for _, s := range r.Sources {
			cells = append(cells, fmt.Sprintf("%s / %s · %s / %s · %.1f/s · %s", secs(s.TTFTp50), secs(s.TTFTp99), ms(s.TPOTp50), ms(s.TPOTp99), s.Goodput, pct(s.Shed[2])))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	_, err := fmt.Fprintln(w)
	return err
}

// ratios compares ILB with each other policy of the run.
func ratios(results []*Result) []string {
	var ilb *Result
	for _, r := range results {
		if r.Policy == "ilb" {
			ilb = r
		}
	}
	if ilb == nil {
		return nil
	}
	var out []string
	for _, r := range results {
		if r == ilb {
			continue
		}
		g, t := "n/a", "n/a"
		if r.Totals.Goodput > 0 {
			g = ratio(ilb.Totals.Goodput / r.Totals.Goodput)
		}
		if r.Totals.TTFTp99 > 0 {
			t = ratio(ilb.Totals.TTFTp99 / r.Totals.TTFTp99)
		}
		out = append(out, fmt.Sprintf("ILB vs %s: goodput %s, TTFT p99 %s", r.Policy, g, t))
	}
	return out
}

// ratio prints x with two decimals, or two significant digits below 0.1.
func ratio(x float64) string {
	if x < 0.1 {
		return fmt.Sprintf("%.2g×", x)
	}
	return fmt.Sprintf("%.2f×", x)
}

// WriteSummary prints one Markdown row per scenario of all (the results of
// each scenario, ILB's among them): ILB's goodput and p99 TTFT against
// each baseline, what ILB shed by priority, and the residency violations
// of every policy together.
func WriteSummary(w io.Writer, all [][]*Result) error {
	var others []string
	for _, results := range all {
		for _, r := range results {
			if r.Policy != "ilb" && !slices.Contains(others, r.Policy) {
				others = append(others, r.Policy)
			}
		}
	}
	head := []string{"scenario"}
	for _, o := range others {
		head = append(head, "vs "+o+": goodput, p99 TTFT")
	}
	head = append(head, "ILB shed crit / std / sheddable", "residency violations (all)")
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
	for _, results := range all {
		var ilb *Result
		viol := 0
		for _, r := range results {
			viol += r.Totals.ResidencyViolations
			if r.Policy == "ilb" {
				ilb = r
			}
		}
		if ilb == nil || len(results) == 0 {
			continue
		}
		row := []string{results[0].Scenario}
		for _, o := range others {
			cell := "–"
			for _, r := range results {
				if r.Policy == o && r.Totals.Goodput > 0 && r.Totals.TTFTp99 > 0 {
					cell = ratio(ilb.Totals.Goodput/r.Totals.Goodput) + ", " + ratio(ilb.Totals.TTFTp99/r.Totals.TTFTp99)
				}
			}
			row = append(row, cell)
		}
		s := ilb.Totals.Shed
		row = append(row, pct(s[0])+" / "+pct(s[1])+" / "+pct(s[2]), fmt.Sprint(viol))
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	_, err := fmt.Fprintln(w)
	return err
}
