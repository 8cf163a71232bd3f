package envoysim

import (
	"context"
	"errors"
	"fmt"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/ilbproject/ilb/envoy"
)

// xDS resource type URLs.
const (
	typeCluster  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	typeEndpoint = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	typeListener = "type.googleapis.com/envoy.config.listener.v3.Listener"
	typeRoute    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
)

// decoded is one resource of a DiscoveryResponse.
type decoded struct {
	name string
	msg  proto.Message
	err  error
}

// decodeResources unpacks, validates (protoc-gen-validate, every Any
// included) and policy-checks each resource. A resource that fails carries
// its error; its name is still known when the type could be decoded.
func (e *Envoy) decodeResources(resp *discoveryv3.DiscoveryResponse) []decoded {
	out := make([]decoded, 0, len(resp.GetResources()))
	seen := map[string]bool{}
	for i, a := range resp.GetResources() {
		var target proto.Message
		var nameOf func() string
		switch resp.GetTypeUrl() {
		case typeCluster:
			m := &clusterv3.Cluster{}
			target, nameOf = m, m.GetName
		case typeListener:
			m := &listenerv3.Listener{}
			target, nameOf = m, m.GetName
		case typeRoute:
			m := &routev3.RouteConfiguration{}
			target, nameOf = m, m.GetName
		default:
			m := &endpointv3.ClusterLoadAssignment{}
			target, nameOf = m, m.GetClusterName
		}
		d := decoded{}
		if a.GetTypeUrl() != resp.GetTypeUrl() {
			d.err = fmt.Errorf("resources[%d]: type %s does not match the response type %s", i, a.GetTypeUrl(), resp.GetTypeUrl())
			out = append(out, d)
			continue
		}
		if err := a.UnmarshalTo(target); err != nil {
			d.err = fmt.Errorf("resources[%d]: %w", i, err)
			out = append(out, d)
			continue
		}
		d.name, d.msg = nameOf(), target
		switch {
		case seen[d.name]:
			d.err = fmt.Errorf("duplicate resource %q", d.name)
		default:
			if err := errors.Join(envoy.Validate(target), e.policy.check(target, d.name)); err != nil {
				d.err = fmt.Errorf("%s: %w", d.name, err)
			}
		}
		seen[d.name] = true
		out = append(out, d)
	}
	return out
}

// applyResponse applies a DiscoveryResponse. As Envoy's subscriptions do
// (CdsApiHelper::onConfigUpdate, LdsApiImpl::onConfigUpdate), every valid
// resource is applied and the errors of the others are returned, so the
// response is NACKed while they keep their previous version. For CDS and LDS
// a resource absent from the response is removed (state of the world); for
// EDS and RDS absent resources are kept and unsubscribed ones ignored.
func (e *Envoy) applyResponse(ctx context.Context, resp *discoveryv3.DiscoveryResponse) error {
	ds := e.decodeResources(resp)
	e.cfgMu.Lock()
	defer e.cfgMu.Unlock()
	var err error
	switch resp.GetTypeUrl() {
	case typeCluster:
		err = e.applyCDS(ctx, ds)
	case typeListener:
		err = e.applyLDS(ctx, ds)
	case typeEndpoint:
		err = e.applyEDS(ds)
	case typeRoute:
		err = e.applyRDS(ds)
	default:
		return fmt.Errorf("type %s is not supported", resp.GetTypeUrl())
	}
	e.publishLocked()
	return err
}

