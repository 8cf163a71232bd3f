package dashboard

import (
	"context"
	"time"

	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/weights"
)

// Sample is the state of the fleet at one instant.
type Sample struct {
	At time.Time `json:"at"`
	// WeightsVersion is the version in force ("" before the first).
	WeightsVersion string `json:"weights_version"`
	// Clusters has one entry per engine cluster, in configuration order.
	Clusters []ClusterSample `json:"clusters"`
	Shed     ShedSample      `json:"shed"`
}

// ClusterSample is one engine cluster at one instant: its replicas (from
// the signals monitor; Known is false without one) and what the weights
// in force planned for it.
type ClusterSample struct {
	Name string `json:"name"`
	// Known: the signals monitor reported this cluster.
	Known bool `json:"known"`
	// Replica counts per state.
	Ready     int `json:"ready"`
	Warming   int `json:"warming"`
	Draining  int `json:"draining"`
	Unhealthy int `json:"unhealthy"`
	Stale     int `json:"stale"`
	Starting  int `json:"starting"`
	// Saturated: every serving replica is saturated.
	Saturated         bool `json:"saturated"`
	SaturatedReplicas int  `json:"saturated_replicas"`
	// Waiting (queue) and Running are request counts summed over the
	// replicas with known metrics; null when none's are known (unknown is
	// never 0).
	Waiting *float64 `json:"waiting"`
	Running *float64 `json:"running"`
	// KVUsage is the mean KV cache usage in [0, 1]; null when no replica
	// reports one.
	KVUsage *float64 `json:"kv_usage"`
	// TokensPerSecond is the token rate; null before two good scrapes.
	TokensPerSecond *float64 `json:"tokens_per_second"`
	// Capacity (token-cost units/s) and Utilization (in [0, ∞), 1 = the
	// planned capacity) are the controller's plan in the weights in force;
	// null when its explanation has none (policies that ignore demand).
	Capacity    *float64 `json:"capacity"`
	Utilization *float64 `json:"utilization"`
}

// ShedSample is the shedding over the interval that ended at a sample.
type ShedSample struct {
	// Requests is the number of decision records that started in the
	// interval; Shed of them were refused with 429 (shed or overloaded),
	// Rejected refused otherwise by ILB itself (no capacity, bad
	// requests, ...). Rate is Shed/Requests (0 without requests).
	Requests int     `json:"requests"`
	Shed     int     `json:"shed"`
	Rejected int     `json:"rejected"`
	Rate     float64 `json:"rate"`
	// Truncated: the counts are a lower bound: more records started in
	// the interval than the sampler reads, or than the decision log keeps
	// (it counted the newest only).
	Truncated bool `json:"truncated,omitempty"`
	// Planned is, per priority, the largest shed fraction of any cell in
	// the weights in force.
	Planned weights.ShedFractions `json:"planned"`
}

// Run samples every Options.Interval until ctx is done, starting at once,
// and returns nil then.
func (d *Dashboard) Run(ctx context.Context) error {
	t := time.NewTicker(d.o.Interval)
	defer t.Stop()
	d.o.Logger.InfoContext(ctx, "dashboard sampling", "interval", d.o.Interval, "window", d.o.Window)
	for {
		d.sample(ctx, d.o.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// sample records the state at now: a Sample in the ring and, when the
// weights version changed, a Version.
func (d *Dashboard) sample(ctx context.Context, now time.Time) {
	var cur *weights.Weights
	if d.o.Weights != nil {
		cur = d.o.Weights.Current()
	}
	info := d.versionInfo(cur)
	s := Sample{At: now, Clusters: d.clusterSamples(info)}
	if cur != nil {
		s.WeightsVersion = cur.Version()
		for _, c := range cur.Cells() {
			for _, p := range weights.Priorities {
				s.Shed.Planned[p] = max(s.Shed.Planned[p], c.Shed[p])
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.countDecisions(&s.Shed)
	if s.Shed.Truncated {
		d.o.Logger.WarnContext(ctx, "more decisions in one sampling interval than the decision log keeps: shedding is counted on the newest (raise extproc.decision_log_size)")
	}
	if cur != nil && (len(d.versions) == 0 || d.versions[len(d.versions)-1].Version != cur.Version()) {
		d.o.Logger.DebugContext(ctx, "weights version recorded", "version", cur.Version(), "policy", cur.Policy())
		d.versions = append(d.versions, newVersion(info, now))
		if n := len(d.versions) - d.o.MaxVersions; n > 0 {
			d.versions = append(d.versions[:0], d.versions[n:]...)
		}
	}
	if len(d.samples) < cap(d.samples) {
		d.samples = append(d.samples, s)
		return
	}
	d.samples[d.start] = s
	d.start = (d.start + 1) % len(d.samples)
}

// countDecisions fills the decision counts of the interval since the
// previous sample: the records the log stored since then, tallied by the
// log without copying them. The first sample only notes where the log
// is. Called with d.mu held.
func (d *Dashboard) countDecisions(s *ShedSample) {
	if d.o.Decisions == nil {
		return
	}
	after := decision.TallyStart
	if d.primed {
		after = d.tallied
	}
	t := d.o.Decisions.Tally(after)
	d.tallied, d.primed = t.Through, true
	if after == decision.TallyStart {
		return
	}
	s.Requests = t.Records
	s.Shed = t.ByReason["shed"] + t.ByReason["overloaded"]
	s.Rejected = t.Records - s.Shed - t.Routed()
	// Records evicted before they were counted (more decisions in one
	// interval than the log keeps): the counts are a lower bound.
	s.Truncated = t.Lost > 0
	if s.Requests > 0 {
		s.Rate = float64(s.Shed) / float64(s.Requests)
	}
}

// history returns the samples at or after since, oldest first.
func (d *Dashboard) history(since time.Time) []Sample {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Sample, 0, len(d.samples))
	for i := range d.samples {
		s := d.samples[(d.start+i)%len(d.samples)]
		if !s.At.Before(since) {
			out = append(out, s)
		}
	}
	return out
}

// downsample returns at most n samples of ss (n >= 2) spread evenly
// over it, the first and the last always kept; each kept sample's
// decision counts are the sums over the samples it stands for, so no
// request is lost from the shed rate.
func downsample(ss []Sample, n int) []Sample {
	if len(ss) <= n {
		return ss
	}
	out := make([]Sample, 0, n)
	from := 0 // first sample not yet summed
	for k := range n {
		i := k * (len(ss) - 1) / (n - 1)
		s := ss[i]
		s.Shed.Requests, s.Shed.Shed, s.Shed.Rejected = 0, 0, 0
		for _, x := range ss[from : i+1] {
			s.Shed.Requests += x.Shed.Requests
			s.Shed.Shed += x.Shed.Shed
			s.Shed.Rejected += x.Shed.Rejected
			s.Shed.Truncated = s.Shed.Truncated || x.Shed.Truncated
		}
		s.Shed.Rate = 0
		if s.Shed.Requests > 0 {
			s.Shed.Rate = float64(s.Shed.Shed) / float64(s.Shed.Requests)
		}
		out = append(out, s)
		from = i + 1
	}
	return out
}

// versionList returns up to n versions, newest first.
func (d *Dashboard) versionList(n int) []Version {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Version, 0, min(n, len(d.versions)))
	for i := len(d.versions) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, d.versions[i])
	}
	return out
}
