package xds

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ilbproject/ilb/config"
)

// tracker follows xDS streams and the nodes (Envoys) behind them: which
// node each stream speaks for (admitted once, on its first request), which
// version its last response of each type carried (by nonce), and what
// each node acknowledged and rejected. Safe for concurrent use; its lock
// is never held across a call out of the package (Authorizer, logger,
// onNACK, go-control-plane).
type tracker struct {
	cfg  *config.Config
	log  *slog.Logger
	m    *metrics
	now  func() time.Time
	auth Authorizer // nil: every peer may speak for any source
	// voter names a stream's peer for the NACK quorum (Options.Voter);
	// nil: the node id. Set once before serving.
	voter func(ctx context.Context) string
	// refusals limits the log lines of refused unknown sources: one per
	// distinct value per minute, for at most 256 values at a time.
	refusals *logLimiter

	mu      sync.Mutex
	streams map[streamID]*streamState
	records map[nodeRef]*nodeState
	// connected counts, per source and voter, the nodes with an open
	// stream; rejecting, per snapshot key and "type version", and per
	// voter, the connected nodes of that key whose last rejection of the
	// type is that version. Both are kept as streams open and close and
	// answers come, so that a NACK's quorum (distinct voters) is counted
	// in O(voters).
	connected map[string]map[string]int
	rejecting map[rejection]map[string]int
	// departed lists the nodes whose last stream closed, in that order
	// (entries of nodes that came back, or were forgotten, are skipped);
	// gone counts the records without an open stream. Past maxDeparted
	// of them, the longest gone is forgotten before its node_ttl.
	departed []departure
	gone     int

	acks *ackQueue // ACKs, for Run; never blocks, never drops
	// onNACK handles a NACK on the stream's goroutine, before
	// go-control-plane serves the NACK's request; set once before serving.
	onNACK func(event)
}

// rejection is a version of a type rejected by nodes of a snapshot key.
type rejection struct{ key, typeVersion string }

// departure is a node whose last stream closed at left.
type departure struct {
	ref  nodeRef
	left time.Time
}

// maxDeparted bounds the records of nodes without an open stream: a
// fleet that replaces its Envoys (new node ids at every deploy) leaves
// at most this many behind, whatever envoy.rollout.node_ttl.
const maxDeparted = 1024

// nodeRef names a node record: its source (node.cluster) and its id,
// bounded (boundedID).
type nodeRef struct{ source, id string }

// nodeState is what ILB knows of one node. Guarded by tracker.mu.
type nodeState struct {
	ref     nodeRef
	voter   string // who it votes as while connected (tracker.voter)
	key     string // its snapshot key: the source, or the source's canary key
	canary  bool
	streams int       // open streams that named it
	left    time.Time // when its last stream closed; zero while connected
	acked   map[string]string
	// lastNACK is its last rejection of any type; rejected is, per type,
	// the last version of that type it rejected (cleared when it
	// acknowledges that very version): what holds it.
	lastNACK *NACK
	rejected map[string]*NACK
}

// streamID names a stream: go-control-plane numbers state-of-the-world
// and delta streams each from 1, so the kind is part of the name.
type streamID struct {
	delta bool
	id    int64
}

// streamState is one open stream. Guarded by tracker.mu.
type streamState struct {
	// ctx is the stream's context, kept because go-control-plane's
	// request callbacks do not carry it and the Authorizer reads the
	// peer's identity from it; dropped when the stream closes.
	ctx  context.Context
	node *nodeState // nil until a request names an admitted node
	// sent is, per type URL, the last response on the stream: the only
	// one an answer can still refer to (go-control-plane ignores answers
	// with an older nonce), so the map holds at most one entry per type.
	sent map[string]sentResponse
}

type sentResponse struct{ nonce, version string }

// answer is one request on a stream, as the tracker reads it.
type answer struct {
	node    *corev3.Node // nil when the request does not name one (delta)
	typeURL string
	nonce   string
	version string // the version the node says it runs (state of the world)
	nack    *rpcstatus.Status
}

func newTracker(c *config.Config, l *slog.Logger, m *metrics, now func() time.Time, auth Authorizer, acks *ackQueue) *tracker {
	return &tracker{
		cfg: c, log: l, m: m, now: now, auth: auth, acks: acks,
		refusals:  newLogLimiter(time.Minute, 256),
		streams:   map[streamID]*streamState{},
		records:   map[nodeRef]*nodeState{},
		connected: map[string]map[string]int{},
		rejecting: map[rejection]map[string]int{},
	}
}

