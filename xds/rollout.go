package xds

import (
	"context"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// canarySuffix marks the snapshot key of a source's canary Envoys.
const canarySuffix = "~canary"

// allTypes are the xDS types a snapshot carries.
var allTypes = []resource.Type{resource.ClusterType, resource.EndpointType, resource.RouteType, resource.ListenerType}

// nodeKey keys snapshots by source (node.cluster); with a canary share,
// the canaries of a source (a stable hash of their node id below the
// share) get their own key.
type nodeKey struct{ canaryPercent int }

func (k nodeKey) ID(n *corev3.Node) string {
	if isCanary(n.GetId(), k.canaryPercent) {
		return n.GetCluster() + canarySuffix
	}
	return n.GetCluster()
}

func isCanary(nodeID string, percent int) bool {
	if percent <= 0 {
		return false
	}
	h := fnv.New32a()
	h.Write([]byte(nodeID))
	return int(h.Sum32()%100) < percent
}

// CanaryNode reports whether an Envoy of this node id is one of its
// source's canaries at the given share: a stable hash of the id, so the
// same Envoys are canaries across restarts.
func CanaryNode(nodeID string, percent int) bool { return isCanary(nodeID, percent) }

// rollout is the state of one source's versions. Guarded by Server.mu.
type rollout struct {
	stable *cache.Snapshot // what the source's Envoys (non-canary) get
	canary *cache.Snapshot // what its canaries get; == stable unless pending
	// pending: the canaries run a newer version, soaking since since.
	pending bool
	since   time.Time
	// good is, per key, the snapshots some node of that key acknowledged
	// in full, oldest first (at most maxGoodSnap): the rollback targets.
	good map[string][]*cache.Snapshot
	// banned versions, by "type version": never sent again. banOrder
	// lists them oldest first; only the newest maxBanned are kept.
	banned   map[string]*RejectedVersion
	banOrder []string
}

func newRollout() *rollout {
	return &rollout{good: map[string][]*cache.Snapshot{}, banned: map[string]*RejectedVersion{}}
}

func typeVersion(typ resource.Type, version string) string { return shortType(typ) + " " + version }

// ban adds a banned version, forgetting the oldest past maxBanned (a
// version forgotten so may be sent again, and banned again); it returns
// the "type version" keys it forgot.
func (r *rollout) ban(v RejectedVersion) (forgot []string) {
	key := v.Type + " " + v.Version
	if _, ok := r.banned[key]; ok {
		return nil
	}
	r.banned[key] = &v
	r.banOrder = append(r.banOrder, key)
	for len(r.banOrder) > maxBanned {
		forgot = append(forgot, r.banOrder[0])
		delete(r.banned, r.banOrder[0])
		r.banOrder = slices.Delete(r.banOrder, 0, 1)
	}
	return forgot
}

// clean reports whether snap holds no banned version.
func (r *rollout) clean(snap *cache.Snapshot) bool {
	for _, typ := range allTypes {
		if _, bad := r.banned[typeVersion(typ, snap.GetVersion(typ))]; bad {
			return false
		}
	}
	return true
}

// remember records that a node of key acknowledged snap in full.
func (r *rollout) remember(key string, snap *cache.Snapshot) {
	g := r.good[key]
	if len(g) > 0 && g[len(g)-1] == snap {
		return
	}
	g = append(slices.DeleteFunc(g, func(s *cache.Snapshot) bool { return s == snap }), snap)
	if len(g) > maxGoodSnap {
		g = slices.Delete(g, 0, len(g)-maxGoodSnap)
	}
	r.good[key] = g
}

// target is the rollback target of key: the newest snapshot a node of
// key acknowledged in full that holds no banned version; nil if none.
func (r *rollout) target(key string) *cache.Snapshot {
	g := r.good[key]
	for i := len(g) - 1; i >= 0; i-- {
		if r.clean(g[i]) {
			return g[i]
		}
	}
	return nil
}

// scrub replaces, in snap, every type whose version is banned by the
// same type of fallback, so that a banned version is never sent again
// while the other types still move. It returns nil when it cannot (no
// fallback, or the result would not be consistent).
func (r *rollout) scrub(snap, fallback *cache.Snapshot) *cache.Snapshot {
	out := &cache.Snapshot{Resources: snap.Resources}
	changed := false
	for _, typ := range allTypes {
		if _, bad := r.banned[typeVersion(typ, snap.GetVersion(typ))]; !bad {
			continue
		}
		if fallback == nil {
			return nil
		}
		i := cache.GetResponseType(typ)
		out.Resources[i] = fallback.Resources[i]
		changed = true
	}
	if !changed {
		return snap
	}
	if out.Consistent() != nil {
		return nil
	}
	return out
}

// offer hands a newly built snapshot of source to the rollout: straight to
// every Envoy of the source, or to its canaries first. Called under mu.
//
// Each offer is a span "ilb.xds.push" with the source, the snapshot's
// versions and what became of it (ilb.xds.action: all, canary, unchanged
// or withheld).
func (s *Server) offer(ctx context.Context, source string, snap *cache.Snapshot, now time.Time) {
	ctx, span := s.tracer.Start(ctx, "ilb.xds.push", trace.WithAttributes(attribute.String("ilb.source", source)))
	defer span.End()
	span.SetAttributes(versionAttrs(snap)...)
	r := s.rollouts[source]
	if r == nil {
		r = newRollout()
		s.rollouts[source] = r
	}
	snap = r.scrub(snap, r.stable)
	if snap == nil {
		span.SetAttributes(attribute.String("ilb.xds.action", "withheld"))
		span.SetStatus(codes.Error, "holds a banned version, nothing to fall back on")
		s.log.WarnContext(ctx, "xds: new snapshot holds a version banned for the source and there is nothing to fall back on; not sent", "source", source)
		return
	}
	if r.stable != nil && sameVersions(snap, r.stable) && !r.pending {
		span.SetAttributes(attribute.String("ilb.xds.action", "unchanged"))
		return
	}
	if s.cfg.Envoy.Rollout.CanaryPercent == 0 || r.stable == nil {
		span.SetAttributes(attribute.String("ilb.xds.action", "all"))
		r.stable, r.canary, r.pending = snap, snap, false
		s.setKey(ctx, source, snap)
		s.setKey(ctx, source+canarySuffix, snap)
		return
	}
	// A newer version during a soak joins the rollout in progress: the
	// soak runs from the rollout's start (weights move every tick, so
	// restarting it would hold the fleet back for good) and promotion
	// still needs every canary to ACK the newest version.
	if !r.pending {
		r.since = now
	}
	r.canary, r.pending = snap, true
	span.SetAttributes(attribute.String("ilb.xds.action", "canary"))
	s.setKey(ctx, source+canarySuffix, snap)
	s.m.canary.WithLabelValues(source).Set(1)
	s.log.InfoContext(ctx, "xds: canary rollout started", "source", source, "routes", snap.GetVersion(resource.RouteType))
}

func (s *Server) setKey(ctx context.Context, key string, snap *cache.Snapshot) {
	if err := s.cache.SetSnapshot(ctx, key, snap); err != nil {
		s.log.WarnContext(ctx, "xds: answering watches after a new snapshot failed; Envoys get it on their next request", "key", key, "err", err)
	}
}

func sameVersions(a, b *cache.Snapshot) bool {
	for _, typ := range allTypes {
		if a.GetVersion(typ) != b.GetVersion(typ) {
			return false
		}
	}
	return true
}

// event is what a node said of a version.
type event struct {
	ref     nodeRef
	key     string // the node's snapshot key
	typ     resource.Type
	version string
	nack    *NACK // nil for an ACK
	// first: the node had not rejected this version of the type just
	// before (the NACK is logged and traced; a repeat is not).
	first bool
}

// Run follows the nodes' answers until ctx is done: an ACK of a whole
// snapshot makes it a rollback target of the node's key; every 250 ms, a
// canary version that every canary ACKed and that soaked is promoted,
// nodes gone for envoy.rollout.node_ttl are forgotten and the node
// gauges are refreshed. (NACKs are handled on their stream: see nacked.)
func (s *Server) Run(ctx context.Context) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.acks.wake:
			s.ackedAll(s.acks.take())
		case <-tick.C:
			s.tick(ctx, s.now())
		}
	}
}

