package experiment

import (
	"slices"
	"strings"
	"time"

	"github.com/ilbproject/ilb/capacity"
	"github.com/ilbproject/ilb/sim/workload"
	"github.com/ilbproject/ilb/weights"
)

// Result is what one policy did on one scenario.
type Result struct {
	Scenario string  `json:"scenario"`
	Policy   string  `json:"policy"`
	Seed     uint64  `json:"seed"`
	Seconds  float64 `json:"seconds"` // simulated
	SLO      float64 `json:"slo_seconds"`
	// Load is the workload's mean demand as a fraction of the fleet's
	// measured saturation throughput, when the run was set to one (0: the
	// scenario's own rates).
	Load   float64 `json:"load,omitempty"`
	Totals Figures `json:"totals"`
	// Sources holds the figures of each source, in fleet order.
	Sources []Figures `json:"sources"`
	// Records are the requests one by one, with Options.Records.
	Records []Record `json:"-"`
	// Versions is how many weights versions the controller published.
	Versions int    `json:"weights_versions"`
	Series   Series `json:"series"`
	// Capacity is what the policy learned of each cluster's capacity by
	// the end of the run (policies that learn it), by cluster name.
	Capacity []capacity.Estimate `json:"capacity,omitempty"`
	// Replicas are the replica-level figures: prefix cache hits and load
	// balance.
	Replicas ReplicaFigures `json:"replicas"`
	// Tenants are each tenant's figures before and during the scenario's
	// flood (Scenario.Flood), by tenant name; nil without a flood.
	Tenants []TenantFigures `json:"tenants,omitempty"`
}

// TenantFigures are one tenant's requests in the half of the run before
// a flood (from Flood.From/2 to Flood.From) and during it.
type TenantFigures struct {
	Tenant         string       `json:"tenant"`
	Before, During PeriodCounts `json:"-"`
	// GoodputBefore and GoodputDuring are requests within the SLO per
	// second in each period; Kept is During ÷ Before (1: the flood cost
	// the tenant nothing); ShedDuring the share of its requests refused
	// during the flood.
	GoodputBefore float64 `json:"goodput_before"`
	GoodputDuring float64 `json:"goodput_during"`
	Kept          float64 `json:"kept"`
	ShedDuring    float64 `json:"shed_during"`
}

// PeriodCounts count one tenant's requests in a period.
type PeriodCounts struct {
	Requests, Good, Shed int
}

// Figures are the outcome of a set of requests.
type Figures struct {
	Source   string `json:"source,omitempty"`
	Requests int    `json:"requests"`
	// Good requests were served with a time to first token within the
	// SLO; Goodput is their rate (per simulated second) and GoodShare
	// their share of all requests.
	Good      int     `json:"good"`
	Goodput   float64 `json:"goodput"`
	GoodShare float64 `json:"good_share"`
	// StrictGood and StrictShare are the same under the scenario's
	// strict SLO class (0 without one).
	StrictGood  int     `json:"strict_good,omitempty"`
	StrictShare float64 `json:"strict_share,omitempty"`
	// TTFT and TPOT (time per output token after the first) percentiles
	// of served requests, in seconds.
	TTFTp50 float64 `json:"ttft_p50"`
	TTFTp99 float64 `json:"ttft_p99"`
	TPOTp50 float64 `json:"tpot_p50"`
	TPOTp99 float64 `json:"tpot_p99"`
	// Shed is the share of each priority's requests answered 429 or 503
	// by ILB (critical, standard, sheddable).
	Shed [3]float64 `json:"shed"`
	// ByPriority counts each priority's requests and GoodByPriority is
	// the share of them served within the SLO (critical, standard,
	// sheddable; 0 for a priority with no request).
	ByPriority     [3]int     `json:"by_priority"`
	GoodByPriority [3]float64 `json:"good_by_priority"`
	// Failed requests were lost to an engine failure or had no healthy
	// host.
	Failed int `json:"failed"`
	// CrossRegion is the share of served requests served outside their
	// source's region; EgressUSD what their bytes cost.
	CrossRegion float64 `json:"cross_region"`
	EgressUSD   float64 `json:"egress_usd"`
	// ResidencyViolations counts requests served in a region their
	// source may not use.
	ResidencyViolations int `json:"residency_violations"`
}