func (t *tracker) callbacks() serverv3.Callbacks {
	return serverv3.CallbackFuncs{
		StreamOpenFunc:        func(ctx context.Context, id int64, _ string) error { t.open(ctx, streamID{id: id}); return nil },
		StreamClosedFunc:      func(id int64, _ *corev3.Node) { t.closed(streamID{id: id}) },
		DeltaStreamOpenFunc:   func(ctx context.Context, id int64, _ string) error { t.open(ctx, streamID{true, id}); return nil },
		DeltaStreamClosedFunc: func(id int64, _ *corev3.Node) { t.closed(streamID{true, id}) },
		StreamRequestFunc: func(id int64, r *discoveryv3.DiscoveryRequest) error {
			return t.request(streamID{id: id}, answer{
				node: r.GetNode(), typeURL: r.GetTypeUrl(), nonce: r.GetResponseNonce(),
				version: r.GetVersionInfo(), nack: r.GetErrorDetail(),
			})
		},
		StreamResponseFunc: func(_ context.Context, id int64, _ *discoveryv3.DiscoveryRequest, r *discoveryv3.DiscoveryResponse) {
			t.sent(streamID{id: id}, r.GetTypeUrl(), r.GetNonce(), r.GetVersionInfo())
		},
		StreamDeltaRequestFunc: func(id int64, r *discoveryv3.DeltaDiscoveryRequest) error {
			return t.request(streamID{true, id}, answer{
				node: r.GetNode(), typeURL: r.GetTypeUrl(), nonce: r.GetResponseNonce(), nack: r.GetErrorDetail(),
			})
		},
		StreamDeltaResponseFunc: func(id int64, _ *discoveryv3.DeltaDiscoveryRequest, r *discoveryv3.DeltaDiscoveryResponse) {
			t.sent(streamID{true, id}, r.GetTypeUrl(), r.GetNonce(), r.GetSystemVersionInfo())
		},
		// The unary Fetch RPCs of the per-type services answer from the
		// same snapshots: they are admitted like a stream, and leave no
		// record.
		FetchRequestFunc: func(ctx context.Context, r *discoveryv3.DiscoveryRequest) error {
			return t.admit(ctx, r.GetNode())
		},
	}
}

func (t *tracker) open(ctx context.Context, id streamID) {
	t.m.streams.Inc()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.streams[id] = &streamState{ctx: ctx, sent: map[string]sentResponse{}}
}

// closed forgets a stream; its node's record leaves the connected ones
// when it was the last. The stream gauge moves last, so a reader who saw
// it drop sees the records as they are after the close.
func (t *tracker) closed(id streamID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.m.streams.Dec()
	if st := t.streams[id]; st != nil && st.node != nil {
		n := st.node
		if n.streams--; n.streams == 0 {
			n.left = t.now()
			t.count(n, -1)
			t.gone++
			t.departed = append(t.departed, departure{ref: n.ref, left: n.left})
			t.trimDeparted()
		}
	}
	delete(t.streams, id)
}

// count adds d (+1 or -1) to the counts of a node that connects (its
// first open stream) or leaves (its last one closed). Called under mu.
func (t *tracker) count(n *nodeState, d int) {
	addVote(t.connected, n.ref.source, n.voter, d)
	for typ, r := range n.rejected {
		t.reject(n, typ, r.Version, d)
	}
}

// reject adds d to the rejections of typ's version by n's voter.
func (t *tracker) reject(n *nodeState, typ, version string, d int) {
	addVote(t.rejecting, rejection{n.key, typ + " " + version}, n.voter, d)
}

// addVote adds d nodes of voter under k, dropping what falls to zero.
func addVote[K comparable](m map[K]map[string]int, k K, voter string, d int) {
	votes := m[k]
	if votes == nil {
		votes = map[string]int{}
		m[k] = votes
	}
	if votes[voter] += d; votes[voter] <= 0 {
		delete(votes, voter)
	}
	if len(votes) == 0 {
		delete(m, k)
	}
}

