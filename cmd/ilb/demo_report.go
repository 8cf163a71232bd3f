//go:build !serving

package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/signals"
	"github.com/ilbproject/ilb/sim/loadgen"
	"github.com/ilbproject/ilb/weights"
)

// report prints what the load saw beside the weights, and explains one
// request. It returns an error when requests failed, so `make demo` fails
// loudly on a broken stack.
func (d *demo) report(ctx context.Context, w io.Writer, results []loadgen.Result, elapsed time.Duration) error {
	ok, shed, failed := 0, 0, map[failure]int{}
	example := map[failure]string{} // a request id of each failure
	mismatched := 0
	type key struct{ source, model, cluster string }
	served := map[key]int{}
	expected := map[key]float64{} // Σ over requests of the cluster's weight share when decided
	variance := map[key]float64{} // Σ p(1-p)
	perCell := map[[2]string]int{}
	sessions := map[string]map[string]bool{} // source/model/session -> clusters
	streamed := 0
	cur := d.App.Controller.Current()
	versions := map[string]bool{}
	var picks replicaTally
	for _, r := range results {
		if r.Err == nil && r.Status == 429 {
			shed++ // ILB shed it: the fleet was over capacity
			continue
		}
		if r.Err != nil || r.Status != 200 {
			f := failure{status: r.Status, reason: r.Reason, body: r.Body}
			if r.Err != nil {
				f.err = r.Err.Error()
			}
			failed[f]++
			example[f] = r.RequestID
			continue
		}
		ok++
		model, _ := d.Config.ResolveModel(r.Model)
		rec, found := d.App.ExtProc.Decisions().Get(r.RequestID)
		if found && rec.Chosen != "" && rec.Chosen != r.Cluster {
			mismatched++
		}
		if found && rec.Replica != nil {
			picks.add(rec.Replica)
		}
		if r.Session == "" && found && rec.Reason == "weighted" { // random draws; a session's draw is its hash
			versions[rec.WeightsVersion] = true
			served[key{r.Source, model, r.Cluster}]++
			perCell[[2]string{r.Source, model}]++
			for _, c := range rec.Candidates {
				p := float64(c.Weight) / float64(max(rec.TotalWeight, 1))
				expected[key{r.Source, model, c.Cluster}] += p
				variance[key{r.Source, model, c.Cluster}] += p * (1 - p)
			}
		} else if r.Session != "" {
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
	fmt.Fprintf(w, "\n%d requests in %.1fs: %.0f requests/s, %d OK, %d streamed as SSE, %d shed (429)\n", len(results), elapsed.Seconds(), rate, ok, streamed, shed)
	for _, f := range slices.SortedFunc(maps.Keys(failed), func(a, b failure) int { return cmp.Compare(failed[b], failed[a]) }) {
		fmt.Fprintf(w, "  FAILED %d × %s (e.g. request %s)\n", failed[f], f, cmp.Or(example[f], "without an x-request-id"))
	}
	fmt.Fprintf(w, "Served by the cluster ILB chose: %d of %d answered requests (%d elsewhere)\n", ok-mismatched, ok, mismatched)
	picks.report(w)

	fmt.Fprintf(w, "\nTraffic split per source and model (policy %s; requests were decided under %d weights versions as the controller followed the load; in force now: %s):\n",
		cur.Policy(), len(versions), cur.Version())
	fmt.Fprintln(w, "expected = the share each random-draw request's weights gave the cluster when it was decided, averaged; observed = where those requests were served;")
	fmt.Fprintln(w, "tolerance = 4 standard deviations; now = the weight in force at the end; planned = the demand (token-cost/s) the controller measured. Session requests are left out: their draw is their key's hash.")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "source\tmodel\tplanned\tcluster\tnow\texpected\tobserved\ttolerance\trequests\t")
	for _, cell := range cur.Cells() {
		n := float64(max(perCell[[2]string{cell.Source, cell.Model}], 1))
		now := map[string]uint32{}
		for _, t := range cell.Targets {
			now[t.Cluster] = t.Weight
		}
		for _, e := range d.Config.Clusters {
			k := key{cell.Source, cell.Model, e.Name}
			if now[e.Name] == 0 && expected[k] == 0 && served[k] == 0 {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%.0f/s\t%s\t%.1f%%\t%.1f%%\t%.1f%%\t±%.1f%%\t%d\t\n", cell.Source, cell.Model, cell.Demand, e.Name,
				100*float64(now[e.Name])/weights.Total, 100*expected[k]/n, 100*float64(served[k])/n, 400*math.Sqrt(variance[k])/n, served[k])
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
	stale := d.staleSignals(w)
	if len(failed) > 0 {
		return errors.New("demo: some requests failed")
	}
	if stale > 0 {
		return fmt.Errorf("demo: %d engine replicas without usable metrics: ILBStaleSignals would fire on this demo", stale)
	}
	return nil
}

// staleSignals prints what the ILBStaleSignals alert looks at (stale
// replicas, the oldest scrape) and returns the stale replicas.
func (d *demo) staleSignals(w io.Writer) int {
	if d.App.Signals == nil {
		return 0
	}
	snap := d.App.Signals.Snapshot()
	stale := 0
	var oldest time.Duration
	for _, c := range snap.Clusters {
		stale += c.Stale
		if !c.OldestScrape.IsZero() {
			oldest = max(oldest, snap.At.Sub(c.OldestScrape))
		}
	}
	fmt.Fprintf(w, "\nEngine signals: %d replicas, %d stale, oldest scrape %s ago (ILBStaleSignals fires on a stale replica or a scrape over 30s old)\n",
		len(snap.Replicas), stale, oldest.Round(time.Millisecond))
	for _, r := range snap.Replicas {
		if r.State == signals.StateStale {
			fmt.Fprintf(w, "  STALE %s %s: %s\n", r.Cluster, r.Address, r.Reason)
		}
	}
	return stale
}

// failure is one kind of failed request as the client saw it.
type failure struct {
	status            int
	reason, body, err string
}

func (f failure) String() string {
	if f.err != "" {
		return fmt.Sprintf("no response: %s", f.err)
	}
	s := fmt.Sprintf("status %d", f.status)
	if f.reason != "" {
		s += ", x-ilb-reason " + f.reason
	}
	return s + fmt.Sprintf(", body %q", f.body)
}

// pickSample is the latest successful request with a session key (else
// the latest successful one): the most recent, so the decision log still
// holds its record however long the load ran. Results are in completion
// order.
func pickSample(rs []loadgen.Result) *loadgen.Result {
	last := func(ok func(r loadgen.Result) bool) int {
		for i := len(rs) - 1; i >= 0; i-- {
			if ok(rs[i]) {
				return i
			}
		}
		return -1
	}
	i := last(func(r loadgen.Result) bool { return r.Status == 200 && r.Session != "" && r.RequestID != "" })
	if i < 0 {
		i = last(func(r loadgen.Result) bool { return r.Status == 200 && r.RequestID != "" })
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

// replicaTally counts the replica decisions of the answered requests.
type replicaTally struct {
	chosen, skipped, servedChosen, servedOther int
	reasons                                    map[string]int
}

func (t *replicaTally) add(rd *decision.ReplicaDecision) {
	if rd.Chosen == "" {
		t.skipped++
		return
	}
	t.chosen++
	if t.reasons == nil {
		t.reasons = map[string]int{}
	}
	t.reasons[rd.Reason]++
	switch rd.Served {
	case "chosen":
		t.servedChosen++
	case "other":
		t.servedOther++
	}
}

// report writes one line on replica picking (nothing when no request
// went to a cluster that picks replicas).
func (t *replicaTally) report(w io.Writer) {
	if t.chosen+t.skipped == 0 {
		return
	}
	var rs []string
	for _, r := range slices.Sorted(maps.Keys(t.reasons)) {
		rs = append(rs, fmt.Sprintf("%s %d", r, t.reasons[r]))
	}
	fmt.Fprintf(w, "Replica picking (clusters with replica_picking): ILB chose the replica of %d requests (%s), left %d to Envoy's least request (no live replica state yet); Envoy served the chosen replica for %d, another for %d\n",
		t.chosen, strings.Join(rs, ", "), t.skipped, t.servedChosen, t.servedOther)
}
