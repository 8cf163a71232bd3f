package xdsload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
)

// Mode is the xDS protocol variant a client speaks on its ADS stream.
type Mode string

const (
	// SotW is state-of-the-world ADS (Envoy's api_type GRPC).
	SotW Mode = "sotw"
	// Delta is incremental ADS (Envoy's api_type DELTA_GRPC).
	Delta Mode = "delta"
)

// ParseMode reads "sotw" or "delta".
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case SotW, Delta:
		return Mode(s), nil
	}
	return "", fmt.Errorf("xds mode %q: want sotw or delta", s)
}

// client is one Envoy's ADS stream. It subscribes as Envoy does: clusters
// and listeners first (wildcard), then the endpoints of every EDS cluster
// and the route configurations the listeners name, and it acknowledges
// every response (SotW: version and nonce; delta: nonce).
type client struct {
	node  *corev3.Node
	mode  Mode
	names *nameCache
	now   func() time.Time

	mu sync.Mutex
	// acked is, per type URL, the version this Envoy last acknowledged
	// (SotW version_info; delta system_version_info), and ackedAt when.
	acked   map[string]string
	ackedAt map[string]time.Time
	full    time.Time // when it first held all four types; zero before
	err     error
	// started is closed at its first acknowledgement, or when run ends.
	started   chan struct{}
	startOnce sync.Once
}

func newClient(node *corev3.Node, mode Mode, names *nameCache, now func() time.Time) *client {
	return &client{
		node: node, mode: mode, names: names, now: now,
		acked: map[string]string{}, ackedAt: map[string]time.Time{}, started: make(chan struct{}),
	}
}

// firstTypes is the subscription order of a new stream: Envoy asks for
// clusters and listeners first.
var firstTypes = []string{resource.ClusterType, resource.ListenerType}

// run holds the stream until ctx is done or it fails; the error is kept.
func (c *client) run(ctx context.Context, conn grpc.ClientConnInterface) {
	defer c.startOnce.Do(func() { close(c.started) })
	var err error
	if c.mode == Delta {
		err = c.runDelta(ctx, conn)
	} else {
		err = c.runSotW(ctx, conn)
	}
	if err != nil && ctx.Err() == nil {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
	}
}

func (c *client) runSotW(ctx context.Context, conn grpc.ClientConnInterface) error {
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	st, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		return fmt.Errorf("open stream: %w", err)
	}
	first := true
	send := func(r *discoveryv3.DiscoveryRequest) error {
		if first {
			r.Node, first = c.node, false
		}
		return st.Send(r)
	}
	for _, typ := range firstTypes {
		if err := send(&discoveryv3.DiscoveryRequest{TypeUrl: typ}); err != nil {
			return fmt.Errorf("subscribe %s: %w", typ, err)
		}
	}
	// subscribed: the EDS and RDS names, once a clusters or listeners
	// response told them.
	subscribed := map[string][]string{}
	for {
		resp, err := st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("server closed the stream")
			}
			return fmt.Errorf("recv: %w", err)
		}
		typ := resp.GetTypeUrl()
		if err := send(&discoveryv3.DiscoveryRequest{
			TypeUrl: typ, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(), ResourceNames: subscribed[typ],
		}); err != nil {
			return fmt.Errorf("ack %s: %w", typ, err)
		}
		c.ack(typ, resp.GetVersionInfo())
		if next, dep := dependent(typ); dep && subscribed[next] == nil {
			names, err := c.names.learn(typ, resp.GetVersionInfo(), resp.GetResources())
			if err != nil {
				return err
			}
			subscribed[next] = names
			if err := send(&discoveryv3.DiscoveryRequest{TypeUrl: next, ResourceNames: names}); err != nil {
				return fmt.Errorf("subscribe %s: %w", next, err)
			}
		}
	}
}

