package xds

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/config"
)

// NodeStatus is what one Envoy (node id) has acknowledged and rejected.
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
}

// NACK is a rejected version with Envoy's error detail.
type NACK struct {
	Node    string    `json:"node"`
	Type    string    `json:"type"`
	Version string    `json:"version"`
	Message string    `json:"message"`
	At      time.Time `json:"at"`
}

// tracker follows xDS streams: which node each is, which version each
// response carried (by nonce), and what nodes ACK and NACK.
type tracker struct {
	cfg *config.Config
	log *slog.Logger

	mu      sync.Mutex
	streams map[int64]*streamState
	byID    map[string]*NodeStatus

	mStreams    prometheus.Gauge
	mAcks       *prometheus.CounterVec
	mNacks      *prometheus.CounterVec
	mPublish    prometheus.Counter
	mRollbacks  *prometheus.CounterVec
	mPromotions *prometheus.CounterVec
	mRejected   *prometheus.GaugeVec
	mCanary     *prometheus.GaugeVec

	events chan<- event
	// onNACK, when set, handles NACKs synchronously (see answered); set
	// once before the server serves.
	onNACK func(event)
}

type streamState struct {
	node   *corev3.Node
	nonces map[string]string // nonce -> version sent
}

func newTracker(c *config.Config, l *slog.Logger, reg *prometheus.Registry, events chan<- event) (*tracker, error) {
	t := &tracker{
		cfg: c, log: l, events: events,
		streams: map[int64]*streamState{},
		byID:    map[string]*NodeStatus{},
		mStreams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ilb_xds_streams", Help: "Open xDS streams (state of the world and delta).",
		}),
		mAcks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_xds_acks_total", Help: "xDS responses acknowledged by Envoys, by resource type.",
		}, []string{"type"}),
		mNacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_xds_nacks_total", Help: "xDS responses rejected by Envoys, by resource type.",
		}, []string{"type"}),
		mPublish: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ilb_xds_snapshots_published_total", Help: "Weights versions turned into snapshots for every source.",
		}),
		mRollbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_xds_rollbacks_total", Help: "Versions rejected by a node while in force, rolled back (canaries to stable, or the source to its last acknowledged snapshot).",
		}, []string{"source"}),
		mPromotions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_xds_canary_promotions_total", Help: "Canary versions promoted to every Envoy of a source.",
		}, []string{"source"}),
		mRejected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_xds_rejected_versions", Help: "Versions (per type) Envoys of a source rejected: never sent again.",
		}, []string{"source"}),
		mCanary: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_xds_canary_pending", Help: "1 while a source's canaries run a version its other Envoys do not have yet.",
		}, []string{"source"}),
	}
	// Every series exists from the start at zero, so that increase() and
	// rate() see the first NACK or rollback (a series born at 1 has no
	// increase).
	for _, s := range c.Sources {
		t.mRejected.WithLabelValues(s.Name).Set(0)
		t.mCanary.WithLabelValues(s.Name).Set(0)
		t.mRollbacks.WithLabelValues(s.Name)
		t.mPromotions.WithLabelValues(s.Name)
	}
	for _, typ := range []resource.Type{resource.ClusterType, resource.EndpointType, resource.RouteType, resource.ListenerType, ""} {
		t.mAcks.WithLabelValues(shortType(typ))
		t.mNacks.WithLabelValues(shortType(typ))
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{t.mStreams, t.mAcks, t.mNacks, t.mPublish, t.mRollbacks, t.mPromotions, t.mRejected, t.mCanary} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("xds metrics: %w", err)
			}
		}
	}
	return t, nil
}

func (t *tracker) published(string) { t.mPublish.Inc() }

func (t *tracker) callbacks() serverv3.Callbacks {
	return serverv3.CallbackFuncs{
		StreamOpenFunc:      func(context.Context, int64, string) error { t.open(); return nil },
		StreamClosedFunc:    func(id int64, _ *corev3.Node) { t.closed(id) },
		DeltaStreamOpenFunc: func(context.Context, int64, string) error { t.open(); return nil },
		DeltaStreamClosedFunc: func(id int64, _ *corev3.Node) {
			t.closed(id)
		},
		StreamRequestFunc: func(id int64, r *discoveryv3.DiscoveryRequest) error {
			return t.answered(t.request(id, r.GetNode(), r.GetTypeUrl(), r.GetResponseNonce(), r.GetVersionInfo(), r.GetErrorDetail().GetMessage(), r.GetErrorDetail() != nil))
		},
		StreamResponseFunc: func(_ context.Context, id int64, _ *discoveryv3.DiscoveryRequest, r *discoveryv3.DiscoveryResponse) {
			t.sent(id, r.GetNonce(), r.GetVersionInfo())
		},
		StreamDeltaRequestFunc: func(id int64, r *discoveryv3.DeltaDiscoveryRequest) error {
			return t.answered(t.request(id, r.GetNode(), r.GetTypeUrl(), r.GetResponseNonce(), "", r.GetErrorDetail().GetMessage(), r.GetErrorDetail() != nil))
		},
		StreamDeltaResponseFunc: func(id int64, _ *discoveryv3.DeltaDiscoveryRequest, r *discoveryv3.DeltaDiscoveryResponse) {
			t.sent(id, r.GetNonce(), r.GetSystemVersionInfo())
		},
	}
}

func (t *tracker) open() { t.mStreams.Inc() }

func (t *tracker) closed(id int64) {
	t.mStreams.Dec()
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, ok := t.streams[id]; ok && st.node != nil {
		if ns := t.byID[st.node.GetId()]; ns != nil {
			ns.Streams--
		}
	}
	delete(t.streams, id)
}

func (t *tracker) sent(id int64, nonce, version string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, ok := t.streams[id]; ok {
		st.nonces[nonce] = version
	}
}