// Series are time series over windows of the run.
type Series struct {
	Window float64   `json:"window_seconds"`
	Times  []float64 `json:"times"` // end of each window, seconds
	// TTFTp99 per source, per window (seconds; 0 when nothing served).
	TTFTp99 [][]float64 `json:"ttft_p99"`
	// Utilization per cluster, per window: token-cost served over what
	// its serving replicas could serve in the window (replica-seconds
	// sampled at every signals refresh, draining replicas while they
	// still had work).
	Utilization [][]float64 `json:"utilization"`
	// Local per source, per window: the share of its routed requests
	// served in its own region.
	Local [][]float64 `json:"local"`
	// Weights per source, per region, per window: the share of the
	// source's weights (its first model's cell) on the region's clusters
	// at the end of the window; empty for least_loaded, which has none.
	Weights [][][]float64 `json:"weights,omitempty"`
	// Shed per window: the share of all requests shed (429/503).
	Shed     []float64 `json:"shed"`
	Clusters []string  `json:"clusters"`
	Sources  []string  `json:"sources"`
	Regions  []string  `json:"regions"`
	Changes  []string  `json:"changes,omitempty"`
}

// acc accumulates Figures.
type acc struct {
	requests, good, strict, failed, violations, served, cross int
	byPrio, shedPrio, goodPrio                                [3]int
	ttft, tpot                                                []float64
	egress                                                    float64
}

type recorder struct {
	r        *runner
	window   time.Duration
	total    acc
	sources  []acc
	version  string
	versions int
	// the window in progress
	wTTFT   [][]float64
	wCost   []float64
	wCapSec []float64 // serving replica-seconds per cluster
	wServed []int
	wLocal  []int
	wShed   int
	wAll    int
	series  Series
	// tenants count each tenant's requests around a flood.
	tenants map[string]*TenantFigures
}

func newRecorder(r *runner, window time.Duration) *recorder {
	f := r.opts.Scenario.Fleet
	rec := &recorder{r: r, window: window, sources: make([]acc, len(f.Sources)), tenants: map[string]*TenantFigures{}}
	rec.wTTFT = make([][]float64, len(f.Sources))
	rec.wCost = make([]float64, len(f.Clusters))
	rec.wCapSec = make([]float64, len(f.Clusters))
	rec.wServed = make([]int, len(f.Sources))
	rec.wLocal = make([]int, len(f.Sources))
	s := &rec.series
	s.Window = window.Seconds()
	s.TTFTp99 = make([][]float64, len(f.Sources))
	s.Local = make([][]float64, len(f.Sources))
	s.Utilization = make([][]float64, len(f.Clusters))
	for _, c := range f.Clusters {
		s.Clusters = append(s.Clusters, c.Name)
	}
	for _, src := range f.Sources {
		s.Sources = append(s.Sources, src.Name)
	}
	s.Regions = f.Regions
	if !r.opts.Policy.LeastLoaded {
		s.Weights = make([][][]float64, len(f.Sources))
		for si := range s.Weights {
			s.Weights[si] = make([][]float64, len(f.Regions))
		}
	}
	return rec
}

func (rec *recorder) weights(_ time.Duration, w *weights.Weights) {
	rec.version = w.Version()
	rec.versions++
}

func (rec *recorder) change(at time.Duration, c Change) {
	what := c.Cluster
	if what == "" {
		what = "region " + c.Region
	}
	rec.series.Changes = append(rec.series.Changes, at.Round(time.Second).String()+" "+c.Action.String()+" "+what)
}

