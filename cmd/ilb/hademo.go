//go:build !serving

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/ha/etcdtest"
	"github.com/ilbproject/ilb/sim/loadgen"
	"github.com/ilbproject/ilb/sim/stack"
)

// runHADemo runs ILB as three replicas on a three-member etcd (Debian's
// etcd-server), with simulated engines and one envoysim per source listing
// every replica; under load it stops the leader as an orchestrator stops
// a pod (--crash: as a killed process dies, every connection reset), and
// reports what the clients saw and how leadership moved.
func runHADemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ha-demo", flag.ContinueOnError)
	cfgPath := fs.String("config", "examples/demo/ilb.yaml", "ILB configuration of the demo world (its ha: section is set by the demo)")
	replicas := fs.Int("replicas", 3, "ILB replicas")
	members := fs.Int("etcd-members", 3, "etcd members")
	lease := fs.Duration("lease-ttl", 2*time.Second, "ha.lease_ttl (whole seconds, 2s-60s)")
	before := fs.Duration("before", 4*time.Second, "load before the leader is stopped")
	after := fs.Duration("after", 6*time.Second, "load after the leader is stopped")
	concurrency := fs.Int("concurrency", 4, "concurrent clients per source")
	crash := fs.Bool("crash", false, "kill the leader instead of stopping it: every connection its Envoys have to it is reset at once, mid-exchange")
	logLevel := fs.String("log-level", "warn", "log level of the components")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *replicas < 2 || *members < 1 || *before <= 0 || *after <= 0 || *concurrency < 1 {
		return errors.New("ha-demo: want --replicas >= 2, --etcd-members >= 1, positive --before, --after and --concurrency")
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	c, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "ilb-ha-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(stdout, "Starting %d etcd members (Debian's etcd-server) on loopback...\n", *members)
	etcd, err := etcdtest.Launch(dir, *members)
	if err != nil {
		return fmt.Errorf("ha-demo: %w", err)
	}
	defer etcd.Close()
	h := config.DefaultHA()
	h.Endpoints = etcd.Endpoints()
	h.LeaseTTL = config.Duration(*lease)
	fmt.Fprintf(stdout, "Starting %d ILB replicas (lease %s), the engines and one envoysim per source listing every replica...\n", *replicas, *lease)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := stack.Start(ctx, c, stack.Options{Seed: 1, Logger: log, HA: &h, Replicas: *replicas})
	if err != nil {
		return err
	}
	defer func() { cancel(); _ = st.Wait() }()
	leader, err := pollFor(ctx, 30*time.Second, func() (int, bool) { l := st.Leader(); return l, l >= 0 })
	if err != nil {
		return fmt.Errorf("ha-demo: no leader: %w", err)
	}
	for i, r := range st.Replicas {
		role := "follower"
		if i == leader {
			role = "leader"
		}
		fmt.Fprintf(stdout, "  replica ilb-%d: xds %s, extproc %s, admin %s (%s)\n", i, r.App.XDSAddr(), r.App.ExtProcAddr(), r.App.AdminURL(), role)
	}

	var targets []loadgen.Target
	for _, e := range st.Envoys {
		targets = append(targets, loadgen.Target{Source: e.Source, URL: e.URL})
	}
	var results []loadgen.Result
	var lerr error
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		results, lerr = loadgen.Run(ctx, loadgen.Options{
			Targets: targets, Models: modelNames(st.Config), Duration: *before + *after, Concurrency: *concurrency, Seed: 1,
		})
	})
	fmt.Fprintf(stdout, "\nDriving chat requests from every source for %s; the leader is %s after %s...\n", *before+*after, map[bool]string{false: "stopped", true: "killed"}[*crash], *before)
	sleepCtx(ctx, *before)
	stopped := time.Now()
	stop, how := st.StopReplica, "stopped"
	if *crash {
		stop, how = st.CrashReplica, "killed"
	}
	if err := stop(leader); err != nil {
		return err
	}
	down := time.Since(stopped)
	next, err := pollFor(ctx, 30*time.Second, func() (int, bool) { l := st.Leader(); return l, l >= 0 && l != leader })
	if err != nil {
		return fmt.Errorf("ha-demo: no new leader: %w", err)
	}
	elected := time.Since(stopped)
	version, err := pollFor(ctx, 30*time.Second, func() (string, bool) { return converged(st, leader) })
	if err != nil {
		return fmt.Errorf("ha-demo: the replicas left do not serve one version: %w", err)
	}
	same := time.Since(stopped)
	wg.Wait()
	if lerr != nil {
		return lerr
	}
	fmt.Fprintf(stdout, "\nLeader ilb-%d %s at +%s (down in %s): ilb-%d led %s after; every replica left served version %s %s after.\n",
		leader, how, stopped.Sub(start).Round(time.Millisecond), down.Round(time.Millisecond), next, elected.Round(time.Millisecond), version, same.Round(time.Millisecond))
	if *crash {
		fmt.Fprintf(stdout, "(Its Envoys saw a crash; etcd saw it leave cleanly, so the next leader came at once. A replica that really dies keeps its lease until it expires: about one lease TTL, %s here, before another leads; the replicas serve the last version meanwhile.)\n", *lease)
	}
	return haReport(stdout, c, results, stopped)
}

