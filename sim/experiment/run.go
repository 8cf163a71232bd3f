package experiment

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ilbproject/ilb/capacity"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/picker"
	"github.com/ilbproject/ilb/route"
	"github.com/ilbproject/ilb/signals"
	"github.com/ilbproject/ilb/sim/replica"
	"github.com/ilbproject/ilb/sim/workload"
	"github.com/ilbproject/ilb/tenant"
	"github.com/ilbproject/ilb/weights"
)

// Timing of the world around the replicas.
const (
	// detectDelay is how long Envoy keeps sending to a crashed replica
	// before its health checks (or ILB's EDS) take it out; requests sent
	// meanwhile are retried once on another host of the cluster.
	detectDelay = 2 * time.Second
	// startupTime and warmupTime: a recovered replica loads its weights,
	// then ramps up (the controller counts it in proportion).
	startupTime = 60 * time.Second
	warmupTime  = 60 * time.Second
	// bytesPerToken estimates the bytes a token costs on the wire, each
	// way, for egress.
	bytesPerToken = 4
)

// epoch is the wall time of virtual time 0 for the controller.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Options of one run.
type Options struct {
	Scenario Scenario
	Policy   Policy
	Seed     uint64
	// Requests is the workload; nil: Scenario.Workload(Seed).
	Requests []workload.Request
	// Capacity per replica profile in token-cost units per second; nil:
	// Calibrate.
	Capacity map[string]float64
	// Window is the width of the time series' buckets; 0: Duration/60.
	Window time.Duration
	// Records keeps every request's Record in Result.Records.
	Records bool
}

// lifecycle is a simulated replica's state as the world sees it.
type lifecycle uint8

const (
	lcReady lifecycle = iota
	lcStarting
	lcWarming
	lcDraining
	lcFailed
)

type simReplica struct {
	m       *replica.Replica
	lora    bool // its engine runs LoRA (Cluster.LoRA)
	cluster int
	state   lifecycle
	seen    lifecycle // the state as ILB's signals last saw it
	since   time.Duration
	// envoyUp: Envoy sends to it (health checks pass, not draining in
	// EDS). A crashed replica stays up for Envoy until detectDelay.
	envoyUp   bool
	scheduled time.Duration // the step event pending, -1 when none
	active    int           // requests Envoy has in flight on it
	// prompt and gen are its token counters at the last signals round;
	// first and slow count the first tokens since then, and those later
	// than the engine TTFT target after the request reached it (what the
	// engine's TTFT histogram says).
	prompt, gen int64
	first, slow float64
	ttftSum     time.Duration // engine TTFT of the first tokens counted
	// ttftMean is the engine's mean TTFT over the last interval with a
	// first token (ttftKnown: there was one), as its histogram says.
	ttftMean  float64
	ttftKnown bool
	addr      string   // its name, as the picker's address
	gie       gieIndex // the prefix scorer's index of it
	// served counts the requests it completed, with their prompt tokens
	// and those its prefix cache held.
	served                     int
	promptTokens, cachedTokens int64
}

type simCluster struct {
	idx, region int
	replicas    []int
	capacity    float64 // per replica
	models      []bool
	outstanding float64 // token-cost of requests in flight (least_loaded)
	// estimated is the same at ext_proc's estimate of each request's
	// cost (its prompt, the default output: the workload sends no
	// max_tokens), what a deployable router knows (least_loaded_seen).
	estimated float64
	// awaiting counts the requests routed to it that have no first token
	// yet: what ILB's ext_proc counts of its own requests until their
	// response headers (streaming responses start with the first token).
	awaiting int
	// awaitingWork is their estimated cost (pending.est), token-cost
	// units, and awaitingPrompt their prompts' estimated tokens
	// (pending.prompt): what ext_proc sums of its own requests awaiting a
	// response.
	awaitingWork, awaitingPrompt float64
	// calib calibrates ILB's first-token predictions there with the
	// first tokens of the requests it routed, as ext_proc's does with
	// the first events of the responses it follows
	// (route.Signal.FirstTokenScale).
	calib  route.Calibration
	rr     int             // round robin's counter
	picker *picker.Cluster // ILB's replica picker (host policy ilb)
}

