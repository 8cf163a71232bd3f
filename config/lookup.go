package config

import "slices"

// The lookups below scan the lists: configurations have tens to a few
// thousand items and are read on the slow path only. Request-path code
// builds its own indexes from a validated Config.

// Source returns the source named name.
func (c *Config) Source(name string) (Source, bool) {
	for _, s := range c.Sources {
		if s.Name == name {
			return s, true
		}
	}
	return Source{}, false
}

// Cluster returns the engine cluster named name.
func (c *Config) Cluster(name string) (EngineCluster, bool) {
	for _, e := range c.Clusters {
		if e.Name == name {
			return e, true
		}
	}
	return EngineCluster{}, false
}

// Profile returns the profile named name.
func (c *Config) Profile(name string) (Profile, bool) {
	for _, p := range c.Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}

// TokenCosts are the prompt and output token costs of cluster e: its
// models' costs, averaged when it serves several (capacity is learned per
// cluster, from token counters that do not say which model a token was
// for).
func (c *Config) TokenCosts(e EngineCluster) (prompt, output float64) {
	n := 0
	for _, m := range c.Models {
		if e.Serves(m.Name) {
			prompt += m.PromptTokenCost
			output += m.OutputTokenCost
			n++
		}
	}
	if n == 0 {
		return 1, 4 // the defaults; a validated cluster serves a model
	}
	return prompt / float64(n), output / float64(n)
}

// Link returns the network link from region from to region to. A pair
// inside one region that the file omits is [DefaultIntraRegion].
func (c *Config) Link(from, to string) (Link, bool) {
	for _, l := range c.Network {
		if l.From == from && l.To == to {
			return l, true
		}
	}
	if from == to {
		l := DefaultIntraRegion
		l.From, l.To = from, to
		return l, true
	}
	return Link{}, false
}

// ResolveModel maps a model name or alias to its canonical name.
func (c *Config) ResolveModel(name string) (string, bool) {
	for _, m := range c.Models {
		if m.Name == name || slices.Contains(m.Aliases, name) {
			return m.Name, true
		}
	}
	return "", false
}

// Allows reports whether source s may be served in region (residency).
func (s Source) Allows(region string) bool {
	return len(s.AllowedRegions) == 0 || slices.Contains(s.AllowedRegions, region)
}

// Serves reports whether the cluster serves the canonical model.
func (e EngineCluster) Serves(model string) bool {
	return slices.Contains(e.Models, model)
}

// Reachable returns, in file order, the engine clusters a request of the
// canonical model from source s may be steered to: the eligible ones
// (Eligible) whose round trip from the source is within the model's TTFT
// budget, when it has one.
func (c *Config) Reachable(s Source, model string) []EngineCluster {
	var budget float64
	for _, m := range c.Models {
		if m.Name == model {
			budget = m.TTFTBudgetMs
		}
	}
	var out []EngineCluster
	for _, e := range c.Eligible(s, model) {
		if l, _ := c.Link(s.Region, e.Region); budget > 0 && l.RTTMs > budget {
			continue
		}
		out = append(out, e)
	}
	return out
}

// Eligible returns, in file order, the engine clusters that serve the
// canonical model in a region the source allows.
func (c *Config) Eligible(s Source, model string) []EngineCluster {
	var out []EngineCluster
	for _, e := range c.Clusters {
		if e.Serves(model) && s.Allows(e.Region) {
			out = append(out, e)
		}
	}
	return out
}

// ListenerOf returns the address the source's Envoys listen on: its own
// listener, else envoy.listener.
func (c *Config) ListenerOf(s Source) string {
	if s.Listener != "" {
		return s.Listener
	}
	return c.Envoy.Listener
}

// FollowedStreamLimit is the responses ILB may follow at once:
// MaxFollowedStreams, or a quarter of MaxStreams (at least 1) when it is
// 0.
func (e ExtProc) FollowedStreamLimit() int {
	if e.MaxFollowedStreams > 0 {
		return e.MaxFollowedStreams
	}
	return max(e.MaxStreams/4, 1)
}

// PeerStreamLimit is the streams one peer may hold: MaxStreamsPerPeer,
// or half of MaxStreams (at least 1) when it is 0.
func (e ExtProc) PeerStreamLimit() int {
	if e.MaxStreamsPerPeer > 0 {
		return e.MaxStreamsPerPeer
	}
	return max(e.MaxStreams/2, 1)
}

// TokenCost is the token-cost units of a request of m with prompt and
// output tokens: prompt × PromptTokenCost + output × OutputTokenCost, the
// one formula of demand and capacity.
func (m Model) TokenCost(prompt, output float64) float64 {
	return prompt*m.PromptTokenCost + output*m.OutputTokenCost
}
