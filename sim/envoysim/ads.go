package envoysim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// Retry back-off of the xDS stream (GrpcMuxImpl: RETRY_INITIAL_DELAY_MS 500,
// RETRY_MAX_DELAY_MS 30000, jittered).
const (
	adsRetryInitial = 500 * time.Millisecond
	adsRetryMax     = 30 * time.Second
	// nackPaceMax bounds the delay envoysim puts before re-NACKing the same
	// version of a type again (a control plane that resends a rejected
	// snapshot would otherwise make both sides spin).
	nackPaceMax = 5 * time.Second
)

// userAgentName is the node.user_agent_name envoysim sends.
const userAgentName = "envoysim"

// adsClient is an ADS client: state of the world
// (source/extensions/config_subscription/grpc/grpc_mux_impl.cc), or delta
// with ads_config.api_type DELTA_GRPC (see deltaSession). Its fields are
// only used by the goroutine running run.
type adsClient struct {
	e    *Envoy
	cfg  *adsConfig
	conn *grpc.ClientConn // the session's, to the host picked for it
	// host is the address of the last session's host, and failed whether
	// that session ended without a response: the next one avoids it when
	// another host is there (the cluster's load balancer picks one per
	// stream, GrpcMuxImpl through the async client).
	host     string
	failed   bool
	node     *corev3.Node
	versions map[string]string        // last accepted version_info per type
	nonces   map[string]string        // last response nonce per type
	sent     map[string][]string      // last resource_names sent for EDS and RDS
	nacked   map[string]string        // version last NACKed per type
	streak   map[string]int           // consecutive NACKs of that version
	held     map[string]heldResources // delta: what it holds, per type
}

func (e *Envoy) newADSClient() *adsClient {
	node := proto.Clone(e.boot.GetNode()).(*corev3.Node)
	node.UserAgentName = userAgentName
	return &adsClient{
		e: e, cfg: e.ads, node: node,
		versions: map[string]string{}, nonces: map[string]string{}, sent: map[string][]string{},
		nacked: map[string]string{}, streak: map[string]int{}, held: map[string]heldResources{},
	}
}

// pick chooses the host of the next session from the xDS cluster (its
// health checks and outlier detection apply), avoiding the host whose
// session just failed when the cluster has another, and connects to it.
func (c *adsClient) pick() error {
	e := c.e
	cc := e.state.staticClusters[c.cfg.clusterName]
	addr := ""
	if cl := e.snap.Load().clusters[c.cfg.clusterName]; cl != nil {
		// Each session is a new gRPC stream: a new stream info.
		lc := &lbContext{req: grpcLBRequest(c.cfg.initialMetadata, &streamInfo{})}
		if c.failed && c.host != "" {
			last := c.host
			lc.retry, lc.maxAttempts, lc.avoid = true, 3, func(a string) bool { return a == last }
		}
		// Its own random source: the request path's (Options.Rand) stays
		// the tests' deterministic sequence.
		if h := cl.chooseHost(rand.Uint64, lc); h != nil {
			addr = h.addr
		}
	}
	if addr == "" { // no runtime cluster yet, or no host it deems fit: the first endpoint
		ep := cc.endpointList()[0]
		addr = joinHostPort(ep.address, ep.port)
	}
	conn, err := e.grpc.dial(cc, addr, e.stats)
	if err != nil {
		return err
	}
	c.conn, c.host = conn, addr
	return nil
}