// pending is a request on its way to a replica, or in it.
type pending struct {
	req     int // index in requests
	replica int
	rtt     time.Duration
	retried bool
	reached time.Duration // when it reached the replica
	first   bool          // its first token came
	alt     int           // the replica a retry goes to (-1: the fallback's pick)
	ticket  picker.Ticket // ILB's replica picker's booking
	est     float64       // ext_proc's estimate of its cost (simCluster.estimated)
	prompt  float64       // and of its prompt's tokens
	// predicted is ILB's first token predicted at its decision
	// (route.Decision.FirstToken; 0: none), which its first token
	// calibrates (simCluster.calib).
	predicted float64
}

type runner struct {
	opts      Options
	cfg       *config.Config
	clock     clock
	reqs      []workload.Request
	replicas  []*simReplica
	clusters  []*simCluster
	sources   map[string]int
	models    map[string]int
	cnames    map[string]int
	rtt       [][]time.Duration // source region × cluster region
	waitBuf   []int
	workBuf   []float64
	promptBuf []float64
	scaleBuf  []float64
	egress    [][]float64 // USD per GB
	allowed   [][]bool    // source × cluster
	// snap is the last signals round as ILB's monitor publishes it, and
	// live its fast loop's view by cluster index; clusterNames index the
	// clusters; snapBuf is the round's scratch.
	snap         *signals.Snapshot
	live         []live.Cluster
	liveState    *live.State // the last view (live.FromSignals holds overload from it)
	clusterNames []string
	snapBuf      [][]signals.Replica
	addrs        map[string]int // replica address → index in replicas
	table        *table
	// tenants are the tenant tables by source and model index, with
	// Policy.Tenants (nil otherwise): as ext_proc keeps them.
	tenants [][]*tenant.Table
	ctl     *controller.Controller
	est     *capacity.Estimator // nil unless the policy learns capacity
	// ttftTarget is the engines' share of the SLO: the SLO less the
	// fleet's longest round trip (as Calibrate measures).
	ttftTarget time.Duration
	// slo is the TTFT target (ttftTarget) and quantile the fast loop
	// judges overload against (live.FromSignals), as app passes
	// controller.capacity.
	slo config.CapacityLearning
	// meter counts demand as ext_proc does, by the same rule (limits,
	// by model index): a request's provisional share at its decision,
	// the rest as its engine serves it (claims, by request index).
	meter    *demand.Meter
	typical  *demand.Typical
	limits   []demand.Limits
	claims   []claim
	rng      *rand.Rand
	inflight []pending
	free     []int
	rec      *recorder
	records  []Record // per request, with Options.Records
	results  []replica.Result
	// The controller's schedule: ticks every controller.tick, and at once
	// (at most one a second: controller.DefaultMinResolveGap) when a
	// cluster's serving replicas change, as app's signals hook triggers
	// it; a triggered tick resets the ticker.
	nextTick, lastTick time.Duration
	lastServing        []int
	// Host policy scratch and seed.
	blockBuf []uint64
	// adapterBuf is scratch for the replicas' adapter reports;
	// adapterReqs and adapterMisses count the requests of an adapter and
	// those sent past a replica that had it (adapterMiss).
	adapterBuf                 []replica.AdapterLoad
	adapterReqs, adapterMisses int
	adapterDone                int           // completed requests of an adapter
	adapterCost, adapterWait   time.Duration // their replica.Result.AdapterCost and AdapterWait, summed
	upBuf                      []int
	candBuf                    []picker.Replica
}

// Run runs one policy on one scenario.
func Run(ctx context.Context, o Options) (*Result, error) {
	s := o.Scenario
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if o.Requests == nil {
		var err error
		if o.Requests, err = s.Workload(o.Seed); err != nil {
			return nil, fmt.Errorf("scenario %s: workload: %w", s.Name, err)
		}
	}
	if o.Capacity == nil {
		var err error
		if o.Capacity, err = Calibrate(s.Fleet, o.Requests, s.SLO); err != nil {
			return nil, err
		}
	}
	if o.Window <= 0 {
		o.Window = s.Duration / 60
	}
	r, err := newRunner(o)
	if err != nil {
		return nil, err
	}
	if err := r.run(ctx); err != nil {
		return nil, err
	}
	res := r.rec.result(r)
	res.Records = r.records
	return res, nil
}