func (c *client) runDelta(ctx context.Context, conn grpc.ClientConnInterface) error {
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	st, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		return fmt.Errorf("open stream: %w", err)
	}
	first := true
	send := func(r *discoveryv3.DeltaDiscoveryRequest) error {
		if first {
			r.Node, first = c.node, false
		}
		return st.Send(r)
	}
	for _, typ := range firstTypes {
		if err := send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typ}); err != nil {
			return fmt.Errorf("subscribe %s: %w", typ, err)
		}
	}
	subscribed := map[string]bool{}
	for {
		resp, err := st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("server closed the stream")
			}
			return fmt.Errorf("recv: %w", err)
		}
		typ := resp.GetTypeUrl()
		if err := send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typ, ResponseNonce: resp.GetNonce()}); err != nil {
			return fmt.Errorf("ack %s: %w", typ, err)
		}
		c.ack(typ, resp.GetSystemVersionInfo())
		if next, dep := dependent(typ); dep && !subscribed[next] {
			subscribed[next] = true
			res := make([]*anypb.Any, 0, len(resp.GetResources()))
			for _, r := range resp.GetResources() {
				res = append(res, r.GetResource())
			}
			names, err := c.names.learn(typ, resp.GetSystemVersionInfo(), res)
			if err != nil {
				return err
			}
			if err := send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: next, ResourceNamesSubscribe: names}); err != nil {
				return fmt.Errorf("subscribe %s: %w", next, err)
			}
		}
	}
}

// dependent is the type whose names a response of typ tells: endpoints
// for clusters, routes for listeners.
func dependent(typ string) (string, bool) {
	switch typ {
	case resource.ClusterType:
		return resource.EndpointType, true
	case resource.ListenerType:
		return resource.RouteType, true
	}
	return "", false
}

func (c *client) ack(typ, version string) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acked[typ], c.ackedAt[typ] = version, now
	if c.full.IsZero() && len(c.acked) == 4 {
		c.full = now
	}
	c.startOnce.Do(func() { close(c.started) })
}

// state is what the client acknowledged: the version of typ and when, and
// when it first held every type.
func (c *client) state(typ string) (version string, at, full time.Time, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acked[typ], c.ackedAt[typ], c.full, c.err
}

// nameCache learns, once per version and shared by every client, the
// names a clusters response makes Envoy subscribe to (its EDS clusters)
// and those a listeners response does (the route configurations of its
// HTTP connection managers). The bench's streams all get the same few
// versions (one per source), so decoding each once keeps the load
// generator's CPU for the streams.
type nameCache struct {
	mu    sync.Mutex
	names map[string][]string // type URL + " " + version -> dependent names
}

func newNameCache() *nameCache { return &nameCache{names: map[string][]string{}} }

// learn returns the names that version of typ (clusters or listeners)
// makes Envoy subscribe to, decoding res the first time.
func (n *nameCache) learn(typ, version string, res []*anypb.Any) ([]string, error) {
	key := typ + " " + version
	n.mu.Lock()
	defer n.mu.Unlock()
	if names, ok := n.names[key]; ok {
		return names, nil
	}
	var out []string
	for _, a := range res {
		switch typ {
		case resource.ClusterType:
			var cl clusterv3.Cluster
			if err := a.UnmarshalTo(&cl); err != nil {
				return nil, fmt.Errorf("decode cluster: %w", err)
			}
			if cl.GetType() == clusterv3.Cluster_EDS {
				name := cl.GetName()
				if sn := cl.GetEdsClusterConfig().GetServiceName(); sn != "" {
					name = sn
				}
				out = append(out, name)
			}
		case resource.ListenerType:
			names, err := routeNames(a)
			if err != nil {
				return nil, err
			}
			out = append(out, names...)
		}
	}
	n.names[key] = out
	return out, nil
}

// routeNames are the RDS route configuration names of a listener's HTTP
// connection managers.
func routeNames(a *anypb.Any) ([]string, error) {
	var l listenerv3.Listener
	if err := a.UnmarshalTo(&l); err != nil {
		return nil, fmt.Errorf("decode listener: %w", err)
	}
	var out []string
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			tc := f.GetTypedConfig()
			if tc == nil || tc.MessageName() != "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager" {
				continue
			}
			var hcm hcmv3.HttpConnectionManager
			if err := tc.UnmarshalTo(&hcm); err != nil {
				return nil, fmt.Errorf("decode http_connection_manager: %w", err)
			}
			if name := hcm.GetRds().GetRouteConfigName(); name != "" {
				out = append(out, name)
			}
		}
	}
	return out, nil
}
