package test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/sim/engine"
	"github.com/ilbproject/ilb/sim/loadgen"
)

// The tenant flood end to end (make bench-tenants-e2e): the benchmark's
// tenant-flood scenario (sim/experiment, make bench-tenants) through the
// whole stack — envoysim, ILB's ext_proc over gRPC, its controller and
// signals, simulated engines on loopback — in wall-clock time, with open
// loop clients.
//
// edge-eu may use eu-west only, whose one llama cluster (eu-west-vllm)
// has 2 replicas of floodSlots slots each; a request of floodTokens
// output tokens holds a slot for floodService, so the cluster serves
// floodCapacity requests per second. Four tenants of one priority
// (standard) share edge-eu equally; the tenant "flood" asks for three
// times its share from the end of floodBefore for floodDuring. Load L is
// the mean demand over the measured part of the run (before and during
// the flood, as in the simulator's 40–70% flood window of a run at L):
// base × (0.7 + 0.3 × 1.5) = L, so the flood takes the cluster from
// ~0.8 L/0.92 to 1.5 times that.
const (
	floodSlots     = 4
	floodITL       = 10 * time.Millisecond
	floodTokens    = 16
	floodPrefill   = 5 * time.Millisecond
	floodService   = floodPrefill + (floodTokens-1)*floodITL // per request per slot
	floodReplicas  = 2
	floodSLO       = 2 * time.Second
	floodWarmup    = 40 * time.Second // the capacity estimator and the demand settle
	floodBefore    = 40 * time.Second
	floodDuring    = 40 * time.Second
	floodTail      = 10 * time.Second // requests of the flood window finish
	floodCostGuess = 80               // token-cost of a request: ~10 prompt tokens + 4 × 16 output
)

var floodCapacity = float64(floodReplicas*floodSlots) / floodService.Seconds() // requests/s

var floodTenants = []string{"team-a", "team-b", "team-c", "flood"}

// BenchmarkTenantFloodEndToEnd runs the flood at loads 0.92 and 1.0 (the
// flood takes the cluster to ~1.2 and ~1.3 of its capacity) and reports,
// per load, the smallest share the other tenants kept of their goodput
// within the SLO (their share of requests answered with a first token
// within floodSLO during the flood ÷ before it: open-loop arrivals at an
// unchanged rate make that the goodput's ratio without its Poisson
// noise), and the shares of each tenant's requests ILB refused. Run it
// with -benchtime 1x: one run is a few minutes of wall-clock time, and
// its figures depend on the machine's load (it reports, it does not
// assert).
func BenchmarkTenantFloodEndToEnd(b *testing.B) {
	for _, load := range []float64{0.92, 1.0} {
		b.Run(fmt.Sprintf("load=%.2f", load), func(b *testing.B) { floodRun(b, load) })
	}
}

// floodOutcome counts one tenant's requests of one window.
type floodOutcome struct {
	arrived, good, refused, late, failed int
}

func (o floodOutcome) goodShare() float64 { return float64(o.good) / float64(max(o.arrived, 1)) }

