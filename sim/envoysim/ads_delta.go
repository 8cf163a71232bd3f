package envoysim

import (
	"context"
	"fmt"
	"maps"
	"slices"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"
)

// The incremental (delta) ADS client, as Envoy runs it with
// ads_config.api_type DELTA_GRPC (source/extensions/config_subscription/
// grpc/new_grpc_mux_impl.cc, delta_subscription_state.cc):
//
//   - a new stream subscribes clusters and listeners as a wildcard (no
//     names: the legacy wildcard), endpoints and routes by name, each with
//     initial_resource_versions: the resources it holds, so the server
//     sends only what changed;
//   - a response carries the resources that changed (added or updated) and
//     the names removed; Envoy applies them onto what it holds and answers
//     with the response's nonce: an ACK, or a NACK with error_detail;
//   - when clusters or listeners change the endpoints or routes it needs,
//     it sends resource_names_subscribe / resource_names_unsubscribe with
//     just the difference.
//
// envoysim then applies the whole set it holds for the type as one
// state-of-the-world update (applyResponse), so a delta and a
// state-of-the-world Envoy of the same resources reach the same state. A
// rejected response leaves what it holds of the type as it was.

// deltaSession runs one delta stream. It reports whether any response
// was received.
func (c *adsClient) deltaSession(ctx context.Context) (bool, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sctx = withMetadata(sctx, c.cfg.initialMetadata)
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).DeltaAggregatedResources(sctx)
	if err != nil {
		return false, fmt.Errorf("open delta stream: %w", err)
	}
	first := true
	send := func(req *discoveryv3.DeltaDiscoveryRequest) error {
		if first || c.cfg.nodeEveryRequest {
			req.Node = c.node
		}
		first = false
		if err := stream.Send(req); err != nil {
			return fmt.Errorf("send %s: %w", req.GetTypeUrl(), err)
		}
		return nil
	}
	for _, t := range c.subscribedTypes() {
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t, InitialResourceVersions: maps.Clone(c.held[t].versions)}
		if t == typeEndpoint || t == typeRoute {
			names := c.e.subscription(t)
			c.sent[t] = names
			if len(names) == 0 {
				continue
			}
			req.ResourceNamesSubscribe = names
		}
		if err := send(req); err != nil {
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
		if err := c.handleDelta(ctx, resp, send); err != nil {
			return got, err
		}
	}
}

// heldResources is what a delta client holds of one type.
type heldResources struct {
	resources map[string]*anypb.Any
	versions  map[string]string
}

// handleDelta applies a delta response onto what the client holds, ACKs
// or NACKs it, then updates the endpoint or route subscription a cluster
// or listener update changed.
func (c *adsClient) handleDelta(ctx context.Context, resp *discoveryv3.DeltaDiscoveryResponse, send func(*discoveryv3.DeltaDiscoveryRequest) error) error {
	t := resp.GetTypeUrl()
	switch t {
	case typeCluster, typeListener, typeEndpoint, typeRoute:
	default:
		c.e.log.WarnContext(ctx, "ignoring unwatched type URL", "type", t)
		return nil
	}
	cur := c.held[t]
	next := heldResources{resources: maps.Clone(cur.resources), versions: maps.Clone(cur.versions)}
	if next.resources == nil {
		next.resources, next.versions = map[string]*anypb.Any{}, map[string]string{}
	}
	for _, r := range resp.GetResources() {
		next.resources[r.GetName()], next.versions[r.GetName()] = r.GetResource(), r.GetVersion()
	}
	for _, name := range resp.GetRemovedResources() {
		delete(next.resources, name)
		delete(next.versions, name)
	}
	whole := &discoveryv3.DiscoveryResponse{TypeUrl: t, VersionInfo: resp.GetSystemVersionInfo(), Nonce: resp.GetNonce()}
	for _, name := range slices.Sorted(maps.Keys(next.resources)) {
		whole.Resources = append(whole.Resources, next.resources[name])
	}
	applyErr := c.e.applyResponse(ctx, whole)
	req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t, ResponseNonce: resp.GetNonce()}
	if applyErr == nil {
		c.held[t] = next
	} else {
		req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: applyErr.Error()}
	}
	if err := c.answered(ctx, t, resp.GetSystemVersionInfo(), applyErr); err != nil {
		return err
	}
	if err := send(req); err != nil {
		return err
	}
	dep := map[string]string{typeCluster: typeEndpoint, typeListener: typeRoute}[t]
	if dep == "" {
		return nil
	}
	names := c.e.subscription(dep)
	add, drop := difference(names, c.sent[dep]), difference(c.sent[dep], names)
	if len(add) == 0 && len(drop) == 0 {
		return nil
	}
	c.sent[dep] = names
	for _, name := range drop { // no longer wanted: forgotten
		delete(c.held[dep].resources, name)
		delete(c.held[dep].versions, name)
	}
	return send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: dep, ResourceNamesSubscribe: add, ResourceNamesUnsubscribe: drop})
}

// difference lists the names of a that b lacks, in a's order.
func difference(a, b []string) []string {
	var out []string
	for _, n := range a {
		if !slices.Contains(b, n) {
			out = append(out, n)
		}
	}
	return out
}