// sample adds, at every signals refresh, the replica-seconds cluster ci
// had serving (ready, warming, or draining with work left) over the
// interval it starts: the denominator of the window's utilization.
func (rec *recorder) sample(ci int, replicaSeconds float64) { rec.wCapSec[ci] += replicaSeconds }

// finish records request i's outcome: served by cluster (or -1).
func (rec *recorder) finish(i, cluster int, out outcome, ttft, tpot time.Duration) {
	r := rec.r
	q := &r.reqs[i]
	si := r.sources[q.Source]
	if r.records != nil {
		x := &r.records[i]
		x.Outcome, x.TTFT, x.Good = outcomeNames[out], ttft, out == routed && ttft <= r.opts.Scenario.SLO
		if cluster >= 0 {
			x.Cluster = r.clusterNames[cluster]
		}
	}
	rec.tenant(q, out, ttft)
	prio, _ := weights.ParsePriority(q.Priority)
	for _, a := range []*acc{&rec.total, &rec.sources[si]} {
		a.requests++
		a.byPrio[prio]++
		switch out {
		case shedPlanned, shedSat, noCapacity:
			a.shedPrio[prio]++
		case failed:
			a.failed++
		case routed:
			a.served++
			a.ttft = append(a.ttft, ttft.Seconds())
			if tpot > 0 {
				a.tpot = append(a.tpot, tpot.Seconds())
			}
			if ttft <= r.opts.Scenario.SLO {
				a.good++
				a.goodPrio[prio]++
			}
			if c := r.opts.Scenario.Strict; c.TTFT > 0 && c.met(ttft, tpot) {
				a.strict++
			}
			if r.clusters[cluster].region != rec.regionOf(si) {
				a.cross++
			}
			if !r.allowed[si][cluster] {
				a.violations++
			}
			a.egress += float64(q.Prompt+q.Output) * bytesPerToken / 1e9 * r.egress[si][cluster]
		}
	}
	rec.wAll++
	switch out {
	case shedPlanned, shedSat, noCapacity:
		rec.wShed++
	case routed:
		rec.wTTFT[si] = append(rec.wTTFT[si], ttft.Seconds())
		rec.wServed[si]++
		if r.clusters[cluster].region == rec.regionOf(si) {
			rec.wLocal[si]++
		}
		m := r.cfg.Models[r.models[q.Model]]
		rec.wCost[cluster] += m.TokenCost(float64(q.Prompt), float64(q.Output))
	}
}

// tenant counts request q of a scenario with a flood in its tenant's
// period (before the flood or during it).
func (rec *recorder) tenant(q *workload.Request, out outcome, ttft time.Duration) {
	fl := rec.r.opts.Scenario.Flood
	if fl == nil {
		return
	}
	var c *PeriodCounts
	switch t := rec.tenants[q.Tenant]; {
	case t == nil:
		rec.tenants[q.Tenant] = &TenantFigures{Tenant: q.Tenant}
		rec.tenant(q, out, ttft)
		return
	case q.At >= fl.From/2 && q.At < fl.From:
		c = &t.Before
	case q.At >= fl.From && q.At < fl.To:
		c = &t.During
	default:
		return
	}
	c.Requests++
	switch out {
	case routed:
		if ttft <= rec.r.opts.Scenario.SLO {
			c.Good++
		}
	case shedPlanned, shedSat, noCapacity:
		c.Shed++
	}
}