func floodRun(b *testing.B, load float64) {
	timing := engine.DefaultFixedTiming()
	timing.MaxRunning, timing.InterTokenLatency, timing.PrefillBase, timing.PrefillPerToken = floodSlots, floodITL, floodPrefill, 0
	s := startWorld(b, &timing, func(c *config.Config) {
		eu := &c.Sources[1]
		eu.TrustPriorityHeader, eu.TrustTenantHeader = true, true
		for _, tn := range floodTenants {
			c.Tenants.Weights = append(c.Tenants.Weights, config.TenantWeight{Name: tn, Weight: 1})
		}
		// The operator's profile: what the engines serve, roughly.
		for i := range c.Profiles {
			if c.Profiles[i].Name == "h100-8b" {
				c.Profiles[i].CapacityPerReplica = floodCapacity / floodReplicas * floodCostGuess
			}
		}
	})
	eu, _ := s.Envoy("edge-eu")
	waitUntil(b, "eu-west-vllm's replicas ready", time.Minute, func() bool {
		return s.App.Signals.Snapshot().Clusters["eu-west-vllm"].Ready == floodReplicas
	})
	base := load / (0.7 + 0.3*1.5) * floodCapacity / float64(len(floodTenants)) // requests/s per tenant
	total := floodWarmup + floodBefore + floodDuring + floodTail
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	var (
		mu      sync.Mutex
		results = map[string][]loadgen.Result{}
		wg      sync.WaitGroup
	)
	send := func(tenant string, rate float64, after, d time.Duration, seed uint64) {
		wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(after):
			}
			rs, _ := loadgen.Run(ctx, loadgen.Options{
				Targets: []loadgen.Target{{Source: "edge-eu", URL: eu.URL}}, Models: []string{"llama-3.1-8b-instruct"},
				Rate: rate, Duration: d, MaxTokens: floodTokens, StreamShare: 1, Priority: "standard", Tenant: tenant, Seed: seed,
				Client: &http.Client{Timeout: 2 * time.Minute},
			})
			mu.Lock()
			results[tenant] = append(results[tenant], rs...)
			mu.Unlock()
		})
	}
	for i, tn := range floodTenants {
		send(tn, base, 0, total, uint64(i+1))
	}
	// The plan, every 5 s: what ILB planned for edge-eu's llama cell.
	var plan []string
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var line string
			if w := s.App.Controller.Current(); w != nil {
				if cell, ok := w.Cell("edge-eu", "llama-3.1-8b-instruct"); ok {
					line = fmt.Sprintf("demand %.0f, served %.0f, shed %.3f", cell.Demand, cell.Served, cell.Shed)
				}
			}
			for _, e := range s.App.Capacity.Estimates() {
				if e.Cluster == "eu-west-vllm" {
					line += fmt.Sprintf("; capacity %.0f/replica (%s), measured %.0f, saturation %.0f, backlog %.0f, slow first tokens %.1f%%", e.PerReplica, e.From, e.Measured, e.Saturation, e.Backlog, 100*e.SlowShare)
				}
			}
			plan = append(plan, fmt.Sprintf("%3.0fs %s", time.Since(start).Seconds(), line))
			if time.Since(start) > total {
				return
			}
		}
	})
	// The flood: twice its share more, for floodDuring.
	send("flood", 2*base, floodWarmup+floodBefore, floodDuring, 99)
	wg.Wait()

	before, during := map[string]*floodOutcome{}, map[string]*floodOutcome{}
	for _, tn := range floodTenants {
		before[tn], during[tn] = &floodOutcome{}, &floodOutcome{}
		for _, r := range results[tn] {
			at := r.Start.Sub(start)
			var o *floodOutcome
			switch {
			case at >= floodWarmup && at < floodWarmup+floodBefore:
				o = before[tn]
			case at >= floodWarmup+floodBefore && at < floodWarmup+floodBefore+floodDuring:
				o = during[tn]
			default:
				continue
			}
			o.arrived++
			switch {
			case r.Status == http.StatusTooManyRequests || r.Status == http.StatusServiceUnavailable:
				o.refused++
			case r.Status == http.StatusOK && r.TTFT > 0 && r.TTFT <= floodSLO:
				o.good++
			case r.Status == http.StatusOK || r.TTFT > 0:
				o.late++
			default:
				o.failed++
			}
		}
	}
	reasons := map[string]int{}
	for _, tn := range floodTenants {
		for _, r := range results[tn] {
			if r.Status != http.StatusOK {
				why := r.Reason
				if r.Err != nil {
					why = r.Err.Error()
				}
				reasons[fmt.Sprintf("%s %d %s", tn, r.Status, why)]++
			}
		}
	}
	fmt.Printf("load %.2f: answers other than 200: %v\nthe plan for edge-eu, every 5 s:\n%s\n", load, reasons, strings.Join(plan, "\n"))
	var lines []string
	minKept := math.Inf(1)
	for _, tn := range floodTenants {
		bo, do := before[tn], during[tn]
		kept := do.goodShare() / bo.goodShare() // +Inf or NaN when none was within the SLO before
		if tn != "flood" {
			minKept = min(minKept, kept)
		}
		lines = append(lines, fmt.Sprintf("%-7s before: %4d arrived, %5.1f%% within %v, %4.1f%% refused | during: %4d arrived, %5.1f%% within, %4.1f%% refused, %4.1f%% late, %d failed | kept %5.1f%%",
			tn, bo.arrived, 100*bo.goodShare(), floodSLO, 100*float64(bo.refused)/float64(max(bo.arrived, 1)),
			do.arrived, 100*do.goodShare(), 100*float64(do.refused)/float64(max(do.arrived, 1)), 100*float64(do.late)/float64(max(do.arrived, 1)), do.failed, 100*kept))
	}
	slices.Sort(lines)
	// The report goes to stdout whole: a benchmark's log is cut at ten
	// lines.
	fmt.Printf("load %.2f: cluster capacity %.1f requests/s; %.1f per tenant, the flood %.1f during the flood\n%s\n", load, floodCapacity, base, 3*base, strings.Join(lines, "\n"))
	b.ReportMetric(100*minKept, "others_kept_%")
	fl := during["flood"]
	b.ReportMetric(100*float64(fl.refused)/float64(max(fl.arrived, 1)), "flood_refused_%")
}