func newRunner(o Options) (*runner, error) {
	s := o.Scenario
	f := s.Fleet
	pol := o.Policy.Weights
	if pol == "" {
		pol = config.PolicyProportional // unused by least_loaded, but the config needs one
	}
	cfg, err := f.Config(ControllerSettings{Policy: pol, CapacityPerReplica: o.Capacity, SignalsInterval: s.SignalsInterval})
	if err != nil {
		return nil, err
	}
	r := &runner{
		opts: o, cfg: cfg, reqs: o.Requests,
		sources: index(len(f.Sources), func(i int) string { return f.Sources[i].Name }),
		models:  index(len(f.Models), func(i int) string { return f.Models[i] }),
		cnames:  index(len(f.Clusters), func(i int) string { return f.Clusters[i].Name }),
		rng:     rand.New(rand.NewPCG(o.Seed, 0x1b)),
		meter:   demand.NewMeter(epoch),
		typical: demand.NewTypical(),
		claims:  make([]claim, len(o.Requests)),
		addrs:   map[string]int{},
	}
	regions := index(len(f.Regions), func(i int) string { return f.Regions[i] })
	for ci, c := range f.Clusters {
		p, ok := replica.LookupProfile(c.Profile)
		if !ok {
			return nil, fmt.Errorf("cluster %s: unknown replica profile %q", c.Name, c.Profile)
		}
		// The picker's cache per replica: the engine's KV cache, as an
		// operator reads it from vLLM's cache config.
		sc := &simCluster{idx: ci, region: regions[c.Region], capacity: o.Capacity[c.Profile], models: make([]bool, len(f.Models)), picker: picker.NewCluster(picker.Options{CacheTokens: p.KVTokens(), MaxCPULoras: c.LoRA.MaxCPULoras})}
		for _, m := range c.Models {
			sc.models[r.models[m]] = true
		}
		for i := range c.Replicas {
			// A recovered engine warms up (CUDA graphs, caches): steps twice
			// as slow at first, full speed after warmupTime.
			ri := len(r.replicas)
			m, err := replica.New(replica.Options{
				Profile: p, Name: fmt.Sprintf("%s/%d", c.Name, i), WarmupTime: warmupTime, WarmupSlowdown: 2, LoRA: c.LoRA,
				// vLLM's automatic prefix caching, on by default in v1:
				// sessions' and traces' shared prefixes (hash_ids) are not
				// prefilled again on a replica that holds them.
				PrefixCache: true,
				OnToken: func(id uint64, _ any, index int, at time.Duration) {
					if index == 0 {
						r.firstToken(ri, int(id), at)
					}
				},
			})
			if err != nil {
				return nil, err
			}
			sc.replicas = append(sc.replicas, len(r.replicas))
			addr := fmt.Sprintf("%s/%d", c.Name, i)
			r.addrs[addr] = len(r.replicas)
			r.replicas = append(r.replicas, &simReplica{m: m, lora: c.LoRA.MaxLoras > 0, cluster: ci, envoyUp: true, scheduled: -1, addr: addr, gie: gieIndex{capacity: max(1, p.KVTokens()/picker.BlockTokens)}})
		}
		r.clusters = append(r.clusters, sc)
	}
	r.rtt = make([][]time.Duration, len(f.Sources))
	r.egress = make([][]float64, len(f.Sources))
	r.allowed = make([][]bool, len(f.Sources))
	for si, src := range f.Sources {
		cs, _ := cfg.Source(src.Name)
		for _, c := range f.Clusters {
			l := f.link(src.Region, c.Region)
			r.rtt[si] = append(r.rtt[si], time.Duration(l.RTTMs*float64(time.Millisecond)))
			r.egress[si] = append(r.egress[si], l.EgressUSDPerGB)
			r.allowed[si] = append(r.allowed[si], cs.Allows(c.Region))
		}
	}
	for i, q := range o.Requests {
		if _, ok := r.sources[q.Source]; !ok {
			return nil, fmt.Errorf("requests[%d]: unknown source %q", i, q.Source)
		}
		if _, ok := r.models[q.Model]; !ok {
			return nil, fmt.Errorf("requests[%d]: unknown model %q", i, q.Model)
		}
		if _, err := weights.ParsePriority(q.Priority); err != nil {
			return nil, fmt.Errorf("requests[%d]: %w", i, err)
		}
	}
	for _, m := range cfg.Models {
		r.limits = append(r.limits, demand.NewLimits(cfg.ExtProc, m))
	}
	if o.Policy.Tenants && o.Policy.FastLoop {
		r.tenants = make([][]*tenant.Table, len(f.Sources))
		for si := range r.tenants {
			for range cfg.Models {
				r.tenants[si] = append(r.tenants[si], tenant.New(cfg.Tenants, cfg.Controller.Tick.Std(), epoch))
			}
		}
	}
	r.live = make([]live.Cluster, len(r.clusters))
	r.snapBuf = make([][]signals.Replica, len(r.clusters))
	for _, c := range f.Clusters {
		r.clusterNames = append(r.clusterNames, c.Name)
	}
	r.ttftTarget = engineBudget(f, s.SLO)
	r.slo = cfg.Controller.Capacity
	r.slo.TTFTTarget = config.Duration(r.ttftTarget)
	if o.Policy.LearnCapacity {
		if r.est, err = newEstimator(cfg, r.ttftTarget); err != nil {
			return nil, err
		}
	}
	r.rec = newRecorder(r, o.Window)
	if o.Records {
		r.records = make([]Record, len(r.reqs))
		for i, q := range r.reqs {
			r.records[i] = Record{At: q.At, Source: q.Source, Tenant: q.Tenant, Priority: q.Priority, Prompt: q.Prompt, Output: q.Output, Keep: 1, Predicted: -1}
		}
	}
	if !o.Policy.LeastLoaded {
		now := func() time.Time { return epoch.Add(r.clock.now) }
		r.ctl, err = controller.New(controller.Options{
			Config: cfg, Policy: mustPolicy(o.Policy.Weights), Now: now,
			State:  func() (map[string]weights.ClusterState, time.Time) { return r.clusterStates(), now() },
			Demand: func() (weights.Demand, time.Time) { return r.takeDemand(), now() },
		})
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

func mustPolicy(p config.Policy) weights.Policy {
	pol, err := weights.NewPolicy(p)
	if err != nil {
		panic(fmt.Sprintf("experiment: policy %q: %v", p, err)) // Policies() names only known ones
	}
	return pol
}

func index(n int, name func(int) string) map[string]int {
	m := make(map[string]int, n)
	for i := range n {
		m[name(i)] = i
	}
	return m
}

// run processes events until the scenario's end, then lets the requests
// in flight finish (they count; new arrivals stop).
func (r *runner) run(ctx context.Context) error {
	s := r.opts.Scenario
	r.refreshSignals()
	if r.ctl != nil {
		if err := r.tick(ctx); err != nil {
			return err
		}
		r.nextTick = r.cfg.Controller.Tick.Std()
		r.clock.at(r.nextTick, evTick, 0)
	}
	r.clock.at(r.signalsEvery(), evSignals, 0)
	for i, c := range s.Changes {
		r.clock.at(c.At, evScenario, i)
	}
	if len(r.reqs) > 0 {
		r.clock.at(r.reqs[0].At, evArrival, 0)
	}
	r.clock.at(r.opts.Window, evWindow, 0)
	for n := 0; ; n++ {
		if n%65536 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		e, ok := r.clock.next()
		if !ok {
			break
		}
		ended := e.at >= s.Duration
		switch e.kind {
		case evArrival:
			r.arrive(e.i)
			if next := e.i + 1; next < len(r.reqs) && r.reqs[next].At < s.Duration {
				r.clock.at(r.reqs[next].At, evArrival, next)
			}
		case evDeliver:
			r.deliver(e.i)
		case evStep:
			r.step(e.i)
		case evSignals:
			r.refreshSignals()
			if !ended {
				r.clock.at(e.at+r.signalsEvery(), evSignals, 0)
			}
		case evTick:
			if e.at != r.nextTick {
				continue // superseded by a triggered tick, which reset the ticker
			}
			if err := r.tick(ctx); err != nil {
				return err
			}
			r.lastTick = e.at
			if !ended {
				r.nextTick = e.at + r.cfg.Controller.Tick.Std()
				r.clock.at(r.nextTick, evTick, 0)
			}
		case evScenario:
			r.change(e.i)
		case evLifecycle:
			r.lifecycle(e.i)
		case evWindow:
			r.rec.closeWindow(e.at)
			if !ended {
				r.clock.at(e.at+r.opts.Window, evWindow, 0)
			}
		}
	}
	return nil
}

// tick runs the controller and indexes its weights for routing. A
// controller that fails keeps its last weights (fail-static), as ILB does.
func (r *runner) tick(ctx context.Context) error {
	_ = r.ctl.Tick(ctx)
	w := r.ctl.Current()
	if w == nil {
		return errors.New("experiment: the controller published no weights")
	}
	if r.table == nil || r.rec.version != w.Version() {
		r.table = newTable(r.cfg, w, r.sources, r.models, r.cnames)
		r.rec.weights(r.clock.now, w)
	}
	return nil
}