// trimDeparted forgets the longest-gone nodes past maxDeparted, and
// drops the entries of departed that no longer stand for a gone record
// once they are as many as those that do. Called under mu.
func (t *tracker) trimDeparted() {
	i := 0
	for ; i < len(t.departed) && t.gone > maxDeparted; i++ {
		d := t.departed[i]
		if n := t.records[d.ref]; n != nil && n.streams == 0 && n.left.Equal(d.left) {
			t.forget(n)
		}
	}
	t.departed = t.departed[i:]
	if len(t.departed) > 2*max(t.gone, maxDeparted) {
		t.departed = slices.DeleteFunc(t.departed, func(d departure) bool {
			n := t.records[d.ref]
			return n == nil || n.streams > 0 || !n.left.Equal(d.left)
		})
	}
}

// forget drops a record without an open stream. Called under mu.
func (t *tracker) forget(n *nodeState) {
	delete(t.records, n.ref)
	t.gone--
	t.m.nodes.WithLabelValues(n.ref.source).Dec()
	t.m.forgotten.Inc()
}

func (t *tracker) sent(id streamID, typeURL, nonce, version string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.streams[id]; st != nil {
		st.sent[typeURL] = sentResponse{nonce: nonce, version: version}
	}
}

// admit checks that the peer of ctx may speak for node's source: first
// the Authorizer (so that a peer it refuses learns nothing, not even
// whether the source exists), then that node.cluster is a source of this
// ILB. The error is a gRPC status that ends the stream or the call.
func (t *tracker) admit(ctx context.Context, node *corev3.Node) error {
	source := node.GetCluster()
	if t.auth != nil {
		if err := t.auth.Authorize(ctx, source); err != nil {
			if _, ok := status.FromError(err); ok {
				return err
			}
			return status.Error(codes.PermissionDenied, "xds: this peer may not subscribe as that source")
		}
	}
	if _, known := t.cfg.Source(source); known {
		return nil
	}
	// InvalidArgument, not PermissionDenied: the request names no source
	// of this ILB, a fault of the Envoy's bootstrap that its operator
	// fixes, while PermissionDenied stays the Authorizer's answer about
	// an identity. Neither the other sources nor more than an excerpt of
	// the value are told.
	excerpt := bounded(source, maxExcerpt)
	if ok, suppressed := t.refusals.allow(excerpt, t.now()); ok {
		t.log.WarnContext(ctx, "xds: node of an unknown source refused",
			"cluster", excerpt, "node", boundedID(node.GetId()), "suppressed", suppressed)
	}
	if source == "" {
		return status.Error(codes.InvalidArgument, "xds: node.cluster is empty: the first request of a stream must name the node and its source in node.cluster")
	}
	return status.Errorf(codes.InvalidArgument, "xds: node.cluster %q is not a source of this ILB", excerpt)
}

// request follows one request of stream id. The first request that names
// a node admits it (see admit; a refused stream ends with the error, and
// its node gets nothing and leaves no record); a later request may not
// name another node. An answer to the stream's last response of its type
// counts as an ACK (queued for Run, the latest per node) or a NACK (handed to onNACK before
// this returns, so that its rollback, if any, lands before
// go-control-plane serves the request).
func (t *tracker) request(id streamID, a answer) error {
	t.mu.Lock()
	st := t.streams[id]
	if st == nil {
		t.mu.Unlock()
		return status.Error(codes.Internal, "xds: request on a stream that was not opened")
	}
	if st.node == nil {
		ctx := st.ctx
		t.mu.Unlock()
		if a.node == nil {
			return status.Error(codes.InvalidArgument, "xds: the first request of a stream must name its node (node.id, node.cluster)")
		}
		if err := t.admit(ctx, a.node); err != nil {
			return err
		}
		voter := boundedID(a.node.GetId())
		if t.voter != nil {
			voter = t.voter(ctx)
		}
		t.mu.Lock()
		st.node = t.attach(a.node, voter)
	} else if a.node != nil && (a.node.GetCluster() != st.node.ref.source || boundedID(a.node.GetId()) != st.node.ref.id) {
		t.mu.Unlock()
		return status.Error(codes.InvalidArgument, "xds: a stream may not change its node: node.id and node.cluster must stay those of its first request")
	}
	e, ok := t.answered(st, a)
	t.mu.Unlock()
	switch {
	case !ok:
	case e.nack != nil:
		if t.onNACK != nil {
			t.onNACK(e)
		}
	default:
		t.acks.push(e)
	}
	return nil
}

