package xds

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
)

// NodeStatus is what one Envoy (node id, per source) has acknowledged and
// rejected. Strings from the Envoy are bounded: the id to 256 bytes (a
// longer one keeps its head, its length and a hash), Envoy's messages to
// 1 KiB.
type NodeStatus struct {
	ID      string `json:"id"`
	Cluster string `json:"cluster"`
	Streams int    `json:"streams"`
	// Acked maps a resource type (cluster, endpoint, route, listener) to
	// the last version the node acknowledged.
	Acked map[string]string `json:"acked"`
	// LastNACK is the last version the node rejected, if any.
	LastNACK *NACK `json:"last_nack,omitempty"`
	// Canary: the node is one of its source's canaries.
	Canary bool `json:"canary,omitempty"`
	// Held lists the types on which the (connected) node keeps an older
	// version because it rejected the one in force for it, below the ban
	// quorum: it gets nothing new of that type until the content changes.
	Held []Hold `json:"held,omitempty"`
	// Left is when the node's last stream closed (zero while connected);
	// it is forgotten envoy.rollout.node_ttl later.
	Left time.Time `json:"left,omitzero"`
}

// Hold is one type on which a node keeps an older version.
type Hold struct {
	Type string `json:"type"`
	// Rejected is the version in force that the node rejected; Keeps the
	// version it runs (its last acknowledged, "" if none).
	Rejected string    `json:"rejected"`
	Keeps    string    `json:"keeps"`
	Since    time.Time `json:"since"`
	Message  string    `json:"message"`
}

// NACK is a rejected version with Envoy's error detail (bounded to 1 KiB).
type NACK struct {
	Node    string    `json:"node"`
	Type    string    `json:"type"`
	Version string    `json:"version"`
	Message string    `json:"message"`
	At      time.Time `json:"at"`
}

// RolloutStatus is where one source's rollout stands.
type RolloutStatus struct {
	Source string `json:"source"`
	// Stable and Canary are the versions, per type, that the source's
	// Envoys and its canaries are sent; they differ while Pending.
	Stable  map[string]string `json:"stable"`
	Canary  map[string]string `json:"canary,omitempty"`
	Pending bool              `json:"pending"`
	// LastGood are the versions of the newest snapshot an Envoy of the
	// source (not a canary) acknowledged in full that holds no banned
	// version: where a ban rolls back to.
	LastGood map[string]string `json:"last_good,omitempty"`
	Since    time.Time         `json:"since,omitzero"`
	// Connected counts the source's Envoys with an open stream; Held
	// those of them that keep an older version (see NodeStatus.Held).
	Connected int `json:"connected"`
	Held      int `json:"held"`
	// Rejected are the versions banned for the source, never sent again
	// (the newest 64).
	Rejected []RejectedVersion `json:"rejected,omitempty"`
	// Known counts the source's Envoys ILB knows (connected or gone for
	// less than envoy.rollout.node_ttl); Nodes lists the first
	// RolloutNodes of them by id (all of them in Nodes(NodeQuery)).
	Known int          `json:"known"`
	Nodes []NodeStatus `json:"nodes"`
}

// RolloutNodes is how many nodes Rollouts lists per source.
const RolloutNodes = 100

// Bounds of a node listing: DefaultNodeLimit when the query sets none,
// never more than MaxNodeLimit.
const (
	DefaultNodeLimit = 1000
	MaxNodeLimit     = 10000
)

// NodeQuery selects the nodes a listing returns: those of Source (all
// sources when empty), at most Limit (<= 0: DefaultNodeLimit; capped at
// MaxNodeLimit), sorted by source then id; with a Source, After starts
// the page after that node id (the next page).
type NodeQuery struct {
	Source string
	Limit  int
	After  string
}

// RejectedVersion is a version banned for a source: the NACK that banned
// it, and why.
type RejectedVersion struct {
	NACK
	// By is "canary" (a canary rejected it during a canary rollout) or
	// "quorum" (Rejectors of the Connected Envoys of the source had
	// rejected it, more than envoy.rollout.nack_quorum of them).
	By        string `json:"by"`
	Rejectors int    `json:"rejectors,omitempty"`
	Connected int    `json:"connected,omitempty"`
}

// Nodes lists the first MaxNodeLimit Envoys ILB knows (see ListNodes).
func (s *Server) Nodes() []NodeStatus {
	page, _ := s.ListNodes(NodeQuery{Limit: MaxNodeLimit})
	return page
}

// NodeCounts are how many Envoys ILB knows (connected, or gone and not
// yet forgotten) and how many of them are connected. O(voters).
func (s *Server) NodeCounts() (known, connected int) {
	t := s.tracker
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, votes := range t.connected {
		for _, n := range votes {
			connected += n
		}
	}
	return len(t.records), connected
}

// ListNodes reports the Envoys ILB knows that q selects (connected, or gone
// for less than envoy.rollout.node_ttl; at most the newest 1,024 gone),
// sorted by source, then id, and how many q's source has in all. The
// tracker's lock is held for one pass over the nodes, and only the
// listed ones are copied.
func (s *Server) ListNodes(q NodeQuery) (page []NodeStatus, total int) {
	s.mu.Lock()
	in := s.inForce()
	s.mu.Unlock()
	return s.tracker.nodes(in, s.now(), q)
}

