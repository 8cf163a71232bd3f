package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/weights"
)

// historyEntry is one version of /debug/weights/history.
type historyEntry struct {
	Version   string                 `json:"version"`
	Published time.Time              `json:"published"`
	Policy    string                 `json:"policy"`
	Status    string                 `json:"status"`
	Previous  string                 `json:"previous"`
	Changes   []controller.CellDiff  `json:"changes"`
	Cells     []controller.CellRoute `json:"cells"`
}

// runWhy prints why one cell's weights are what they are: the current
// weights with the controller's explanation, then what changed in the
// last versions.
func runWhy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("why", flag.ContinueOnError)
	af := addAdminFlags(fs)
	source := fs.String("source", "", "the source (required)")
	model := fs.String("model", "", "the model, by its canonical name or an alias (required)")
	versions := fs.Int("versions", 5, "how many recent versions to show (1..1000)")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *source == "" || *model == "" || fs.NArg() > 0 {
		return errors.New("why: want --source S --model M and no arguments")
	}
	if *versions < 1 || *versions > 1000 {
		return fmt.Errorf("why: --versions %d is not in 1..1000", *versions)
	}
	client, err := af.client()
	if err != nil {
		return fmt.Errorf("why: %w", err)
	}
	get := func(path string, q url.Values, v any) error {
		return client.getJSON(ctx, path+"?"+q.Encode(), v)
	}
	*model = resolveAlias(ctx, client, *model, stdout)
	var v weightsView
	if err := get("/debug/weights", url.Values{"explain": {"1"}, "source": {*source}, "model": {*model}}, &v); err != nil {
		return fmt.Errorf("why: %w", err)
	}
	i := slices.IndexFunc(v.Cells, func(c weights.Cell) bool { return c.Source == *source && c.Model == *model })
	if i < 0 {
		var all weightsView
		if err := get("/debug/weights", nil, &all); err != nil {
			return fmt.Errorf("why: %w", err)
		}
		return fmt.Errorf("why: %w", unknownCell(all.Cells, *source, *model))
	}
	fmt.Fprintf(stdout, "weights %s (policy %s, computed %s)\n", v.Version, v.Policy, v.Computed.UTC().Format(time.RFC3339))
	if v.Status != "" {
		fmt.Fprintf(stdout, "STATUS: %s\n", v.Status)
	}
	printCells(stdout, v.Cells[i:i+1], true)
	// The capacity each cluster is planned with: learned from its engines,
	// with the evidence (an ILB without signals has none to show).
	var sv signalsView
	if err := get("/debug/signals", nil, &sv); err == nil && len(sv.Capacity) > 0 {
		in := cellClusters(v.Cells[i])
		fmt.Fprintln(stdout, "\ncapacity per replica of these clusters, learned from their engines (token-cost/s at full utilization; the profile is the prior)")
		printCapacity(stdout, sv.Capacity, func(c string) bool { return slices.Contains(in, c) })
	}

	var hist []historyEntry
	q := url.Values{"limit": {fmt.Sprint(*versions)}, "source": {*source}, "model": {*model}}
	if err := get("/debug/weights/history", q, &hist); err != nil {
		return fmt.Errorf("why: weights history: %w", err)
	}
	printHistory(stdout, *source, *model, hist)
	return nil
}

// cellClusters lists the clusters a cell's explanation covers (every
// cluster serving its model), or its targets without one.
func cellClusters(c weights.Cell) []string {
	var out []string
	if c.Explanation != nil {
		for _, t := range c.Explanation.Terms {
			out = append(out, t.Cluster)
		}
		return out
	}
	for _, t := range c.Targets {
		out = append(out, t.Cluster)
	}
	return out
}

