package live

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ilbproject/ilb/capacity"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/route"
	"github.com/ilbproject/ilb/signals"
)

// State is the engines' state as the fast loop uses it: which clusters are
// out and why, which are saturated, how long their queues are, and the
// replicas replica picking chooses from. It is immutable.
type State struct {
	// At is when the signals were observed; ext_proc ignores a State
	// older than extproc.live_ttl, so nothing stays excluded or shed
	// after the signals stop.
	At       time.Time
	Clusters map[string]Cluster
}

// Cluster is one engine cluster's live state.
type Cluster struct {
	// Excluded says why no request may go there now ("" when it may):
	// no ready replica, every replica unhealthy...
	Excluded string `json:"excluded,omitempty"`
	// Saturated: every serving replica has a long queue or a full KV
	// cache; sheddable requests are refused when all their clusters are.
	Saturated bool `json:"saturated,omitempty"`
	// Overloaded: its engines miss the TTFT target under load — more than
	// 1 − controller.capacity.ttft_quantile of the last interval's first
	// tokens past controller.capacity.ttft_target with a request or more
	// waiting per replica (config.CapacityLearning.OverTarget) — or it is
	// Saturated: measured overload in the SLO's terms, which confirms the
	// controller's planned shedding (package route). A sustained
	// overload holds while the queue lasts (see OverloadHold).
	Overloaded bool `json:"overloaded,omitempty"`
	// OverTargetAt is the last signals interval whose first tokens were
	// over the target with a queue, OverTargetSince the first of the run
	// of such intervals in a row that it ends, and SustainedAt the last
	// at which such a run had lasted capacity.LastingFor (zero: none seen,
	// or none since the queue last fell under a request per replica).
	OverTargetAt    time.Time `json:"over_target_at,omitzero"`
	OverTargetSince time.Time `json:"over_target_since,omitzero"`
	SustainedAt     time.Time `json:"sustained_at,omitzero"`
	// Pressure is the cluster's queued requests per running request,
	// waiting / max(running, 1) over its serving replicas whose load is
	// known (PressureKnown: at least one); graded steering moves requests
	// off clusters with more of it (package route).
	Pressure      float64 `json:"pressure,omitempty"`
	PressureKnown bool    `json:"pressure_known,omitempty"`
	// Waiting is the requests its engines queue, summed over its serving
	// replicas whose load is known.
	Waiting float64 `json:"waiting,omitempty"`
	// TTFT is the time to first token the cluster's engines give now, in
	// seconds (their TTFT histograms and queues; see signals.Cluster);
	// steering compares it, plus the round trip, across the clusters a
	// request may go to. TTFTKnown: the engines export the histogram and
	// gave a first token.
	TTFT      float64 `json:"ttft,omitempty"`
	TTFTKnown bool    `json:"ttft_known,omitempty"`
	// FirstTokensPerSecond is the rate at which its engines give first
	// tokens (0: unknown or none): with the requests sent there that
	// await their response, Little's law predicts the TTFT of the next
	// one before the engines' metrics show a burst.
	FirstTokensPerSecond float64 `json:"first_tokens_per_second,omitempty"`
	// PrefillPerToken is the time its engines take per prompt token to
	// give a first token, queue aside, in seconds: PrefillSeconds over
	// PrefillTokens, the intervals' figures (signals.Cluster's
	// PrefillSecondsPerToken) pooled over the last PrefillWindow, or the
	// last interval's when it is slower (contention); 0: unknown.
	// Balancing does not move a request to a cluster whose
	// prefill of its prompt loses more than the queue it saves, and
	// moves one that its chosen cluster cannot begin within the TTFT
	// target (route.Signal.PrefillPerToken).
	PrefillPerToken float64 `json:"prefill_per_token,omitempty"`
	// PrefillSeconds and PrefillTokens are the pooled figures: the
	// engines' time to first token, queue aside, summed over the first
	// tokens of each interval, and those first tokens' prompt tokens,
	// each interval weighted by its length and by exp(−age /
	// PrefillWindow).
	PrefillSeconds float64 `json:"prefill_seconds,omitempty"`
	PrefillTokens  float64 `json:"prefill_tokens,omitempty"`
	// Serving is how many of Replicas may be picked (Out == ""): with
	// TTFT, the rate at which they give first tokens when the engines
	// gave none over the last interval (route.PredictTTFT).
	Serving int `json:"serving,omitempty"`
	// Replicas are the cluster's replicas as discovered, in address
	// order. Those with Out == "" (ready, warming, stale or not probed
	// yet) are the candidates of replica picking; draining and unhealthy
	// ones are listed with Out saying so and never picked; a replica no
	// longer listed has left the cluster, and replica picking forgets it.
	Replicas []Replica `json:"replicas,omitempty"`
}

