package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/ilbproject/ilb/weights"
)

// weightsView is the JSON /debug/weights serves.
type weightsView struct {
	Version  string         `json:"version"`
	Policy   string         `json:"policy"`
	Computed time.Time      `json:"computed"`
	Status   string         `json:"status"`
	Cells    []weights.Cell `json:"cells"`
}

// runWeights prints the weights in force, from the admin API.
func runWeights(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("weights", flag.ContinueOnError)
	af := addAdminFlags(fs)
	source := fs.String("source", "", "only this source")
	model := fs.String("model", "", "only this model")
	explain := fs.Bool("explain", false, "show every cluster's cost terms and binding constraint")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	client, err := af.client()
	if err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	*model = resolveAlias(ctx, client, *model, stdout)
	q := url.Values{}
	if *explain {
		q.Set("explain", "1")
	}
	if *source != "" {
		q.Set("source", *source)
	}
	if *model != "" {
		q.Set("model", *model)
	}
	var v weightsView
	if err := client.getJSON(ctx, "/debug/weights?"+q.Encode(), &v); err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	var cells []weights.Cell
	for _, c := range v.Cells {
		if (*source == "" || c.Source == *source) && (*model == "" || c.Model == *model) {
			cells = append(cells, c)
		}
	}
	if len(cells) == 0 && (*source != "" || *model != "") {
		// A filter no cell matches names an unknown value: say so, with
		// the known ones, rather than print an empty table.
		var all weightsView
		if err := client.getJSON(ctx, "/debug/weights", &all); err != nil {
			return fmt.Errorf("weights: %w", err)
		}
		return fmt.Errorf("weights: %w", unknownCell(all.Cells, *source, *model))
	}
	fmt.Fprintf(stdout, "weights %s (policy %s, computed %s)\n", v.Version, v.Policy, v.Computed.UTC().Format(time.RFC3339))
	if v.Status != "" {
		fmt.Fprintf(stdout, "STATUS: %s\n", v.Status)
	}
	printCells(stdout, cells, *explain)
	return nil
}