// attach records that a stream of voter speaks for node: the node votes
// as the voter of the stream that connected it. Called under mu.
func (t *tracker) attach(node *corev3.Node, voter string) *nodeState {
	ref := nodeRef{source: node.GetCluster(), id: boundedID(node.GetId())}
	n := t.records[ref]
	if n == nil {
		canary := isCanary(node.GetId(), t.cfg.Envoy.Rollout.CanaryPercent)
		key := ref.source
		if canary {
			key += canarySuffix
		}
		n = &nodeState{ref: ref, key: key, canary: canary, acked: map[string]string{}, rejected: map[string]*NACK{}}
		t.records[ref] = n
		t.m.nodes.WithLabelValues(ref.source).Inc()
		t.gone++ // until it counts as connected, below
	}
	if n.streams++; n.streams == 1 {
		t.gone--
		n.voter = voter
		t.count(n, +1)
	}
	n.left = time.Time{}
	return n
}

// answered reads a as an ACK or a NACK of the stream's last response of
// its type; ok is false for anything else (a subscription, or an answer
// to an older response). Called under mu.
func (t *tracker) answered(st *streamState, a answer) (e event, ok bool) {
	last, sent := st.sent[a.typeURL]
	if a.nonce == "" || !sent || last.nonce != a.nonce {
		return event{}, false
	}
	delete(st.sent, a.typeURL)
	n, typ := st.node, shortType(a.typeURL)
	e = event{ref: n.ref, key: n.key, typ: a.typeURL, version: last.version}
	if a.nack != nil {
		t.m.nacks.WithLabelValues(typ).Inc()
		nk := &NACK{Node: n.ref.id, Type: typ, Version: last.version, Message: bounded(a.nack.GetMessage(), maxMessage), At: t.now()}
		prev := n.rejected[typ]
		e.first = prev == nil || prev.Version != nk.Version
		if prev != nil {
			t.reject(n, typ, prev.Version, -1)
		}
		t.reject(n, typ, nk.Version, +1)
		n.lastNACK, n.rejected[typ] = nk, nk
		e.nack = nk
		return e, true
	}
	t.m.acks.WithLabelValues(typ).Inc()
	if a.version != "" { // state of the world: the version the node runs
		e.version = a.version
	}
	n.acked[typ] = e.version
	if r := n.rejected[typ]; r != nil && r.Version == e.version {
		delete(n.rejected, typ)
		t.reject(n, typ, r.Version, -1)
	}
	return e, true
}

// quorumCount is what a NACK's quorum is counted over: the voters of the
// connected nodes of source, and those among them with a node whose last
// rejection of typ is version, among the nodes of the keys (the source's
// and its canaries') that have that version in force (in: key -> short
// type -> version). A voter with many nodes counts once on each side.
// O(voters), not O(nodes).
func (t *tracker) quorumCount(source, typ, version string, in map[string]map[string]string) (rejectors, connected int) {
	typ = shortType(typ)
	t.mu.Lock()
	defer t.mu.Unlock()
	voters := map[string]bool{}
	for _, key := range []string{source, source + canarySuffix} {
		if in[key][typ] == version {
			for v := range t.rejecting[rejection{key, typ + " " + version}] {
				voters[v] = true
			}
		}
	}
	return len(voters), len(t.connected[source])
}

// heldOn is the version of typeURL that node last rejected, if it still
// holds it ("" otherwise): what the holding cache must not send it again.
func (t *tracker) heldOn(node *corev3.Node, typeURL string) string {
	ref := nodeRef{source: node.GetCluster(), id: boundedID(node.GetId())}
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.records[ref]; n != nil {
		if r := n.rejected[shortType(typeURL)]; r != nil {
			return r.Version
		}
	}
	return ""
}

// ackedAll reports whether the node acknowledged every version of want
// (type -> version). O(1).
func (t *tracker) ackedAll(ref nodeRef, want map[string]string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.records[ref]
	return n != nil && len(want) > 0 && ackedEvery(n.acked, want)
}

func ackedEvery(acked, want map[string]string) bool {
	for typ, v := range want {
		if acked[typ] != v {
			return false
		}
	}
	return true
}

// expired reports whether a record is past its TTL at now: no open stream,
// and its last one closed NodeTTL ago or more.
func (t *tracker) expired(n *nodeState, now time.Time) bool {
	return n.streams == 0 && now.Sub(n.left) >= t.cfg.Envoy.Rollout.NodeTTL.Std()
}

// sweep forgets the nodes past their TTL, and returns how many it forgot.
func (t *tracker) sweep(now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	forgotten := 0
	for _, n := range t.records {
		if t.expired(n, now) {
			t.forget(n)
			forgotten++
		}
	}
	return forgotten
}