// converged reports the version every replica but skip serves, once they
// all serve the version published in etcd.
func converged(st *stack.Stack, skip int) (string, bool) {
	want := ""
	for i, r := range st.Replicas {
		if i == skip {
			continue
		}
		s := r.App.HA.Status()
		if s.Installed == "" || s.Installed != s.Published || want != "" && s.Installed != want {
			return "", false
		}
		want = s.Installed
	}
	return want, want != ""
}

// haReport prints, per source and fail mode, the requests before and
// after the stop and every failure, and returns an error if any failed.
func haReport(w io.Writer, c *config.Config, results []loadgen.Result, stopped time.Time) error {
	type row struct{ before, after, failed int }
	rows := map[string]*row{}
	failures := map[string]int{}
	for _, r := range results {
		src, _ := c.Source(r.Source)
		k := r.Source + " (fail " + string(src.FailMode) + ")"
		if rows[k] == nil {
			rows[k] = &row{}
		}
		if r.Start.Before(stopped) {
			rows[k].before++
		} else {
			rows[k].after++
		}
		if r.Err != nil || r.Status != 200 {
			rows[k].failed++
			why := fmt.Sprintf("%s: status %d %s", r.Source, r.Status, r.Reason)
			if r.Err != nil {
				why = fmt.Sprintf("%s: %v", r.Source, r.Err)
			}
			failures[why]++
		}
	}
	fmt.Fprintln(w, "\n| source | requests before the stop | after | failed |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	keys := make([]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	total := 0
	for _, k := range keys {
		r := rows[k]
		total += r.failed
		fmt.Fprintf(w, "| %s | %d | %d | %d |\n", k, r.before, r.after, r.failed)
	}
	if total == 0 {
		fmt.Fprintln(w, "\nNo request failed: ext_proc streams the replica refused or reset before answering were opened again on another (the ext_proc filter's retry policy), and the Envoys' health checks took it out.")
		return nil
	}
	var lines []string
	for why, n := range failures {
		lines = append(lines, fmt.Sprintf("  %d × %s", n, why))
	}
	slices.Sort(lines)
	fmt.Fprintf(w, "\n%d requests failed:\n%s\n", total, strings.Join(lines, "\n"))
	return fmt.Errorf("ha-demo: %d requests failed", total)
}

// pollFor polls f every 20 ms until it reports done, ctx ends or within
// passes.
func pollFor[T any](ctx context.Context, within time.Duration, f func() (T, bool)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if v, ok := f(); ok {
			return v, nil
		}
		select {
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		case <-t.C:
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
