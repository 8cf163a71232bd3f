package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
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
	adminAddr := fs.String("admin", "127.0.0.1:18002", "ILB admin address")
	source := fs.String("source", "", "only this source")
	model := fs.String("model", "", "only this model")
	explain := fs.Bool("explain", false, "show every cluster's cost terms and binding constraint")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
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
	if err := getJSON(ctx, "http://"+*adminAddr+"/debug/weights?"+q.Encode(), &v); err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	fmt.Fprintf(stdout, "weights %s (policy %s, computed %s)\n", v.Version, v.Policy, v.Computed.UTC().Format(time.RFC3339))
	if v.Status != "" {
		fmt.Fprintf(stdout, "STATUS: %s\n", v.Status)
	}
	var cells []weights.Cell
	for _, c := range v.Cells {
		if (*source == "" || c.Source == *source) && (*model == "" || c.Model == *model) {
			cells = append(cells, c)
		}
	}
	printCells(stdout, cells, *explain)
	return nil
}

// getJSON GETs u and decodes its JSON body into v; an error answer's
// message is returned as the error.
func getJSON(ctx context.Context, u string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
			return fmt.Errorf("%s", e.Error.Message)
		}
		return fmt.Errorf("%s answered %s", u, resp.Status)
	}
	return json.Unmarshal(body, v)
}