func (e *Envoy) applyCDS(ctx context.Context, ds []decoded) error {
	st := e.state
	next := map[string]*clusterConfig{}
	var errs []error
	for _, d := range ds {
		err := d.err
		var cc *clusterConfig
		if err == nil && st.staticClusters[d.name] != nil {
			err = fmt.Errorf("%s: a static cluster cannot be updated by CDS", d.name)
		}
		if err == nil {
			if cc, err = compileCluster(d.msg.(*clusterv3.Cluster)); err != nil {
				err = fmt.Errorf("%s: %w", d.name, err)
			}
		}
		if err != nil {
			errs = append(errs, err)
			if old := st.cdsClusters[d.name]; old != nil {
				next[d.name] = old
			}
			continue
		}
		if old := st.cdsClusters[d.name]; old != nil && proto.Equal(old.proto, cc.proto) {
			cc = old
		}
		next[d.name] = cc
	}
	for name := range st.cdsClusters {
		if _, ok := next[name]; !ok {
			e.removeClusterLocked(name)
		}
	}
	prev := st.cdsClusters
	st.cdsClusters = next
	for name, cc := range next {
		if prev[name] != cc {
			e.installCluster(ctx, cc)
		}
	}
	subscribed := st.edsNames()
	for name := range st.loadAssignments {
		if !slices.Contains(subscribed, name) {
			delete(st.loadAssignments, name)
		}
	}
	st.cdsReceived = true
	if len(errs) > 0 {
		return fmt.Errorf("error adding/updating cluster(s): %w", errors.Join(errs...))
	}
	return nil
}

func (e *Envoy) applyLDS(ctx context.Context, ds []decoded) error {
	st := e.state
	next := map[string]*listenerConfig{}
	var errs []error
	for _, d := range ds {
		err := d.err
		var lc *listenerConfig
		if err == nil && st.staticListeners[d.name] != nil {
			err = fmt.Errorf("%s: a static listener cannot be updated by LDS", d.name)
		}
		if err == nil {
			if lc, err = compileListener(d.msg.(*listenerv3.Listener), st.clusterExists); err != nil {
				err = fmt.Errorf("%s: %w", d.name, err)
			}
		}
		if err != nil {
			errs = append(errs, err)
			if old := st.ldsListeners[d.name]; old != nil {
				next[d.name] = old
			}
			continue
		}
		next[d.name] = lc
	}
	desired := map[string]*listenerConfig{}
	for k, v := range st.staticListeners {
		desired[k] = v
	}
	for k, v := range next {
		desired[k] = v
	}
	if err := e.listeners.reconcile(ctx, desired); err != nil {
		return fmt.Errorf("error adding/updating listener(s): %w", errors.Join(append(errs, err)...))
	}
	st.ldsListeners = next
	st.ldsReceived = true
	subscribed := st.rdsNames()
	for name := range st.routes {
		if !slices.Contains(subscribed, name) {
			delete(st.routes, name)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("error adding/updating listener(s): %w", errors.Join(errs...))
	}
	return nil
}

func (e *Envoy) applyEDS(ds []decoded) error {
	st := e.state
	subscribed := st.edsNames()
	var errs []error
	for _, d := range ds {
		if d.err == nil && !slices.Contains(subscribed, d.name) {
			e.log.Debug("ignoring unsubscribed ClusterLoadAssignment", "name", d.name)
			continue
		}
		err := d.err
		var set *endpointSet
		if err == nil {
			if set, err = compileEndpoints(d.msg.(*endpointv3.ClusterLoadAssignment)); err != nil {
				err = fmt.Errorf("%s: %w", d.name, err)
			}
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st.loadAssignments[d.name] = set
		for _, cc := range st.allClusterConfigs() {
			if cc.kind == kindEDS && cc.serviceName == d.name {
				e.buildClusterLocked(cc)
			}
		}
	}
	return errors.Join(errs...)
}

func (e *Envoy) applyRDS(ds []decoded) error {
	st := e.state
	subscribed := st.rdsNames()
	var errs []error
	for _, d := range ds {
		if d.err == nil && !slices.Contains(subscribed, d.name) {
			e.log.Debug("ignoring unsubscribed RouteConfiguration", "name", d.name)
			continue
		}
		err := d.err
		var t *routeTable
		if err == nil {
			if t, err = compileRouteTable(d.msg.(*routev3.RouteConfiguration), st.clusterExists, false); err != nil {
				err = fmt.Errorf("%s: %w", d.name, err)
			}
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st.routes[d.name] = t
	}
	return errors.Join(errs...)
}

// subscription returns the resource names to request for typeURL: none
// (wildcard) for CDS and LDS, the current EDS or RDS names otherwise.
func (e *Envoy) subscription(typeURL string) []string {
	e.cfgMu.Lock()
	defer e.cfgMu.Unlock()
	switch typeURL {
	case typeEndpoint:
		return e.state.edsNames()
	case typeRoute:
		return e.state.rdsNames()
	}
	return nil
}