// Replica is one replica of a cluster.
type Replica struct {
	// Address is host:port, as Envoy's EDS names the endpoint.
	Address string `json:"address"`
	// Ramp is the warm-up ramp, in (0, 1]: 1 when ready.
	Ramp float64 `json:"ramp"`
	// Saturated: its engine reports a long queue or a full KV cache.
	Saturated bool `json:"saturated,omitempty"`
	// Out says why it may not be picked now (its state: "draining",
	// OutUnhealthy); "" when it serves.
	Out string `json:"out,omitempty"`
	// Running is the requests its engine reported running at its last
	// good scrape, at ScrapedAt (zero: unknown, e.g. its metrics are
	// stale): its decode load for the replica picker.
	Running   float64   `json:"running,omitempty"`
	ScrapedAt time.Time `json:"scraped_at,omitzero"`
	// Waiting is the requests its engine reported waiting at ScrapedAt:
	// the queue its last step left (vLLM's num_requests_waiting), 0 when
	// unknown. QueueSince is the first of the run of its scrapes, up to
	// ScrapedAt, that each reported a queue (Waiting >= 1) no shorter
	// than the one before (zero: none at ScrapedAt); QueueLasting: that
	// run has lasted capacity.LastingFor, a queue that does not drain,
	// which a burst the engine admits within a few steps never makes
	// (see picker.Replica.QueueLasting).
	Waiting      float64   `json:"waiting,omitempty"`
	QueueSince   time.Time `json:"queue_since,omitzero"`
	QueueLasting bool      `json:"queue_lasting,omitempty"`
	// LoRA is its engine's report of its LoRA adapters at ScrapedAt (nil:
	// none, or not fresh).
	LoRA *signals.LoRA `json:"lora,omitempty"`
}

// OutUnhealthy is Replica.Out for a replica failing its probes (the
// signals monitor's state name): its replica picker forgets what it
// believed the replica's prefix cache held.
const OutUnhealthy = string(signals.StateUnhealthy)

// OverloadHold is how long a sustained overload — first tokens over the
// TTFT target in every signals interval over capacity.LastingFor, as the
// capacity estimator requires of a queue — holds a cluster Overloaded while a request or
// more still waits per replica: the estimator's smoothing window
// (capacity.DefaultSmoothTime), over which it judges the same rule. Such
// an overload ends when the queue does, not at the first interval whose
// first tokens met the target: those are the requests admitted while the
// plan's shed applied, and an overload judged one interval at a time
// applied the shed on and off, the queue building again in every off
// interval (tenant flood at 1.3 of the fleet: the other tenants kept
// 94 % of their goodput within the SLO; 95–96 % with the hold;
// docs/benchmarks.md). A shorter run over the target is a burst, not
// held: bursty code-completion traffic misses the target in isolated
// intervals at moderate load, and holding each of them applied a plan
// that sheds a third of its sheddable requests at load 0.7 (goodput within
// the SLO 89 % against 97 %).
const OverloadHold = capacity.DefaultSmoothTime

