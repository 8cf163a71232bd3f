package signals

import (
	"slices"
	"strings"
	"time"
)

// publish builds a snapshot at now, swaps it in and updates the gauges.
// After a state change (m.changed) it calls OnChange when notify is set.
func (m *Monitor) publish(now time.Time, notify bool) {
	s := m.build(now)
	m.snap.Store(s)
	capacity := map[string]float64{}
	for name, st := range s.ClusterStates(m.cfg) {
		capacity[name] = st.Capacity
	}
	m.prom.observe(s, capacity)
	m.lastPublish, m.dirty = now, false
	if !m.changed {
		return
	}
	m.changed = false
	var health []string
	for i, cl := range m.clusters {
		c := s.Clusters[cl.cfg.Name]
		serving := c.Ready + c.Warming + c.Stale
		// Saturation is not health: the controller's capacity does not
		// depend on it (the fast loop reads it from the snapshot), so a
		// flapping saturation mark must not trigger controller ticks.
		if serving != m.lastServing[i] {
			health = append(health, cl.cfg.Name)
		}
		m.lastServing[i] = serving
	}
	if notify && m.onChange != nil {
		m.onChange(s, health)
	}
}

// build assembles the snapshot of every replica at now.
func (m *Monitor) build(now time.Time) *Snapshot {
	n := 0
	for _, cl := range m.clusters {
		n += len(cl.replicas)
	}
	s := &Snapshot{At: now, Replicas: make([]Replica, 0, n), Clusters: make(map[string]Cluster, len(m.clusters))}
	if m.blind != nil {
		b := *m.blind
		s.Blind = &b
	}
	for _, cl := range m.clusters {
		start := len(s.Replicas)
		for _, r := range cl.replicas {
			s.Replicas = append(s.Replicas, m.view(r, now))
		}
		reps := s.Replicas[start:]
		slices.SortFunc(reps, func(a, b Replica) int { return strings.Compare(a.Address, b.Address) })
		c := summarize(cl.cfg.Name, reps)
		c.DiscoveryError, c.DiscoveryErrorSince = cl.discErr, cl.discErrSince
		s.Clusters[cl.cfg.Name] = c
	}
	return s
}

// view is r as published at now.
func (m *Monitor) view(r *replica, now time.Time) Replica {
	return Replica{
		Cluster: r.cl.cfg.Name, Address: r.addr, Zone: r.zone,
		State: r.state, Reason: r.reason, Since: r.since,
		Ramp: m.ramp(r, now), Saturated: r.saturated,
		LastScrape: r.lastGood, LastError: r.lastErr,
		Metrics: r.metrics, Transitions: r.transitions,
	}
}

// ramp is the share of a ready replica r counts for at now.
func (m *Monitor) ramp(r *replica, now time.Time) float64 {
	switch r.state {
	case StateReady, StateStale:
		return 1
	case StateWarming:
		return WarmupRamp(now.Sub(r.warmStart), m.sig.Warmup.Std())
	}
	return 0
}

// WarmupRamp is the share of a ready replica's capacity a replica that
// began warming up elapsed ago counts for: 10% at once, rising linearly
// to 100% after warmup (1 when warmup is not positive).
func WarmupRamp(elapsed, warmup time.Duration) float64 {
	if warmup <= 0 {
		return 1
	}
	f := float64(elapsed) / float64(warmup)
	return 0.1 + 0.9*min(max(f, 0), 1)
}

// NewSnapshot assembles the snapshot at at of the replicas given by
// cluster (in configuration order), as the monitor publishes it: each
// cluster's replicas sorted by address and summarised (see [Cluster]),
// with no discovery error and not blind. It is how a simulated fleet —
// the routing benchmark's — says what ILB's monitor would see: every
// replica's State, Ramp, Saturated (config.Signals.Saturated of its
// metrics), LastScrape, LastError and Metrics as the monitor sets them.
// The replicas' slices are copied.
func NewSnapshot(at time.Time, names []string, replicas [][]Replica) *Snapshot {
	n := 0
	for _, reps := range replicas {
		n += len(reps)
	}
	s := &Snapshot{At: at, Replicas: make([]Replica, 0, n), Clusters: make(map[string]Cluster, len(names))}
	for i, name := range names {
		start := len(s.Replicas)
		if i < len(replicas) {
			s.Replicas = append(s.Replicas, replicas[i]...)
		}
		reps := s.Replicas[start:]
		for j := range reps {
			reps[j].Cluster = name
		}
		slices.SortStableFunc(reps, func(a, b Replica) int { return strings.Compare(a.Address, b.Address) })
		s.Clusters[name] = summarize(name, reps)
	}
	return s
}