// tenantFigures are the tenants' figures, by name.
func (rec *recorder) tenantFigures() []TenantFigures {
	fl := rec.r.opts.Scenario.Flood
	if fl == nil {
		return nil
	}
	var out []TenantFigures
	for _, t := range rec.tenants {
		f := *t
		f.GoodputBefore = float64(f.Before.Good) / (fl.From - fl.From/2).Seconds()
		f.GoodputDuring = float64(f.During.Good) / (fl.To - fl.From).Seconds()
		if f.GoodputBefore > 0 {
			f.Kept = f.GoodputDuring / f.GoodputBefore
		}
		if f.During.Requests > 0 {
			f.ShedDuring = float64(f.During.Shed) / float64(f.During.Requests)
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b TenantFigures) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out
}

func (rec *recorder) regionOf(si int) int {
	f := rec.r.opts.Scenario.Fleet
	return slices.Index(f.Regions, f.Sources[si].Region)
}

// closeWindow ends the window that ends at t.
func (rec *recorder) closeWindow(t time.Duration) {
	s := &rec.series
	s.Times = append(s.Times, t.Seconds())
	for si := range rec.wTTFT {
		s.TTFTp99[si] = append(s.TTFTp99[si], percentile(rec.wTTFT[si], 0.99))
		local := 0.0
		if rec.wServed[si] > 0 {
			local = float64(rec.wLocal[si]) / float64(rec.wServed[si])
		}
		s.Local[si] = append(s.Local[si], local)
		rec.wTTFT[si], rec.wServed[si], rec.wLocal[si] = rec.wTTFT[si][:0], 0, 0
	}
	for si := range s.Weights {
		shares := rec.r.table.regionShares(cellKey{si, 0}, rec.r.clusters, len(s.Regions))
		for ri := range s.Weights[si] {
			s.Weights[si][ri] = append(s.Weights[si][ri], shares[ri])
		}
	}
	for ci, c := range rec.r.clusters {
		u := 0.0
		if rec.wCapSec[ci] > 0 {
			u = rec.wCost[ci] / (c.capacity * rec.wCapSec[ci])
		}
		s.Utilization[ci] = append(s.Utilization[ci], u)
		rec.wCost[ci], rec.wCapSec[ci] = 0, 0
	}
	shed := 0.0
	if rec.wAll > 0 {
		shed = float64(rec.wShed) / float64(rec.wAll)
	}
	s.Shed = append(s.Shed, shed)
	rec.wShed, rec.wAll = 0, 0
}

func (rec *recorder) result(r *runner) *Result {
	s := r.opts.Scenario
	secs := s.Duration.Seconds()
	res := &Result{
		Scenario: s.Name, Policy: r.opts.Policy.Name, Seed: r.opts.Seed, Seconds: secs, SLO: s.SLO.Seconds(),
		Totals: rec.total.figures("", secs), Versions: rec.versions, Series: rec.series,
	}
	for si, a := range rec.sources {
		res.Sources = append(res.Sources, a.figures(s.Fleet.Sources[si].Name, secs))
	}
	if r.est != nil {
		res.Capacity = r.est.Estimates()
	}
	res.Replicas = r.replicaFigures()
	res.Tenants = rec.tenantFigures()
	return res
}

func (a *acc) figures(source string, secs float64) Figures {
	f := Figures{
		Source: source, Requests: a.requests, Good: a.good, Goodput: float64(a.good) / secs, StrictGood: a.strict,
		TTFTp50: percentile(a.ttft, 0.5), TTFTp99: percentile(a.ttft, 0.99),
		TPOTp50: percentile(a.tpot, 0.5), TPOTp99: percentile(a.tpot, 0.99),
		Failed: a.failed, EgressUSD: a.egress, ResidencyViolations: a.violations,
	}
	if a.requests > 0 {
		f.GoodShare = float64(a.good) / float64(a.requests)
		f.StrictShare = float64(a.strict) / float64(a.requests)
	}
	f.ByPriority = a.byPrio
	for p := range a.byPrio {
		if a.byPrio[p] > 0 {
			f.Shed[p] = float64(a.shedPrio[p]) / float64(a.byPrio[p])
			f.GoodByPriority[p] = float64(a.goodPrio[p]) / float64(a.byPrio[p])
		}
	}
	if a.served > 0 {
		f.CrossRegion = float64(a.cross) / float64(a.served)
	}
	return f
}

// percentile of xs (sorted in place), nearest rank; 0 for none.
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(q*float64(len(xs))+0.5) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}