// FromSignals is the fast loop's view of a signals snapshot: a cluster
// with no serving replica is excluded (with the counts that say why);
// saturation as the signals see it; overload against slo's TTFT target
// and quantile, held from prev (the previous view, nil for none) while
// the queue lasts, for at most OverloadHold. It follows the same guard as the
// controller: while the monitor is blind (snap.Blind), replicas whose
// probes fail silently keep their last known state, so no cluster is
// excluded for them; a cluster is excluded only for what the monitor saw
// (refusals, HTTP errors, draining), and the reason says the monitor was
// blind then.
func FromSignals(snap *signals.Snapshot, slo config.CapacityLearning, prev *State) *State {
	l := &State{At: snap.At, Clusters: make(map[string]Cluster, len(snap.Clusters))}
	for name, c := range snap.Clusters {
		cl := Cluster{Saturated: c.Saturated, Overloaded: c.Saturated, PressureKnown: c.LoadKnown > 0}
		if cl.PressureKnown {
			cl.Pressure, cl.Waiting = c.Waiting/max(c.Running, 1), c.Waiting
			queue := c.Waiting / float64(c.LoadKnown)
			var was Cluster // the previous view's
			if prev != nil {
				was = prev.Clusters[name]
			}
			switch {
			case c.TTFTKnown > 0 && slo.OverTarget(c.FirstTokensPerSecond, c.SlowFirstTokensPerSecond, queue):
				cl.Overloaded, cl.OverTargetAt, cl.OverTargetSince, cl.SustainedAt = true, snap.At, snap.At, was.SustainedAt
				if prev != nil && was.OverTargetAt.Equal(prev.At) {
					cl.OverTargetSince = was.OverTargetSince // the run goes on
				}
				if capacity.Lasting(cl.OverTargetSince, snap.At) {
					cl.SustainedAt = snap.At
				}
			case queue >= 1 && !was.SustainedAt.IsZero() && snap.At.Sub(was.SustainedAt) < OverloadHold:
				cl.Overloaded, cl.SustainedAt = true, was.SustainedAt
			}
		}
		cl.TTFT, cl.TTFTKnown, cl.FirstTokensPerSecond = c.TTFTSeconds, c.TTFTSecondsKnown, c.FirstTokensPerSecond
		cl.prefill(c, snap.At, prev, name)
		var before []Replica // the previous view's, in address order
		if prev != nil {
			before = prev.Clusters[name].Replicas
		}
		for _, r := range snap.Endpoints(name) {
			rl := replicaOf(r)
			rl.QueueSince = queueSince(rl, before)
			rl.QueueLasting = capacity.Lasting(rl.QueueSince, rl.ScrapedAt)
			if rl.Out == "" {
				cl.Serving++
			}
			cl.Replicas = append(cl.Replicas, rl)
		}
		if c.Ready+c.Warming+c.Stale+c.Starting == 0 {
			cl.Excluded = excludedWhy(c, snap.Blind)
		}
		l.Clusters[name] = cl
	}
	return l
}

// replicaOf is one replica as replica picking sees it.
func replicaOf(r signals.Replica) Replica {
	rl := Replica{Address: r.Address, Ramp: r.Ramp, Saturated: r.Saturated}
	switch r.State {
	case signals.StateReady, signals.StateWarming, signals.StateStale, signals.StateStarting:
		if !(rl.Ramp > 0) {
			rl.Ramp = 1 // not probed yet: the fleet that was serving
		}
		if (r.State == signals.StateReady || r.State == signals.StateWarming) && !r.LastScrape.IsZero() && r.LastError == "" {
			rl.Running, rl.ScrapedAt = r.Metrics.Running, r.LastScrape // fresh: the engine's decode load
			rl.Waiting = r.Metrics.Waiting
			rl.LoRA = r.Metrics.LoRA
		}
	case signals.StateUnhealthy:
		rl.Out = OutUnhealthy // its picker forgets what it held
	default:
		rl.Out = string(r.State)
	}
	return rl
}

