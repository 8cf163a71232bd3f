package xds

import (
	"context"
	"strings"

	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// nacked decides what a node's rejection (NACK) of a version does. No
// single node moves what the rest of its source gets:
//
//   - A version no longer in force for the node's key changes nothing:
//     the node is being sent a newer one.
//   - A canary that rejects its canary version during a canary rollout (a
//     version the other Envoys do not run yet) holds the rollout: the
//     version is banned for the source and the canaries go back to
//     stable.
//   - Otherwise the version is banned for the source (never sent again;
//     later snapshots keep the last good version of that type) and the
//     source rolled back to its newest snapshot that a node acknowledged
//     in full and that holds no banned version, only when more than
//     envoy.rollout.nack_quorum × connected (and at least one) of the
//     source's connected voters (Options.Voter: the peers of the nodes
//     with an open stream, one vote however many node ids a peer claims)
//     rejected it: a node of theirs last rejected that type at this
//     version. The count is taken when a NACK arrives, over the nodes
//     connected then.
//   - Below the quorum, only the node is held: Envoy keeps the version it
//     last accepted, and the holding cache does not send that node the
//     version it rejected again; it gets something new of that type when
//     its key's content changes (ilb_xds_nodes_held, NodeStatus.Held).
//
// A node's first rejection of a version is logged (WARN) and traced
// ("ilb.xds.nack"); a repeat (after a reconnection) is not, unless it
// bans the version. Runs on the stream's goroutine, before go-control-plane
// serves the NACK's request, so a rollback lands before it.
func (s *Server) nacked(ctx context.Context, e event) {
	source, typ := e.ref.source, shortType(e.typ)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rollouts[source]
	var current *cache.Snapshot
	canaryKey := strings.HasSuffix(e.key, canarySuffix)
	if r != nil {
		current = r.stable
		if canaryKey {
			current = r.canary
		}
	}
	if current == nil || current.GetVersion(e.typ) != e.version {
		if e.first {
			_, span := s.nackSpan(ctx, e)
			span.AddEvent("older version: nothing to undo")
			span.End()
		}
		s.log.DebugContext(ctx, "xds: an Envoy rejected a version no longer in force", "source", source, "node", e.ref.id, "type", typ, "version", e.version)
		return
	}
	attrs := []any{"source", source, "node", e.ref.id, "type", typ, "version", e.version, "error", e.nack.Message}
	if canaryKey && r.pending && r.stable.GetVersion(e.typ) != e.version {
		ctx, span := s.nackSpan(ctx, e)
		defer span.End()
		span.AddEvent("canary rollout held; canaries rolled back to stable", trace.WithAttributes(versionAttrs(r.stable)...))
		s.banned(source, r, RejectedVersion{NACK: *e.nack, By: "canary", Rejectors: 1})
		r.canary, r.pending = r.stable, false
		s.m.canary.WithLabelValues(source).Set(0)
		s.m.rollbacks.WithLabelValues(source).Inc()
		s.setKey(ctx, e.key, r.stable)
		s.log.WarnContext(ctx, "xds: canary rejected a version; rollout held, canaries rolled back", attrs...)
		return
	}

	in := map[string]map[string]string{source: versions(r.stable), source + canarySuffix: versions(r.canary)}
	rejectors, connected := s.tracker.quorumCount(source, e.typ, e.version, in)
	q := s.cfg.Envoy.Rollout.NACKQuorum
	attrs = append(attrs, "rejectors", rejectors, "connected", connected, "nack_quorum", q)
	_, banned := r.banned[typeVersion(e.typ, e.version)]
	if banned || !quorumReached(rejectors, connected, q) {
		if e.first {
			_, span := s.nackSpan(ctx, e)
			span.AddEvent("node held: below the ban quorum", trace.WithAttributes(
				attribute.Int("ilb.xds.rejectors", rejectors), attribute.Int("ilb.xds.connected", connected)))
			span.End()
			s.log.WarnContext(ctx, "xds: an Envoy rejected a version; it keeps the version it last accepted and gets nothing new of that type until the content changes (below the ban quorum)", attrs...)
		}
		return
	}

	ctx, span := s.nackSpan(ctx, e)
	defer span.End()
	span.SetAttributes(attribute.Int("ilb.xds.rejectors", rejectors), attribute.Int("ilb.xds.connected", connected))
	s.banned(source, r, RejectedVersion{NACK: *e.nack, By: "quorum", Rejectors: rejectors, Connected: connected})
	if err := s.rollBack(ctx, source, r); err != nil {
		span.AddEvent("banned; kept: no earlier acknowledged snapshot without a banned version")
		s.log.ErrorContext(ctx, "xds: a quorum of the source's Envoys rejected the version in force and no earlier snapshot without a banned version was acknowledged; banned, kept in force", attrs...)
		return
	}
	span.AddEvent("banned; rolled back to the last acknowledged snapshot", trace.WithAttributes(versionAttrs(r.stable)...))
	s.log.WarnContext(ctx, "xds: a quorum of the source's Envoys rejected a version; banned for the source, rolled back to its last acknowledged snapshot",
		append(attrs, "back_to_routes", r.stable.GetVersion(resource.RouteType))...)
}

// quorumReached reports whether rejectors of connected nodes are more
// than the share q of them (and at least one): with the default 0.5, a
// strict majority, so that one Envoy (or one fake node) beside a real one
// never bans a version for its source; the only Envoy of a source does.
func quorumReached(rejectors, connected int, q float64) bool {
	return rejectors >= 1 && float64(rejectors) > q*float64(connected)+1e-9
}

// nackSpan starts the span of a NACK: the node, the type and version it
// rejected, and Envoy's message (bounded) as the error status and an
// event.
func (s *Server) nackSpan(ctx context.Context, e event) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		attribute.String("ilb.source", e.ref.source), attribute.String("ilb.xds.key", e.key),
		attribute.String("ilb.xds.node", e.ref.id), attribute.String("ilb.xds.type", shortType(e.typ)),
		attribute.String("ilb.xds.version", e.version),
	}
	ctx, span := s.tracer.Start(ctx, "ilb.xds.nack", trace.WithAttributes(attrs...))
	span.AddEvent("envoy.nack", trace.WithAttributes(append(attrs, attribute.String("ilb.xds.error", e.nack.Message))...))
	span.SetStatus(codes.Error, e.nack.Message)
	return ctx, span
}