// resolveAlias is the canonical name of model when it is an alias (as
// clients name models; the weights know canonical names only), saying so
// on w; else model. An admin API without /debug/config leaves it as is.
func resolveAlias(ctx context.Context, client *adminClient, model string, w io.Writer) string {
	var cfg struct {
		Models []struct {
			Name    string   `json:"name"`
			Aliases []string `json:"aliases"`
		} `json:"models"`
	}
	if model == "" || client.getJSON(ctx, "/debug/config", &cfg) != nil {
		return model
	}
	for _, m := range cfg.Models {
		if m.Name != model && slices.Contains(m.Aliases, model) {
			fmt.Fprintf(w, "model %q is an alias of %s\n", model, m.Name)
			return m.Name
		}
	}
	return model
}

// unknownCell says which of source and model the weights do not know,
// and lists the known ones.
func unknownCell(cells []weights.Cell, source, model string) error {
	var sources, models []string
	for _, c := range cells {
		sources = append(sources, c.Source)
		if c.Source == source {
			models = append(models, c.Model)
		}
	}
	sources = slices.Compact(sources) // cells are sorted by source
	if source != "" && !slices.Contains(sources, source) {
		return fmt.Errorf("unknown source %q; known sources: %s", source, listOrNone(sources))
	}
	if source == "" {
		for _, c := range cells {
			if !slices.Contains(models, c.Model) {
				models = append(models, c.Model)
			}
		}
		return fmt.Errorf("unknown model %q; known models: %s", model, listOrNone(models))
	}
	return fmt.Errorf("source %q has no model %q; its models: %s", source, model, listOrNone(models))
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, ", ")
}

// printHistory writes what changed in the cell in each version, newest
// first.
func printHistory(w io.Writer, source, model string, hist []historyEntry) {
	fmt.Fprintf(w, "\nhistory of %s / %s, newest first (%d versions):\n", source, model, len(hist))
	if len(hist) == 0 {
		fmt.Fprintln(w, "  no version published yet")
	}
	for _, e := range hist {
		fmt.Fprintf(w, "%s  version %s (policy %s)", e.Published.UTC().Format(time.RFC3339), e.Version, e.Policy)
		if e.Previous != "" {
			fmt.Fprintf(w, ", after %s", e.Previous)
		}
		fmt.Fprintln(w)
		if e.Status != "" {
			fmt.Fprintf(w, "    status: %s\n", e.Status)
		}
		i := slices.IndexFunc(e.Changes, func(d controller.CellDiff) bool { return d.Source == source && d.Model == model })
		switch {
		case e.Previous == "":
			fmt.Fprintf(w, "    the oldest version kept: %s\n", targetsText(e.Cells, source, model))
		case i < 0:
			fmt.Fprintln(w, "    this cell did not change (another cell did)")
		default:
			printDiff(w, e.Changes[i])
		}
	}
}

// printDiff writes one cell's changes, one line each.
func printDiff(w io.Writer, d controller.CellDiff) {
	switch {
	case d.Added:
		fmt.Fprintln(w, "    the cell is new in this version")
	case d.Removed:
		fmt.Fprintln(w, "    the cell is gone in this version")
	}
	for _, c := range d.Clusters {
		fmt.Fprintf(w, "    %-24s %6.2f%% -> %6.2f%%\n", c.Cluster, 100*float64(c.Before)/weights.Total, 100*float64(c.After)/weights.Total)
	}
	for _, s := range d.Shed {
		fmt.Fprintf(w, "    shed %-19s %6.1f%% -> %6.1f%%\n", s.Priority, 100*s.Before, 100*s.After)
	}
}

// targetsText is a cell's routing on one line.
func targetsText(cells []controller.CellRoute, source, model string) string {
	i := slices.IndexFunc(cells, func(c controller.CellRoute) bool { return c.Source == source && c.Model == model })
	if i < 0 {
		return "the cell does not exist"
	}
	if len(cells[i].Targets) == 0 {
		return "no cluster (requests get 503)"
	}
	var parts []string
	for _, t := range cells[i].Targets {
		parts = append(parts, fmt.Sprintf("%s %.2f%%", t.Cluster, 100*float64(t.Weight)/weights.Total))
	}
	return strings.Join(parts, ", ")
}