// Rollouts reports every source's rollout, sources in configuration
// order, with their known nodes.
func (s *Server) Rollouts() []RolloutStatus {
	s.mu.Lock()
	in := s.inForce()
	var out []RolloutStatus
	for _, src := range s.cfg.Sources {
		st := RolloutStatus{Source: src.Name}
		if r := s.rollouts[src.Name]; r != nil {
			st.Stable = versions(r.stable)
			if g := r.target(src.Name); g != nil {
				st.LastGood = versions(g)
			}
			if r.pending {
				st.Pending, st.Since, st.Canary = true, r.since, versions(r.canary)
			}
			for _, key := range r.banOrder {
				st.Rejected = append(st.Rejected, *r.banned[key])
			}
		}
		out = append(out, st)
	}
	s.mu.Unlock()
	now := s.now()
	counts := s.tracker.census(in)
	for i := range out {
		out[i].Nodes, out[i].Known = s.tracker.nodes(in, now, NodeQuery{Source: out[i].Source, Limit: RolloutNodes})
		if c := counts[out[i].Source]; c != nil {
			out[i].Connected, out[i].Held = c.connected, c.held
		}
	}
	return out
}

// inForce maps every snapshot key to the versions (type -> version) its
// nodes are sent. Called under mu.
func (s *Server) inForce() map[string]map[string]string {
	out := make(map[string]map[string]string, 2*len(s.rollouts))
	for source, r := range s.rollouts {
		out[source] = versions(r.stable)
		out[source+canarySuffix] = versions(r.canary)
	}
	return out
}

func versions(snap *cache.Snapshot) map[string]string {
	if snap == nil {
		return nil
	}
	out := make(map[string]string, len(allTypes))
	for _, typ := range allTypes {
		out[shortType(typ)] = snap.GetVersion(typ)
	}
	return out
}

// census counts one source's nodes against the versions in force.
type census struct {
	connected int // nodes with an open stream
	held      int // connected nodes holding a rejected version in force for them
	// canaries (connected) and those of them that acknowledged every
	// version in force for the canary key.
	canaries, canariesAcked int
	// rejectors counts, per "type version" in force, the connected nodes
	// that rejected it (their last rejection of that type).
	rejectors map[string]int
}

// census counts every source's nodes (see census); in maps snapshot keys
// to their versions in force. O(nodes).
func (t *tracker) census(in map[string]map[string]string) map[string]*census {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]*census{}
	for _, n := range t.records {
		if n.streams == 0 {
			continue
		}
		c := out[n.ref.source]
		if c == nil {
			c = &census{rejectors: map[string]int{}}
			out[n.ref.source] = c
		}
		c.connected++
		if n.canary {
			c.canaries++
			if v := in[n.ref.source+canarySuffix]; len(v) > 0 && ackedEvery(n.acked, v) {
				c.canariesAcked++
			}
		}
		held := false
		for typ, r := range n.rejected {
			if in[n.key][typ] == r.Version {
				c.rejectors[typ+" "+r.Version]++
				held = true
			}
		}
		if held {
			c.held++
		}
	}
	return out
}

// nodes are the statuses of the records not past their TTL that q
// selects, with what holds each against in (snapshot key -> versions in
// force), and how many match q but its limit and After. The lock is held
// for one pass over the records and then to copy the listed ones; the
// sort (by the records' immutable names) runs without it.
func (t *tracker) nodes(in map[string]map[string]string, now time.Time, q NodeQuery) ([]NodeStatus, int) {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultNodeLimit
	}
	limit = min(limit, MaxNodeLimit)
	t.mu.Lock()
	var picked []*nodeState
	total := 0
	for _, n := range t.records {
		if t.expired(n, now) || q.Source != "" && n.ref.source != q.Source {
			continue
		}
		total++
		if q.Source != "" && q.After != "" && n.ref.id <= q.After { // ids order pages within a source
			continue
		}
		picked = append(picked, n)
	}
	t.mu.Unlock()
	slices.SortFunc(picked, func(a, b *nodeState) int {
		return cmp.Or(cmp.Compare(a.ref.source, b.ref.source), cmp.Compare(a.ref.id, b.ref.id))
	})
	picked = picked[:min(len(picked), limit)]
	out := make([]NodeStatus, 0, len(picked))
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range picked {
		st := NodeStatus{
			ID: n.ref.id, Cluster: n.ref.source, Streams: n.streams, Canary: n.canary,
			Acked: maps.Clone(n.acked), Left: n.left,
		}
		if n.lastNACK != nil {
			nk := *n.lastNACK
			st.LastNACK = &nk
		}
		for typ, r := range n.rejected {
			if n.streams > 0 && in[n.key][typ] == r.Version {
				st.Held = append(st.Held, Hold{Type: typ, Rejected: r.Version, Keeps: n.acked[typ], Since: r.At, Message: r.Message})
			}
		}
		slices.SortFunc(st.Held, func(a, b Hold) int { return cmp.Compare(a.Type, b.Type) })
		out = append(out, st)
	}
	return out, total
}
