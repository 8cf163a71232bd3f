package extproc

import (
	"slices"
	"time"

	"github.com/ilbproject/ilb/live"
)

// SetLive swaps in the live state.
// Replica pickers forget the replicas no longer listed for their
// cluster, and the index of those listed unhealthy (a cluster the live
// state does not mention keeps what it has).
func (s *Server) SetLive(l *live.State) {
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
			return slices.ContainsFunc(cl.Replicas, func(r live.Replica) bool { return r.Address == addr })
		})
		for _, r := range cl.Replicas {
			if r.Out == live.OutUnhealthy {
				pk.ForgetCache(r.Address)
			}
		}
	}
}

// liveAt returns the live state, or nil when there is none or it is older
// than the TTL at now.
func (s *Server) liveAt(now time.Time) *live.State {
	l := s.liveState.Load()
	if l == nil || now.Sub(l.At) > s.opts.Config.ExtProc.LiveTTL.Std() {
		return nil
	}
	return l
}