// ackedAll handles a batch of ACKs (see acked) under one lock.
func (s *Server) ackedAll(batch []event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range batch {
		s.acked(e)
	}
}

// acked makes the snapshot in force for the node's key a rollback target
// once the node acknowledged all of it. O(1) in the number of nodes.
// Called under mu.
func (s *Server) acked(e event) {
	r := s.rollouts[sourceOf(e.key)]
	if r == nil {
		return
	}
	current := r.stable
	if strings.HasSuffix(e.key, canarySuffix) {
		current = r.canary
	}
	if current != nil && s.tracker.ackedAll(e.ref, versions(current)) {
		r.remember(e.key, current)
	}
}

// sourceOf is the source of a snapshot key.
func sourceOf(key string) string { return strings.TrimSuffix(key, canarySuffix) }

// tick stores and reads banned versions (Options.Bans), forgets the
// nodes past their TTL, pushes endpoint changes held
// for envoy.eds_min_interval, refreshes the node gauges and promotes
// soaked canary versions. O(nodes).
func (s *Server) tick(ctx context.Context, now time.Time) {
	s.syncBans(ctx, now)
	if n := s.tracker.sweep(now); n > 0 {
		s.log.InfoContext(ctx, "xds: nodes forgotten after envoy.rollout.node_ttl", "nodes", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushEndpoints(ctx, now)
	counts := s.tracker.census(s.inForce())
	for _, src := range s.cfg.Sources {
		held := 0
		if c := counts[src.Name]; c != nil {
			held = c.held
		}
		s.m.held.WithLabelValues(src.Name).Set(float64(held))
	}
	s.promote(ctx, now, counts)
}

// promote moves soaked canary versions to every Envoy of their source.
// Called under mu.
func (s *Server) promote(ctx context.Context, now time.Time, counts map[string]*census) {
	soak := s.cfg.Envoy.Rollout.Soak.Std()
	for source, r := range s.rollouts {
		if !r.pending || now.Sub(r.since) < soak {
			continue
		}
		canaries := 0
		if c := counts[source]; c != nil {
			if c.canariesAcked < c.canaries {
				continue // a canary has not taken it yet: keep waiting
			}
			canaries = c.canaries
		}
		r.stable, r.pending = r.canary, false
		_, span := s.tracer.Start(ctx, "ilb.xds.promote", trace.WithAttributes(attribute.String("ilb.source", source), attribute.Int("ilb.xds.canaries", canaries)))
		span.SetAttributes(versionAttrs(r.stable)...)
		span.End()
		s.setKey(ctx, source, r.stable)
		s.m.canary.WithLabelValues(source).Set(0)
		s.m.promotions.WithLabelValues(source).Inc()
		s.log.InfoContext(ctx, "xds: canary version promoted", "source", source, "canaries", canaries, "routes", r.stable.GetVersion(resource.RouteType))
	}
}
