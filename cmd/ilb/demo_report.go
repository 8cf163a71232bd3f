package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ilbproject/ilb/sim/loadgen"
	"github.com/ilbproject/ilb/weights"
)

// report prints what the load saw beside the weights, and explains one
// request. It returns an error when requests failed, so `make demo` fails
// loudly on a broken stack.
func (d *demo) report(ctx context.Context, w io.Writer, results []loadgen.Result, elapsed time.Duration) error {
	ok, failed := 0, map[string]int{}
	type key struct{ source, model, cluster string }
	served := map[key]int{}
	perCell := map[[2]string]int{}
	sessions := map[string]map[string]bool{} // source/model/session -> clusters
	streamed := 0
	for _, r := range results {
		if r.Err != nil || r.Status != 200 {
			failed[fmt.Sprintf("status %d %v", r.Status, r.Err)]++
			continue
		}
		ok++
		model, _ := d.Config.ResolveModel(r.Model)
		if r.Session == "" { // random draws; a session's draw is its hash
			served[key{r.Source, model, r.Cluster}]++
			perCell[[2]string{r.Source, model}]++
		} else {
			k := r.Source + "/" + model + "/" + r.Session
			if sessions[k] == nil {
				sessions[k] = map[string]bool{}
			}
			sessions[k][r.Cluster] = true
		}
		if r.Stream && r.Events > 1 {
			streamed++
		}
	}
	rate := float64(len(results)) / elapsed.Seconds()
	fmt.Fprintf(w, "\n%d requests in %.1fs: %.0f requests/s, %d OK, %d streamed as SSE\n", len(results), elapsed.Seconds(), rate, ok, streamed)
	for reason, n := range failed {
		fmt.Fprintf(w, "  FAILED %d: %s\n", n, reason)
	}

	cur := d.App.Controller.Current()
	fmt.Fprintf(w, "\nTraffic split per source and model: the weights (version %s) beside what the random-draw requests observed\n", cur.Version())
	fmt.Fprintln(w, "(requests with a session key are left out: their draw is the hash of the key, not random; tolerance = 4 standard deviations)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "source\tmodel\tcluster\tweight\tobserved\ttolerance\trequests\t")
	for _, cell := range cur.Cells() {
		n := float64(max(perCell[[2]string{cell.Source, cell.Model}], 1))
		for _, t := range cell.Targets {
			got := served[key{cell.Source, cell.Model, t.Cluster}]
			p := float64(t.Weight) / weights.Total
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f%%\t%.1f%%\t±%.1f%%\t%d\t\n", cell.Source, cell.Model, t.Cluster,
				100*p, 100*float64(got)/n, 400*math.Sqrt(p*(1-p)/n), got)
		}
	}
	_ = tw.Flush()

	sticky := 0
	for _, cl := range sessions {
		if len(cl) == 1 {
			sticky++
		}
	}
	fmt.Fprintf(w, "\nSessions: %d of %d (source, model, session key) triples were served by exactly one cluster (sticky: the draw is a hash of the key)\n", sticky, len(sessions))
	p50, p99 := histogramQuantile(d.App.Registry, "ilb_extproc_decision_duration_seconds", 0.5), histogramQuantile(d.App.Registry, "ilb_extproc_decision_duration_seconds", 0.99)
	fmt.Fprintf(w, "ext_proc decision time (from its histogram): p50 %s, p99 %s\n", fmtSeconds(p50), fmtSeconds(p99))

	if sample := pickSample(results); sample != nil {
		fmt.Fprintf(w, "\n$ ilb explain --admin %s %s\n", d.App.AdminAddr(), sample.RequestID)
		rec, _, err := fetchRecord(ctx, d.App.AdminAddr(), sample.RequestID)
		if err != nil {
			return err
		}
		printRecord(w, rec)
	}
	if len(failed) > 0 {
		return errors.New("demo: some requests failed")
	}
	return nil
}

// pickSample prefers a successful request with a session key.
func pickSample(rs []loadgen.Result) *loadgen.Result {
	i := slices.IndexFunc(rs, func(r loadgen.Result) bool { return r.Status == 200 && r.Session != "" && r.RequestID != "" })
	if i < 0 {
		i = slices.IndexFunc(rs, func(r loadgen.Result) bool { return r.Status == 200 && r.RequestID != "" })
	}
	if i < 0 {
		return nil
	}
	return &rs[i]
}

// histogramQuantile estimates quantile q of a histogram on reg by linear
// interpolation within its buckets, as Prometheus' histogram_quantile does.
func histogramQuantile(reg *prometheus.Registry, name string, q float64) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return math.NaN()
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		total := float64(h.GetSampleCount())
		if total == 0 {
			return math.NaN()
		}
		buckets := slices.Clone(h.GetBucket())
		slices.SortFunc(buckets, func(a, b *dto.Bucket) int { return cmp.Compare(a.GetUpperBound(), b.GetUpperBound()) })
		rank := q * total
		prevBound, prevCount := 0.0, 0.0
		for _, b := range buckets {
			c := float64(b.GetCumulativeCount())
			if c >= rank {
				if c == prevCount {
					return b.GetUpperBound()
				}
				return prevBound + (b.GetUpperBound()-prevBound)*(rank-prevCount)/(c-prevCount)
			}
			prevBound, prevCount = b.GetUpperBound(), c
		}
		return prevBound // above the last bound
	}
	return math.NaN()
}

func fmtSeconds(s float64) string {
	if math.IsNaN(s) {
		return "n/a"
	}
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond).String()
}