// run keeps an ADS stream open until ctx is done, reconnecting with
// jittered exponential back-off (ads_config's envoy_grpc.retry_policy
// retry_back_off, else 500 ms to 30 s) to a host picked anew, and keeping
// the configuration it has.
func (c *adsClient) run(ctx context.Context) {
	delay := c.cfg.retryBase
	session := c.session
	if c.cfg.delta {
		session = c.deltaSession
	}
	for {
		got, err := false, c.pick()
		if err == nil {
			got, err = session(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		c.failed = !got
		if got {
			delay = c.cfg.retryBase
		}
		c.e.log.WarnContext(ctx, "ads stream closed; retrying", "error", err, "in", delay)
		jitter := time.Duration(rand.Int64N(int64(delay)/2 + 1))
		if !sleep(ctx, delay/2+jitter) {
			return
		}
		delay = min(delay*2, c.cfg.retryMax)
	}
}

// sleep waits d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// session runs one stream. It reports whether any response was received.
// The configuration it applies (listeners especially) lives on ctx, not on
// the stream.
func (c *adsClient) session(ctx context.Context) (bool, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sctx = withMetadata(sctx, c.cfg.initialMetadata)
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(sctx)
	if err != nil {
		return false, fmt.Errorf("open stream: %w", err)
	}
	first := true
	send := func(req *discoveryv3.DiscoveryRequest) error {
		if first || c.cfg.nodeEveryRequest {
			req.Node = c.node
		}
		first = false
		if err := stream.Send(req); err != nil {
			return fmt.Errorf("send %s: %w", req.GetTypeUrl(), err)
		}
		return nil
	}
	// Initial requests carry the last accepted versions and no nonce.
	clear(c.nonces)
	for _, t := range c.subscribedTypes() {
		names := c.e.subscription(t)
		c.sent[t] = names
		if (t == typeEndpoint || t == typeRoute) && len(names) == 0 {
			continue
		}
		if err := send(&discoveryv3.DiscoveryRequest{TypeUrl: t, VersionInfo: c.versions[t], ResourceNames: names}); err != nil {
			return false, err
		}
	}
	got := false
	for {
		resp, err := stream.Recv()
		if err != nil {
			return got, fmt.Errorf("receive: %w", err)
		}
		got = true
		if err := c.handle(ctx, resp, send); err != nil {
			return got, err
		}
	}
}

func (c *adsClient) subscribedTypes() []string {
	var out []string
	if c.cfg.cds {
		out = append(out, typeCluster, typeEndpoint)
	}
	if c.cfg.lds {
		out = append(out, typeListener, typeRoute)
	}
	if !c.cfg.cds {
		out = append(out, typeEndpoint) // static EDS clusters
	}
	return slices.Compact(out)
}

// handle applies a response, ACKs or NACKs it, then updates the EDS or RDS
// subscription a CDS or LDS update changed (Envoy pauses EDS/RDS during the
// update and sends them after the ACK).
func (c *adsClient) handle(ctx context.Context, resp *discoveryv3.DiscoveryResponse, send func(*discoveryv3.DiscoveryRequest) error) error {
	t := resp.GetTypeUrl()
	switch t {
	case typeCluster, typeListener, typeEndpoint, typeRoute:
	default:
		c.e.log.WarnContext(ctx, "ignoring unwatched type URL", "type", t)
		return nil
	}
	c.nonces[t] = resp.GetNonce()
	applyErr := c.e.applyResponse(ctx, resp)
	req := &discoveryv3.DiscoveryRequest{TypeUrl: t, ResponseNonce: resp.GetNonce(), ResourceNames: c.e.subscription(t)}
	if applyErr == nil {
		c.versions[t] = resp.GetVersionInfo()
		req.VersionInfo = resp.GetVersionInfo()
	} else {
		req.VersionInfo = c.versions[t]
		req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: applyErr.Error()}
	}
	if err := c.answered(ctx, t, resp.GetVersionInfo(), applyErr); err != nil {
		return err
	}
	if t == typeEndpoint || t == typeRoute {
		c.sent[t] = req.GetResourceNames()
	}
	if err := send(req); err != nil {
		return err
	}
	dep := map[string]string{typeCluster: typeEndpoint, typeListener: typeRoute}[t]
	if dep == "" {
		return nil
	}
	names := c.e.subscription(dep)
	if slices.Equal(names, c.sent[dep]) {
		return nil
	}
	c.sent[dep] = names
	return send(&discoveryv3.DiscoveryRequest{TypeUrl: dep, VersionInfo: c.versions[dep], ResponseNonce: c.nonces[dep], ResourceNames: names})
}

// answered records what the client answers to a response of type t
// carrying version (an ACK when applyErr is nil, else a NACK) in its
// state and stats, and paces repeated NACKs of the same version (up to
// nackPaceMax); the error is the stop of ctx during that pause.
func (c *adsClient) answered(ctx context.Context, t, version string, applyErr error) error {
	if applyErr == nil {
		c.e.setVersion(t, version)
		delete(c.nacked, t)
		c.e.stats.update(func(s *Stats) {
			x := s.XDS[t]
			x.Acks++
			s.XDS[t] = x
		})
		c.e.log.DebugContext(ctx, "xds ack", "type", t, "version", version, "delta", c.cfg.delta)
		return nil
	}
	c.e.stats.update(func(s *Stats) {
		x := s.XDS[t]
		x.Nacks++
		x.LastNackError = applyErr.Error()
		s.XDS[t] = x
	})
	c.e.log.WarnContext(ctx, "xds nack", "type", t, "version", version, "delta", c.cfg.delta, "error", applyErr)
	if c.nacked[t] != version {
		c.nacked[t], c.streak[t] = version, 0
		return nil
	}
	c.streak[t]++
	if !sleep(ctx, min(nackPaceMax, 100*time.Millisecond<<min(c.streak[t], 6))) {
		return errors.New("stopped")
	}
	return nil
}