// answered hands a NACK to onNACK, synchronously, once the tracker's lock
// is released: the rollback then lands before go-control-plane handles
// the NACK's request, which names the last version the node accepted, so
// the rejected version is not answered again (with the asynchronous
// rollout loop it could be, once per NACK, until the loop caught up).
func (t *tracker) answered(nack *event, err error) error {
	if nack != nil && t.onNACK != nil {
		t.onNACK(*nack)
	}
	return err
}

// request records the node of a stream, refuses nodes of unknown sources
// (the stream is closed with the error, which Envoy logs), and counts ACKs
// and NACKs. ackVersion is the accepted version (state of the world only).
// A NACK is returned for onNACK (or queued for Run when none is set); an
// ACK is queued for Run.
func (t *tracker) request(id int64, node *corev3.Node, typeURL, nonce, ackVersion, nackMsg string, nack bool) (*event, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st, ok := t.streams[id]
	if !ok {
		st = &streamState{nonces: map[string]string{}}
		t.streams[id] = st
	}
	if st.node == nil && node != nil {
		if _, known := t.cfg.Source(node.GetCluster()); !known {
			names := make([]string, len(t.cfg.Sources))
			for i, s := range t.cfg.Sources {
				names[i] = s.Name
			}
			t.log.Warn("xds: node of an unknown source refused", "node", node.GetId(), "cluster", node.GetCluster())
			return nil, fmt.Errorf("node.cluster %q is not a source of this ILB (known sources: %s)", node.GetCluster(), strings.Join(names, ", "))
		}
		st.node = node
		ns := t.byID[node.GetId()]
		if ns == nil {
			ns = &NodeStatus{
				ID: node.GetId(), Cluster: node.GetCluster(), Acked: map[string]string{},
				Canary: isCanary(node.GetId(), t.cfg.Envoy.Rollout.CanaryPercent),
			}
			t.byID[node.GetId()] = ns
		}
		ns.Streams++
	}
	if nonce == "" || st.node == nil {
		return nil, nil // a subscription, not an answer to a response
	}
	typ := shortType(typeURL)
	ns := t.byID[st.node.GetId()]
	sentVersion := st.nonces[nonce]
	delete(st.nonces, nonce)
	if nack {
		t.mNacks.WithLabelValues(typ).Inc()
		ns.LastNACK = &NACK{Node: ns.ID, Type: typ, Version: sentVersion, Message: nackMsg, At: time.Now()}
		t.log.Warn("xds: envoy rejected a version", "node", ns.ID, "source", ns.Cluster, "type", typ, "version", sentVersion, "error", nackMsg)
		e := event{node: st.node, typ: typeURL, version: sentVersion, nack: ns.LastNACK}
		if t.onNACK == nil {
			t.emit(e)
			return nil, nil
		}
		return &e, nil
	}
	t.mAcks.WithLabelValues(typ).Inc()
	if ackVersion == "" {
		ackVersion = sentVersion
	}
	ns.Acked[typ] = ackVersion
	t.emit(event{node: st.node, typ: typeURL, version: ackVersion})
	return nil, nil
}

// emit hands an answer to the rollout loop without blocking the stream;
// a full queue drops it (the next answer carries the same state).
func (t *tracker) emit(e event) {
	select {
	case t.events <- e:
	default:
		t.log.Warn("xds: rollout event queue full; event dropped", "node", e.node.GetId())
	}
}

func (t *tracker) nodes() []NodeStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]NodeStatus, 0, len(t.byID))
	for _, n := range t.byID {
		c := *n
		c.Acked = make(map[string]string, len(n.Acked))
		for k, v := range n.Acked {
			c.Acked[k] = v
		}
		if n.LastNACK != nil {
			nk := *n.LastNACK
			c.LastNACK = &nk
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b NodeStatus) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// RolloutStatus is where one source's rollout stands.
type RolloutStatus struct {
	Source string `json:"source"`
	// Stable and Canary are the versions, per type, that the source's
	// Envoys and its canaries are sent; they differ while Pending.
	Stable  map[string]string `json:"stable"`
	Canary  map[string]string `json:"canary,omitempty"`
	Pending bool              `json:"pending"`
	// LastGood are the last versions an Envoy of the source (not a
	// canary) acknowledged for every type: where a NACK rolls back to.
	LastGood map[string]string `json:"last_good,omitempty"`
	Since    time.Time         `json:"since,omitzero"`
	// Rejected are the versions Envoys refused, never sent again.
	Rejected []RejectedVersion `json:"rejected,omitempty"`
	Nodes    []NodeStatus      `json:"nodes"`
}

// RejectedVersion is a version an Envoy refused, with its error.
type RejectedVersion struct {
	NACK
}

// Rollouts reports every source's rollout, sources in configuration
// order, with their connected nodes.
func (s *Server) Rollouts() []RolloutStatus {
	nodes := s.tracker.nodes()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []RolloutStatus
	for _, src := range s.cfg.Sources {
		st := RolloutStatus{Source: src.Name}
		if r := s.rollouts[src.Name]; r != nil {
			st.Stable = versions(r.stable)
			if g := r.lastGood[src.Name]; g != nil {
				st.LastGood = versions(g)
			}
			if r.pending {
				st.Pending, st.Since, st.Canary = true, r.since, versions(r.canary)
			}
			for _, n := range r.rejected {
				st.Rejected = append(st.Rejected, RejectedVersion{n})
			}
			slices.SortFunc(st.Rejected, func(a, b RejectedVersion) int { return a.At.Compare(b.At) })
		}
		for _, n := range nodes {
			if n.Cluster == src.Name {
				st.Nodes = append(st.Nodes, n)
			}
		}
		out = append(out, st)
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
