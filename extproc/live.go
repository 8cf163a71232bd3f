package extproc

import (
	"slices"
	"time"
)

// Live is the engines' state as the fast loop uses it: which clusters are
// out and why, which are saturated. It is immutable; the signals monitor
// publishes a new one on every change (Server.SetLive).
type Live struct {
	// At is when the signals were observed; a Live older than
	// extproc.live_ttl is ignored, so nothing stays excluded or shed
	// after the signals stop.
	At       time.Time
	Clusters map[string]ClusterLive
}

// ClusterLive is one engine cluster's live state.
type ClusterLive struct {
	// Excluded says why no request may go there now ("" when it may):
	// no ready replica, every replica unhealthy...
	Excluded string `json:"excluded,omitempty"`
	// Saturated: every serving replica has a long queue or a full KV
	// cache; sheddable requests are refused when all their clusters are.
	Saturated bool `json:"saturated,omitempty"`
	// Pressure is the cluster's queued requests per running request,
	// waiting / max(running, 1) over its serving replicas whose load is
	// known (PressureKnown: at least one); graded steering moves requests
	// off clusters with more of it (package route).
	Pressure      float64 `json:"pressure,omitempty"`
	PressureKnown bool    `json:"pressure_known,omitempty"`
	// TTFT is the time to first token the cluster's engines give now, in
	// seconds (their TTFT histograms and queues; see signals.Cluster);
	// steering compares it, plus the round trip, across the clusters a
	// request may go to. TTFTKnown: the engines export the histogram and
	// gave a first token.
	TTFT      float64 `json:"ttft,omitempty"`
	TTFTKnown bool    `json:"ttft_known,omitempty"`
	// FirstTokensPerSecond is the rate at which its engines give first
	// tokens (0: unknown or none): with the requests ext_proc sent there
	// that await their response, Little's law predicts the TTFT of the
	// next one before the engines' metrics show a burst.
	FirstTokensPerSecond float64 `json:"first_tokens_per_second,omitempty"`
	// Replicas are the cluster's replicas as discovered, in address
	// order. Those with Out == "" (ready, warming, stale or not probed
	// yet) are the candidates of replica picking; draining and unhealthy
	// ones are listed with Out saying so and never picked; a replica no
	// longer listed has left the cluster, and replica picking forgets it.
	Replicas []ReplicaLive `json:"replicas,omitempty"`
}

// ReplicaLive is one serving replica.
type ReplicaLive struct {
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
}

// OutUnhealthy is ReplicaLive.Out for a replica failing its probes (the
// signals monitor's state name): its replica picker forgets what it
// believed the replica's prefix cache held.
const OutUnhealthy = "unhealthy"

// SetLive swaps in the live state.
// Replica pickers forget the replicas no longer listed for their
// cluster, and the index of those listed unhealthy (a cluster the live
// state does not mention keeps what it has).
func (s *Server) SetLive(l *Live) {
	s.liveState.Store(l)
	if l == nil {
		return
	}
	for name, pk := range s.pickers {
		cl, ok := l.Clusters[name]
		if !ok {
			continue
		}
		// A replica no longer listed left the cluster: forgotten, index
		// and load. One listed unhealthy may come back restarted at the
		// same address, its engine's prefix cache empty: its index is
		// forgotten, its load kept (its requests may still run there). A
		// draining replica keeps its cache and is kept.
		pk.Retain(func(addr string) bool {
			return slices.ContainsFunc(cl.Replicas, func(r ReplicaLive) bool { return r.Address == addr })
		})
		for _, r := range cl.Replicas {
			if r.Out == OutUnhealthy {
				pk.ForgetCache(r.Address)
			}
		}
	}
}

// live returns the live state, or nil when there is none or it is older
// than the TTL at now.
func (s *Server) live(now time.Time) *Live {
	l := s.liveState.Load()
	if l == nil || now.Sub(l.At) > s.opts.Config.ExtProc.LiveTTL.Std() {
		return nil
	}
	return l
}
