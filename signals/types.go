package signals

import (
	"slices"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

// State is the state of one replica.
type State string

// Replica states. Only ready, warming and stale replicas serve (count as
// capacity); draining, unhealthy and starting ones count zero.
const (
	// StateStarting: discovered, not yet probed successfully.
	StateStarting State = "starting"
	// StateWarming: healthy, ramping up (slow start over Signals.Warmup).
	StateWarming State = "warming"
	// StateReady: healthy with fresh metrics.
	StateReady State = "ready"
	// StateDraining: discovery says drain (a file line's " draining" flag),
	// or the replica left discovery: it stays draining for one discovery
	// Refresh, then is removed.
	StateDraining State = "draining"
	// StateUnhealthy: Signals.UnhealthyAfter consecutive failed health
	// probes; back after Signals.HealthyAfter successes, through warming.
	StateUnhealthy State = "unhealthy"
	// StateStale: alive (health probe OK) but no good metrics for
	// Signals.StaleAfter intervals: counts as capacity, load unknown.
	StateStale State = "stale"
)

// states lists every state, in the order metrics and summaries use.
var states = []State{StateStarting, StateWarming, StateReady, StateDraining, StateUnhealthy, StateStale}

// serving reports whether a replica in state s takes traffic.
func (s State) serving() bool {
	return s == StateReady || s == StateWarming || s == StateStale
}

// taking reports whether a replica in state s counts as serving for the
// rest of ILB: serving, or starting (not probed yet: the controller counts
// it as ready and the fast loop does not exclude its cluster).
func (s State) taking() bool {
	return s.serving() || s == StateStarting
}

// Metrics are one replica's latest good values, summed over the series of
// each metric (one per model when a model label splits them, one per
// engine with data parallelism).
type Metrics struct {
	// Waiting and Running are request counts (queue, batch).
	Waiting, Running float64
	// KVUsage is the KV cache usage in [0, 1]: the fullest series when
	// there are several (one pool per model or engine). KVKnown is false
	// when the engine has no such gauge (TGI) or its value is unusable:
	// unknown is never reported as 0.
	KVUsage float64
	KVKnown bool
	// PromptTokens and GenerationTokens are counter values (tokens since
	// the engine started).
	PromptTokens, GenerationTokens float64
	// TokensPerSecond is the rate of prompt+generation tokens between the
	// last two good scrapes; 0 until known. A counter that went down is a
	// reset: the rate is then the new value over the interval.
	TokensPerSecond float64
	// PromptTokensPerSecond and GenerationTokensPerSecond split it by kind
	// (prefill, decode). RatesKnown: the three rates are measured (both
	// token counters read in two good scrapes).
	PromptTokensPerSecond, GenerationTokensPerSecond float64
	RatesKnown                                       bool
	// FirstTokensPerSecond is the rate of requests that got their first
	// token, SlowFirstTokensPerSecond of those past the TTFT target
	// (controller.capacity.ttft_target), from the engine's TTFT histogram
	// between the last two good scrapes; TTFTKnown when measured.
	FirstTokensPerSecond, SlowFirstTokensPerSecond float64
	TTFTKnown                                      bool
	// TTFTMeanSeconds is the mean time to first token of the requests
	// that got it between the last two good scrapes (the histogram's sum
	// over its count), kept through intervals without any; TTFTMeanKnown
	// once measured.
	TTFTMeanSeconds float64
	TTFTMeanKnown   bool
	// Models are the model label values seen, sorted.
	Models []string
	// LoRA is the engine's report of its LoRA adapters; nil when it
	// exports none (LoRA disabled, or an engine without the report).
	LoRA *LoRA
	// Problems describe what the latest scrape could not use, e.g.
	// "vllm:kv_cache_usage_perc is NaN: unknown" or
	// "vllm:num_requests_running missing". Empty when everything was fine.
	Problems []string
}

// Transition is one change of a replica's state.
type Transition struct {
	At       time.Time
	From, To State
	Reason   string
}

// Replica is one engine replica as last seen.
type Replica struct {
	// Cluster is the engine cluster name; Address is host:port (IP:port
	// after DNS resolution).
	Cluster, Address string
	// Zone is the replica's zone as discovery gives it (Kubernetes
	// EndpointSlices), "" when unknown.
	Zone string `json:",omitempty"`
	// State, the Reason of the last transition and Since when.
	State  State
	Reason string
	Since  time.Time
	// Ramp is the share of a ready replica's capacity this one counts for:
	// 1 when ready or stale, linear 0.1 → 1 over Signals.Warmup when
	// warming, 0 otherwise.
	Ramp float64
	// Saturated: Waiting >= SaturationQueue × max(Running, 1), or KVKnown
	// and KVUsage >= SaturationKV. Always false when the load is unknown
	// (stale, never scraped) or the replica does not serve.
	Saturated bool
	// LastScrape is when the latest good metrics were read (zero: never);
	// LastError is the latest scrape's error, "" when it was good.
	LastScrape time.Time
	LastError  string
	Metrics    Metrics
	// Transitions are the last 8 state changes, oldest first.
	Transitions []Transition
}

// Cluster summarises the replicas of one engine cluster.
type Cluster struct {
	Name string
	// Replica counts per state.
	Ready, Warming, Draining, Unhealthy, Stale, Starting int
	// Ramps are the Ramp of each warming replica, in address order.
	Ramps []float64
	// Waiting, Running and the token rates are sums over the ready and
	// warming replicas with known metrics; LoadKnown counts those
	// replicas, RatesKnown those of them whose token rates are known.
	Waiting, Running, TokensPerSecond                float64
	PromptTokensPerSecond, GenerationTokensPerSecond float64
	LoadKnown, RatesKnown                            int
	// FirstTokensPerSecond and SlowFirstTokensPerSecond sum the replicas
	// whose TTFT is known; TTFTKnown counts them.
	FirstTokensPerSecond, SlowFirstTokensPerSecond float64
	TTFTKnown                                      int
	// TTFTSeconds is the time to first token the cluster's engines give
	// now: the larger of their measured mean (weighted by first tokens,
	// or the plain mean of their last ones when none came) and the wait of
	// their queue (waiting / first tokens per second, Little's law; one
	// admission per second when none came). TTFTSecondsKnown once a
	// serving replica measured one.
	TTFTSeconds      float64
	TTFTSecondsKnown bool
	// PrefillSecondsPerToken is the time its engines take to give a first
	// token per prompt token, their queue aside (≥ 0): their measured
	// mean TTFT less the wait of their queue, over the prompt tokens per
	// first token (prompt tokens ÷ first tokens, each per second) of the
	// interval. It is how fast the cluster prefills the prompts it gets,
	// batch contention included, so a slower GPU shows a larger figure.
	// PrefillKnown when first tokens and prompt tokens came this interval.
	PrefillSecondsPerToken float64
	PrefillKnown           bool
	// KVUsage is the mean over those replicas that report it; KVKnown is
	// false when none does.
	KVUsage float64
	KVKnown bool
	// Saturated: every serving (ready, warming, stale) replica is
	// saturated; false when none serves.
	Saturated         bool
	SaturatedReplicas int
	// OldestScrape is the oldest LastScrape among serving replicas (zero
	// when one never had good metrics): the freshness of the sums.
	OldestScrape time.Time
	// DiscoveryError is the last discovery error (e.g. a DNS failure, an
	// API server out of reach; the last known replicas are kept), "" when
	// the last discovery worked. DiscoveryErrorSince is when discovery
	// began to fail (zero when it works): how stale the replica set may be.
	DiscoveryError      string
	DiscoveryErrorSince time.Time
}

// Blind says that the monitor takes itself for blind (see "Blindness" in
// the package documentation): replicas whose failures are silent keep
// their last known state, and the controller keeps its last good weights.
type Blind struct {
	// Reason names the rule that holds, with its figures, e.g. "silent
	// health probe failures (timeouts, no answer) at once: 2 of 2 serving
	// replicas of us-east-vllm, 2 of 2 of eu-west-vllm" or "the signals
	// loop woke 2.3s late (interval 1s)". At most a few hundred bytes.
	Reason string
	// Since is when the monitor became blind (the monitor's clock).
	Since time.Time
}

// Snapshot is the state of every replica at one instant. It is immutable:
// the monitor never changes a published snapshot, and readers must not
// either (slices are shared between snapshots).
type Snapshot struct {
	At time.Time
	// Replicas are sorted by cluster (config order), then address.
	Replicas []Replica
	// Clusters has one entry per configured engine cluster.
	Clusters map[string]Cluster
	// Blind is set while the monitor takes itself for blind; nil when it
	// trusts what it sees.
	Blind *Blind
}

// ClusterStates turns the snapshot into the controller's input: per
// cluster, the capacity of Ready+Stale full replicas plus the warming ramps,
// times the cluster profile's capacity per replica. Replicas not probed
// yet (starting) count as ready: at startup they are the fleet that was
// serving a moment ago, and a new one is probed within an interval. c
// must be the validated configuration the monitor runs with.
func (s *Snapshot) ClusterStates(c *config.Config) map[string]weights.ClusterState {
	return s.ClusterStatesWith(c, nil)
}

// ClusterStatesWith is ClusterStates with each cluster's capacity per
// replica and saturation throughput per replica (token-cost/s) from
// learned (a capacity estimator) where it answers, the profile's capacity
// and an unknown saturation otherwise; nil: the profiles'.
func (s *Snapshot) ClusterStatesWith(c *config.Config, learned func(cluster string) (perReplica, saturation float64, ok bool)) map[string]weights.ClusterState {
	out := make(map[string]weights.ClusterState, len(c.Clusters))
	for _, e := range c.Clusters {
		p, _ := c.Profile(e.Profile)
		per, sat := p.CapacityPerReplica, 0.0
		if learned != nil {
			if v, m, ok := learned(e.Name); ok {
				per, sat = v, m
			}
		}
		cl := s.Clusters[e.Name]
		st := weights.NewClusterState(per, cl.Ready+cl.Stale+cl.Starting,
			slices.Clone(cl.Ramps), cl.Draining, cl.Unhealthy)
		if per > 0 {
			st.Saturation = st.Capacity / per * sat
		}
		out[e.Name] = st
	}
	return out
}

// Endpoints returns the replicas of the named cluster, in address order,
// or nil. The result shares the snapshot's memory: do not modify it.
func (s *Snapshot) Endpoints(cluster string) []Replica {
	i := slices.IndexFunc(s.Replicas, func(r Replica) bool { return r.Cluster == cluster })
	if i < 0 {
		return nil
	}
	j := i
	for j < len(s.Replicas) && s.Replicas[j].Cluster == cluster {
		j++
	}
	return s.Replicas[i:j:j]
}
