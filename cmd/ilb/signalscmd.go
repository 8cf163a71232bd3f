package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/ilbproject/ilb/capacity"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/signals"
)

// signalsView is the JSON /debug/signals serves.
type signalsView struct {
	Signals  *signals.Snapshot   `json:"signals"`
	Demand   *demand.Status      `json:"demand"`
	Capacity []capacity.Estimate `json:"capacity"`
}

// runSignals prints the engines' state and the measured demand from the
// admin API.
func runSignals(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("signals", flag.ContinueOnError)
	af := addAdminFlags(fs)
	cluster := fs.String("cluster", "", "only this engine cluster")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	var v signalsView
	client, err := af.client()
	if err != nil {
		return fmt.Errorf("signals: %w", err)
	}
	if err := client.getJSON(ctx, "/debug/signals", &v); err != nil {
		return fmt.Errorf("signals: %w", err)
	}
	if *cluster != "" && v.Signals != nil && !knownCluster(v.Signals, *cluster) {
		known := slices.Sorted(maps.Keys(v.Signals.Clusters))
		return fmt.Errorf("signals: unknown engine cluster %q; known clusters: %s", *cluster, listOrNone(known))
	}
	printSignals(stdout, v, *cluster, time.Now())
	return nil
}

// knownCluster reports whether the snapshot has cluster.
func knownCluster(s *signals.Snapshot, cluster string) bool {
	_, ok := s.Clusters[cluster]
	return ok
}

func printSignals(w io.Writer, v signalsView, only string, now time.Time) {
	if v.Signals == nil {
		fmt.Fprintln(w, "engine signals are off (signals.disabled): every configured endpoint counts as ready")
	} else {
		s := v.Signals
		fmt.Fprintf(w, "engine signals at %s (%s ago)\n", s.At.UTC().Format(time.RFC3339), age(now, s.At))
		if b := s.Blind; b != nil {
			fmt.Fprintf(w, "BLIND since %s (%s): %s\n", b.Since.UTC().Format(time.RFC3339), age(now, b.Since), b.Reason)
			fmt.Fprintln(w, "  replicas failing silently keep their last known state; the controller keeps its last weights")
		}
		fmt.Fprintln(w)
		names := make([]string, 0, len(s.Clusters))
		for n := range s.Clusters {
			if only == "" || n == only {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "CLUSTER\tREADY\tWARMING\tSTARTING\tDRAINING\tUNHEALTHY\tSTALE\tQUEUE\tRUNNING\tKV\tTOKENS/S\tSATURATED\tOLDEST SCRAPE\tNOTE")
		for _, n := range names {
			c := s.Clusters[n]
			kv := "unknown"
			if c.KVKnown {
				kv = fmt.Sprintf("%.0f%%", 100*c.KVUsage)
			}
			queue, running, tokens := "unknown", "unknown", "unknown"
			if c.LoadKnown > 0 {
				queue, running = fmt.Sprintf("%.0f", c.Waiting), fmt.Sprintf("%.0f", c.Running)
			}
			if c.RatesKnown > 0 {
				tokens = fmt.Sprintf("%.0f", c.TokensPerSecond)
			}
			note := ""
			if c.DiscoveryError != "" { // the replicas are the last known ones
				note = fmt.Sprintf("DISCOVERY STALE for %s, replicas held: %s", age(now, c.DiscoveryErrorSince), c.DiscoveryError)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%v (%d)\t%s\t%s\n", n, c.Ready, c.Warming, c.Starting, c.Draining, c.Unhealthy, c.Stale,
				queue, running, kv, tokens, c.Saturated, c.SaturatedReplicas, age(now, c.OldestScrape), note)
		}
		_ = tw.Flush()
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "CLUSTER\tREPLICA\tSTATE\tFOR\tRAMP\tQUEUE\tRUNNING\tKV\tLAST SCRAPE\tREASON")
		for _, r := range s.Replicas {
			if only != "" && r.Cluster != only {
				continue
			}
			kv := "unknown"
			if r.Metrics.KVKnown {
				kv = fmt.Sprintf("%.0f%%", 100*r.Metrics.KVUsage)
			}
			reason := r.Reason
			if r.LastError != "" && r.LastError != reason {
				reason += "; last error: " + r.LastError
			}
			if r.Zone != "" {
				reason += "; zone " + r.Zone
			}
			queue, running := "unknown", "unknown"
			if !r.LastScrape.IsZero() { // the latest good values, however old (LAST SCRAPE says)
				queue, running = fmt.Sprintf("%.0f", r.Metrics.Waiting), fmt.Sprintf("%.0f", r.Metrics.Running)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t%s ago\t%s\n", r.Cluster, r.Address, r.State, age(now, r.Since), r.Ramp,
				queue, running, kv, age(now, r.LastScrape), reason)
		}
		_ = tw.Flush()
	}
	if len(v.Capacity) > 0 {
		fmt.Fprintln(w, "\ncapacity per replica, learned from the engines (token-cost/s at full utilization; the profile is the prior)")
		printCapacity(w, v.Capacity, func(c string) bool { return only == "" || c == only })
	}
	if v.Demand != nil {
		fmt.Fprintf(w, "\nmeasured demand (%d reports): requests, token cost and shed since start\n", v.Demand.Reports)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SOURCE\tMODEL\tPRIORITY\tREQUESTS\tTOKEN COST\tSHED")
		for _, t := range v.Demand.Totals {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.0f\t%d\n", t.Source, t.Model, t.Priority, t.Requests, t.TokenCost, t.Shed)
		}
		_ = tw.Flush()
	}
}

// printCapacity writes the capacity estimates of the clusters keep
// accepts.
func printCapacity(w io.Writer, ests []capacity.Estimate, keep func(cluster string) bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tPLANNED\tPRIOR\tSATURATION\tBACKLOG\tCONFIDENCE\tFROM\tMEASURED\tSLOW TTFT\tEVIDENCE")
	for _, e := range ests {
		if !keep(e.Cluster) {
			continue
		}
		slow := "unknown"
		if e.SlowShare >= 0 {
			slow = fmt.Sprintf("%.1f%%", 100*e.SlowShare)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f%%\t%s\t%.0f\t%s\t%s\n", e.Cluster, e.PerReplica, e.Prior, e.Saturation, e.Backlog,
			100*e.Confidence, e.From, e.Measured, slow, e.Evidence)
	}
	_ = tw.Flush()
}

// age is how long ago t was, "-" for the zero time.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(10 * time.Millisecond).String()
}