// summarize aggregates a cluster's replicas (see [Cluster]).
func summarize(name string, reps []Replica) Cluster {
	c := Cluster{Name: name}
	serving, kvN := 0, 0
	for _, r := range reps {
		switch r.State {
		case StateReady:
			c.Ready++
		case StateWarming:
			c.Warming++
			c.Ramps = append(c.Ramps, r.Ramp)
		case StateDraining:
			c.Draining++
		case StateUnhealthy:
			c.Unhealthy++
		case StateStale:
			c.Stale++
		case StateStarting:
			c.Starting++
		}
		if !r.State.serving() {
			continue
		}
		serving++
		if serving == 1 || r.LastScrape.Before(c.OldestScrape) {
			c.OldestScrape = r.LastScrape
		}
		if r.Saturated {
			c.SaturatedReplicas++
		}
		if r.State == StateStale || r.LastScrape.IsZero() {
			continue // load unknown
		}
		c.LoadKnown++
		c.Waiting += r.Metrics.Waiting
		c.Running += r.Metrics.Running
		c.TokensPerSecond += r.Metrics.TokensPerSecond
		if r.Metrics.TTFTKnown {
			c.TTFTKnown++
			c.FirstTokensPerSecond += r.Metrics.FirstTokensPerSecond
			c.SlowFirstTokensPerSecond += r.Metrics.SlowFirstTokensPerSecond
		}
		if r.Metrics.RatesKnown {
			c.RatesKnown++
			c.PromptTokensPerSecond += r.Metrics.PromptTokensPerSecond
			c.GenerationTokensPerSecond += r.Metrics.GenerationTokensPerSecond
		}
		if r.Metrics.KVKnown {
			c.KVUsage += r.Metrics.KVUsage
			kvN++
		}
	}
	if kvN > 0 {
		c.KVUsage /= float64(kvN)
		c.KVKnown = true
	}
	if mean, ok := clusterTTFT(reps); ok {
		c.TTFTSeconds, c.TTFTSecondsKnown = TTFTNow(mean, c.Waiting, c.FirstTokensPerSecond), true
		if c.FirstTokensPerSecond > 0 && c.PromptTokensPerSecond > 0 {
			perFirst := c.PromptTokensPerSecond / c.FirstTokensPerSecond
			c.PrefillSecondsPerToken = max(mean-c.Waiting/c.FirstTokensPerSecond, 0) / perFirst
			c.PrefillKnown = true
		}
	}
	c.Saturated = serving > 0 && c.SaturatedReplicas == serving
	return c
}

// clusterTTFT is the mean TTFT its serving replicas with known load
// measured: weighted by their first tokens, or the plain mean of their
// last ones when none came (see Cluster.TTFTSeconds).
func clusterTTFT(reps []Replica) (float64, bool) {
	var weighted, plain, meanRate float64
	n := 0
	for _, r := range reps {
		if !r.State.serving() || r.State == StateStale || r.LastScrape.IsZero() || !r.Metrics.TTFTMeanKnown {
			continue
		}
		weighted += r.Metrics.TTFTMeanSeconds * r.Metrics.FirstTokensPerSecond
		meanRate += r.Metrics.FirstTokensPerSecond
		plain += r.Metrics.TTFTMeanSeconds
		n++
	}
	if n == 0 {
		return 0, false
	}
	if meanRate > 0 {
		return weighted / meanRate, true
	}
	return plain / float64(n), true
}

// TTFTNow is the time to first token a cluster's engines give now, in
// seconds: the larger of their measured mean TTFT and the wait of their
// queue — waiting requests over the rate at which requests get their
// first token (Little's law), or one a second when none did.
func TTFTNow(mean, waiting, firstTokensPerSecond float64) float64 {
	wait := waiting
	if firstTokensPerSecond > 0 {
		wait = waiting / firstTokensPerSecond
	}
	return max(mean, wait)
}