// queueSince is the start of the run of rl's scrapes that reported a
// queue, each no shorter than the one before, as before (the previous
// view's replicas of its cluster, in address order) saw it: a queue that
// shrank between two scrapes is draining and starts no run. A view of the
// same scrape keeps what the view before said.
func queueSince(rl Replica, before []Replica) time.Time {
	if rl.ScrapedAt.IsZero() || !(rl.Waiting >= 1) {
		return time.Time{}
	}
	i, ok := slices.BinarySearchFunc(before, rl.Address, func(r Replica, addr string) int { return strings.Compare(r.Address, addr) })
	if !ok {
		return rl.ScrapedAt
	}
	was := before[i]
	switch {
	case was.ScrapedAt.Equal(rl.ScrapedAt):
		return was.QueueSince
	case !was.QueueSince.IsZero() && was.ScrapedAt.Before(rl.ScrapedAt) && rl.Waiting >= was.Waiting:
		return was.QueueSince
	}
	return rl.ScrapedAt
}

// excludedWhy says why a cluster with no serving replica is out.
func excludedWhy(c signals.Cluster, blind *signals.Blind) string {
	var parts []string
	for _, p := range []struct {
		n    int
		what string
	}{{c.Unhealthy, "unhealthy"}, {c.Draining, "draining"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.what))
		}
	}
	why := "no replica"
	if len(parts) > 0 {
		why = "no serving replica: " + strings.Join(parts, ", ")
	}
	if c.DiscoveryError != "" {
		why += " (discovery: " + c.DiscoveryError + ")"
	}
	if blind != nil {
		why += " (signals blind since " + blind.Since.UTC().Format(time.RFC3339) + ")"
	}
	return why
}

// Signal is the cluster's state as the route decision takes it. awaiting
// is how many requests the caller sent there that still await their
// response: with the engines' first-token rate they predict the TTFT of
// the next one (route.PredictTTFT); work is their estimated cost, in
// token-cost units, which balancing divides by the serving replicas'
// capacity (route.Signal.Work), and prompt their prompts' estimated
// tokens, which it multiplies by the cluster's prefill time per token
// (route.Signal.Prompt).
func (c Cluster) Signal(awaiting int64, work, prompt float64) route.Signal {
	s := route.Signal{
		Excluded: c.Excluded != "", Saturated: c.Saturated, Overloaded: c.Overloaded, Pressure: c.Pressure, PressureKnown: c.PressureKnown,
		TTFT: route.PredictTTFT(c.TTFT, awaiting, c.FirstTokensPerSecond, c.Serving), TTFTKnown: c.TTFTKnown,
		Serving: c.Serving, Work: max(work, 0), Prompt: max(prompt, 0), Awaiting: max(awaiting, 0), PrefillPerToken: c.PrefillPerToken,
	}
	s.QueueWait = c.queueWait()
	return s
}

// queueWait is how long the requests the cluster's engines queue take to
// be admitted, in seconds: Waiting over the rate they give first tokens
// (Little's law), or, when they gave none over the last interval, over
// what the serving replicas give at the engines' own TTFT, one prompt at
// a time each (as route.PredictTTFT). 0 without a queue or a rate, and 0
// while fewer requests wait than replicas serve: a queue is a request or
// more waiting per serving replica, as for the capacity
// estimator (fewer are the moment between two steps of a replica that
// admits them; counting them, a second old, moved requests at light load
// onto slower clusters, and the synthetic day's p99 TTFT at 0.5 of the
// fleet rose from 0.32 s to 0.37 s).
func (c Cluster) queueWait() float64 {
	if !(c.Waiting > 0) || c.Waiting < float64(max(c.Serving, 1)) {
		return 0
	}
	rate := c.FirstTokensPerSecond
	if !(rate > 0) && c.Serving > 0 && c.TTFT > 0 {
		rate = float64(c.Serving) / c.TTFT
	}
	if !(rate > 0) {
		return 0
	}
	return c.Waiting / rate
}
