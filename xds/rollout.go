package xds

import (
	"context"
	"hash/fnv"
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

// sourceOf is the source of a snapshot key.
func sourceOf(key string) string { return strings.TrimSuffix(key, canarySuffix) }

// rollout is the state of one source's versions. Guarded by Server.mu.
type rollout struct {
	stable *cache.Snapshot // what the source's Envoys (non-canary) get
	canary *cache.Snapshot // what its canaries get; == stable unless pending
	// pending: the canaries run a newer version, soaking since since.
	pending bool
	since   time.Time
	// lastGood is, per key, the last snapshot some node of that key
	// acknowledged in full: the rollback target.
	lastGood map[string]*cache.Snapshot
	// rejected versions, per "type version": never sent again.
	rejected map[string]NACK
}

func newRollout() *rollout {
	return &rollout{lastGood: map[string]*cache.Snapshot{}, rejected: map[string]NACK{}}
}

func typeVersion(typ resource.Type, version string) string { return shortType(typ) + " " + version }

// scrub replaces, in snap, every type whose version was rejected by the
// same type of fallback, so that a rejected version is never sent again
// while the other types still move. It returns nil when it cannot (no
// fallback, or the result would not be consistent).
func (r *rollout) scrub(snap, fallback *cache.Snapshot) *cache.Snapshot {
	out := &cache.Snapshot{Resources: snap.Resources}
	changed := false
	for _, typ := range allTypes {
		if _, bad := r.rejected[typeVersion(typ, snap.GetVersion(typ))]; !bad {
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
		span.SetStatus(codes.Error, "holds a version Envoy rejected, nothing to fall back on")
		s.log.WarnContext(ctx, "xds: new snapshot holds a version Envoy rejected and there is nothing to fall back on; not sent", "source", source)
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
	s.tracker.mCanary.WithLabelValues(source).Set(1)
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

// ackedAll reports whether a node acknowledged every type of snap.
func ackedAll(n NodeStatus, snap *cache.Snapshot) bool {
	for _, typ := range allTypes {
		if n.Acked[shortType(typ)] != snap.GetVersion(typ) {
			return false
		}
	}
	return true
}

// event is what a node said of a version, for the rollout loop.
type event struct {
	node    *corev3.Node
	typ     resource.Type
	version string
	nack    *NACK
}

// Run follows the nodes' answers until ctx is done: a NACK rolls the key
// that sent the version back to its last good snapshot and bans the
// version; an ACK of a whole snapshot makes it the key's last good one; a
// canary version that every canary ACKed and that soaked is promoted.
func (s *Server) Run(ctx context.Context) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-s.events:
			s.handle(ctx, e)
		case <-tick.C:
			s.promote(ctx, time.Now())
		}
	}
}

func (s *Server) handle(ctx context.Context, e event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := nodeKey{s.cfg.Envoy.Rollout.CanaryPercent}.ID(e.node)
	source := sourceOf(key)
	r := s.rollouts[source]
	if r == nil {
		return
	}
	current := r.stable
	if strings.HasSuffix(key, canarySuffix) {
		current = r.canary
	}
	if e.nack == nil {
		for _, n := range s.tracker.nodes() {
			if n.ID == e.node.GetId() && current != nil && ackedAll(n, current) {
				r.lastGood[key] = current
			}
		}
		return
	}
	ctx, span := s.nackSpan(ctx, source, key, e)
	defer span.End()
	r.rejected[typeVersion(e.typ, e.version)] = *e.nack
	s.tracker.mRejected.WithLabelValues(source).Set(float64(len(r.rejected)))
	if current == nil || current.GetVersion(e.typ) != e.version {
		span.AddEvent("older version: nothing to undo")
		return // an older version: nothing in force to undo
	}
	s.tracker.mRollbacks.WithLabelValues(source).Inc()
	if strings.HasSuffix(key, canarySuffix) && r.pending {
		span.AddEvent("canary rollout held; canaries rolled back to stable", trace.WithAttributes(versionAttrs(r.stable)...))
		// The canary failed: hold the rollout, canaries back to stable.
		r.canary, r.pending = r.stable, false
		s.tracker.mCanary.WithLabelValues(source).Set(0)
		s.setKey(ctx, key, r.stable)
		s.log.WarnContext(ctx, "xds: canary rejected a version; rollout held, canaries rolled back",
			"source", source, "node", e.node.GetId(), "type", shortType(e.typ), "version", e.version, "error", e.nack.Message)
		return
	}
	good := r.lastGood[key]
	if good == nil || good == current {
		span.AddEvent("kept: no earlier acknowledged version")
		s.log.ErrorContext(ctx, "xds: a node rejected the version in force and no earlier version of its key was acknowledged; kept",
			"source", source, "node", e.node.GetId(), "type", shortType(e.typ), "version", e.version, "error", e.nack.Message)
		return
	}
	r.stable, r.canary, r.pending = good, good, false
	span.AddEvent("rolled back to the last acknowledged snapshot", trace.WithAttributes(versionAttrs(good)...))
	s.setKey(ctx, source, good)
	s.setKey(ctx, source+canarySuffix, good)
	s.log.WarnContext(ctx, "xds: a node rejected a version; source rolled back to its last acknowledged snapshot",
		"source", source, "node", e.node.GetId(), "type", shortType(e.typ), "version", e.version, "error", e.nack.Message,
		"back_to_routes", good.GetVersion(resource.RouteType))
}

// promote moves soaked canary versions to every Envoy of their source.
func (s *Server) promote(ctx context.Context, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	soak := s.cfg.Envoy.Rollout.Soak.Std()
	nodes := s.tracker.nodes()
	for source, r := range s.rollouts {
		if !r.pending || now.Sub(r.since) < soak {
			continue
		}
		canaries, acked := 0, 0
		for _, n := range nodes {
			if n.Cluster == source && n.Streams > 0 && isCanary(n.ID, s.cfg.Envoy.Rollout.CanaryPercent) {
				canaries++
				if ackedAll(n, r.canary) {
					acked++
				}
			}
		}
		if acked < canaries {
			continue // a canary has not taken it yet: keep waiting
		}
		r.stable, r.pending = r.canary, false
		_, span := s.tracer.Start(ctx, "ilb.xds.promote", trace.WithAttributes(attribute.String("ilb.source", source), attribute.Int("ilb.xds.canaries", canaries)))
		span.SetAttributes(versionAttrs(r.stable)...)
		span.End()
		s.setKey(ctx, source, r.stable)
		s.tracker.mCanary.WithLabelValues(source).Set(0)
		s.tracker.mPromotions.WithLabelValues(source).Inc()
		s.log.InfoContext(ctx, "xds: canary version promoted", "source", source, "canaries", canaries, "routes", r.stable.GetVersion(resource.RouteType))
	}
}

// CanaryNode reports whether an Envoy of this node id is one of its
// source's canaries at the given share: a stable hash of the id, so the
// same Envoys are canaries across restarts.
func CanaryNode(nodeID string, percent int) bool { return isCanary(nodeID, percent) }
