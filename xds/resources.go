package xds

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/weights"
)

// Resources are the Envoy resources of one source.
type Resources struct {
	Clusters  []*clusterv3.Cluster
	Endpoints []*endpointv3.ClusterLoadAssignment
	Routes    []*routev3.RouteConfiguration
	Listeners []*listenerv3.Listener
}

// Build translates the configuration, weights and endpoints into the
// resources of source. c must be valid and w computed from it; eps may be
// nil (the configured endpoints, all healthy).
func Build(c *config.Config, w *weights.Weights, eps Endpoints, source string) (*Resources, error) {
	s, ok := c.Source(source)
	if !ok {
		return nil, fmt.Errorf("unknown source %q", source)
	}
	cds, eds, err := engineClusters(c, eps, s)
	if err != nil {
		return nil, fmt.Errorf("source %s: clusters: %w", source, err)
	}
	lds, err := listener(c, s)
	if err != nil {
		return nil, fmt.Errorf("source %s: listener: %w", source, err)
	}
	return &Resources{
		Clusters:  cds,
		Endpoints: eds,
		Routes:    []*routev3.RouteConfiguration{routeConfig(c, w, s)},
		Listeners: []*listenerv3.Listener{lds},
	}, nil
}

// byType lists the resources per xDS type URL, each list in a fixed order.
func (r *Resources) byType() map[resource.Type][]types.Resource {
	return map[resource.Type][]types.Resource{
		resource.ClusterType:  asResources(r.Clusters),
		resource.EndpointType: asResources(r.Endpoints),
		resource.RouteType:    asResources(r.Routes),
		resource.ListenerType: asResources(r.Listeners),
	}
}

func asResources[T types.Resource](in []T) []types.Resource {
	out := make([]types.Resource, len(in))
	for i, v := range in {
		out[i] = v
	}
	return out
}

// Snapshot checks the resources and packs them into a go-control-plane
// snapshot. Each type's version is the hash of that type's content, so an
// Envoy is sent only the types that changed and a version never names two
// contents, across restarts too. Every resource passes Validate
// (ValidateAll recursively into every Any), routes name only clusters of
// this source (see checkReferences) and the snapshot passes Consistent
// (every referenced EDS and RDS resource is present).
func (r *Resources) Snapshot() (*cache.Snapshot, error) {
	snap := &cache.Snapshot{}
	var errs []error
	for typ, items := range r.byType() {
		for _, it := range items {
			if err := envoy.Validate(it); err != nil {
				errs = append(errs, fmt.Errorf("%s %q: %w", shortType(typ), cache.GetResourceName(it), err))
			}
		}
		v, err := contentVersion(items)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		snap.Resources[cache.GetResponseType(typ)] = cache.NewResources(v, items)
	}
	errs = append(errs, r.checkReferences()...)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("invalid resources: %w", err)
	}
	if err := snap.Consistent(); err != nil {
		return nil, fmt.Errorf("inconsistent snapshot: %w", err)
	}
	return snap, nil
}

// contentVersion hashes the deterministic encoding of resources sorted by
// name: 16 hex digits.
func contentVersion(items []types.Resource) (string, error) {
	sorted := slices.Clone(items)
	slices.SortFunc(sorted, func(a, b types.Resource) int {
		return cmp.Compare(cache.GetResourceName(a), cache.GetResourceName(b))
	})
	h := sha256.New()
	opts := proto.MarshalOptions{Deterministic: true}
	for _, it := range sorted {
		b, err := opts.Marshal(it)
		if err != nil {
			return "", fmt.Errorf("marshal %q: %w", cache.GetResourceName(it), err)
		}
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)[:8]), nil
}

// shortType names an xDS type URL for logs and metric labels.
func shortType(t resource.Type) string {
	switch t {
	case resource.ClusterType:
		return "cluster"
	case resource.EndpointType:
		return "endpoint"
	case resource.RouteType:
		return "route"
	case resource.ListenerType:
		return "listener"
	}
	return "other"
}
