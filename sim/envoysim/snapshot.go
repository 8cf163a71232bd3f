package envoysim

import (
	"context"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"
)

// snapshot is the immutable routing state a request uses from start to end:
// clusters with their hosts, listeners and route tables. A new snapshot is
// swapped in atomically after every accepted configuration change.
type snapshot struct {
	clusters  map[string]*cluster
	listeners map[string]*listenerConfig
	routes    map[string]*routeTable
}

// configState is the configuration as received (bootstrap and xDS) and the
// clusters built from it. It is only touched with Envoy.cfgMu held.
type configState struct {
	staticClusters  map[string]*clusterConfig
	cdsClusters     map[string]*clusterConfig
	loadAssignments map[string]*endpointSet // EDS, by service name
	dnsHosts        map[string][]hostSpec   // DNS clusters, by cluster name
	runtimes        map[string]*clusterRuntime
	retiring        map[string]*clusterRuntime // replaced runtimes serving while the new one initializes
	built           map[string]*cluster
	staticListeners map[string]*listenerConfig
	ldsListeners    map[string]*listenerConfig
	routes          map[string]*routeTable
	cdsReceived     bool
	ldsReceived     bool
	changed         chan struct{} // closed and replaced on every change
}

func newConfigState() *configState {
	return &configState{
		staticClusters:  map[string]*clusterConfig{},
		cdsClusters:     map[string]*clusterConfig{},
		loadAssignments: map[string]*endpointSet{},
		dnsHosts:        map[string][]hostSpec{},
		runtimes:        map[string]*clusterRuntime{},
		retiring:        map[string]*clusterRuntime{},
		built:           map[string]*cluster{},
		staticListeners: map[string]*listenerConfig{},
		ldsListeners:    map[string]*listenerConfig{},
		routes:          map[string]*routeTable{},
		changed:         make(chan struct{}),
	}
}

// clusterConfigFor returns the configuration of a cluster, bootstrap first.
func (s *configState) clusterConfigFor(name string) *clusterConfig {
	if cc, ok := s.staticClusters[name]; ok {
		return cc
	}
	return s.cdsClusters[name]
}

func (s *configState) clusterExists(name string) bool {
	return s.clusterConfigFor(name) != nil
}

func (s *configState) allClusterConfigs() []*clusterConfig {
	out := slices.Collect(maps.Values(s.staticClusters))
	return append(out, slices.Collect(maps.Values(s.cdsClusters))...)
}

func (s *configState) allListeners() map[string]*listenerConfig {
	out := maps.Clone(s.staticListeners)
	maps.Copy(out, s.ldsListeners)
	return out
}

// edsNames is the sorted EDS subscription: the service name of every EDS
// cluster.
func (s *configState) edsNames() []string {
	set := map[string]bool{}
	for _, cc := range s.allClusterConfigs() {
		if cc.kind == kindEDS {
			set[cc.serviceName] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// rdsNames is the sorted RDS subscription: every route_config_name of a
// listener's HCM.
func (s *configState) rdsNames() []string {
	set := map[string]bool{}
	for _, lc := range s.allListeners() {
		if lc.hcm.rdsName != "" {
			set[lc.hcm.rdsName] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// installCluster (re)builds the cluster for cc, creating a new runtime
// (connection pool, hosts, health checker, outlier detector, circuit
// breakers) when the definition changed. As Envoy's cluster manager warms an
// updated cluster before swapping it in, the replaced runtime keeps serving
// until the new one is initialized. The runtime's goroutines live on ctx.
func (e *Envoy) installCluster(ctx context.Context, cc *clusterConfig) {
	st := e.state
	rt := st.runtimes[cc.name]
	if rt != nil && !proto.Equal(rt.cfg.proto, cc.proto) {
		if old := st.retiring[cc.name]; old != nil {
			old.close()
		}
		st.retiring[cc.name] = rt
		rt = nil
	}
	if rt == nil {
		rt = newClusterRuntime(cc, e.rand(), runtimeDeps{clock: e.clock, rand: e.rand, stats: e.stats, onChange: e.refreshCluster})
		rt.start(ctx, &e.bg)
		st.runtimes[cc.name] = rt
	}
	if cc.kind == kindStrictDNS || cc.kind == kindLogicalDNS {
		hosts, err := resolveEndpoints(ctx, e.resolver, cc, cc.endpoints)
		if err != nil {
			e.log.WarnContext(ctx, "dns resolution failed", "cluster", cc.name, "error", err)
		}
		st.dnsHosts[cc.name] = hosts
	}
	e.buildClusterLocked(cc)
}

// buildClusterLocked builds cc from the current endpoint state and host
// health. An EDS cluster without a ClusterLoadAssignment yet is warming and
// not built; a cluster whose first health check round is not complete is
// not published (or its replaced runtime keeps serving).
func (e *Envoy) buildClusterLocked(cc *clusterConfig) {
	st := e.state
	var hosts []hostSpec
	overprovisioning := uint32(defaultOverprovisioning)
	switch cc.kind {
	case kindEDS:
		set := st.loadAssignments[cc.serviceName]
		if set == nil {
			if st.retiring[cc.name] == nil {
				delete(st.built, cc.name)
			}
			return
		}
		overprovisioning = set.overprovisioning
		for _, ep := range set.endpoints {
			hosts = append(hosts, hostSpec{addr: joinHostPort(ep.address, ep.port), weight: ep.weight, health: ep.health})
		}
	case kindStatic:
		if cc.endpoints != nil {
			overprovisioning = cc.endpoints.overprovisioning
			for _, ep := range cc.endpoints.endpoints {
				hosts = append(hosts, hostSpec{addr: joinHostPort(ep.address, ep.port), weight: ep.weight, health: ep.health})
			}
		}
	default:
		if cc.endpoints != nil {
			overprovisioning = cc.endpoints.overprovisioning
		}
		hosts = st.dnsHosts[cc.name]
	}
	rt := st.runtimes[cc.name]
	rt.syncMembers(hosts)
	if !rt.isInitialized() {
		if st.retiring[cc.name] == nil {
			delete(st.built, cc.name)
		}
		return
	}
	if old := st.retiring[cc.name]; old != nil {
		old.close()
		delete(st.retiring, cc.name)
	}
	view, latest := rt.view(e.clock.Now())
	st.built[cc.name] = buildCluster(cc, rt, view, overprovisioning, latest)
}

// refreshCluster rebuilds and publishes the cluster of rt after a health,
// outlier or initialization change, when rt is still its runtime.
func (e *Envoy) refreshCluster(rt *clusterRuntime) {
	e.cfgMu.Lock()
	defer e.cfgMu.Unlock()
	st := e.state
	cc := st.clusterConfigFor(rt.cfg.name)
	if cc == nil || st.runtimes[cc.name] != rt {
		return
	}
	e.buildClusterLocked(cc)
	e.publishLocked()
}

// removeClusterLocked drops a cluster and its runtimes.
func (e *Envoy) removeClusterLocked(name string) {
	st := e.state
	delete(st.built, name)
	delete(st.dnsHosts, name)
	if rt := st.runtimes[name]; rt != nil {
		rt.close()
		delete(st.runtimes, name)
	}
	if rt := st.retiring[name]; rt != nil {
		rt.close()
		delete(st.retiring, name)
	}
}

// publishLocked swaps in a snapshot of the current state and wakes
// WaitReady.
func (e *Envoy) publishLocked() {
	st := e.state
	e.snap.Store(&snapshot{
		clusters:  maps.Clone(st.built),
		listeners: st.allListeners(),
		routes:    maps.Clone(st.routes),
	})
	close(st.changed)
	st.changed = make(chan struct{})
}

// readyLocked reports whether the initial configuration is in place: the
// first CDS and LDS responses (when subscribed) accepted, every EDS cluster
// warmed by its first ClusterLoadAssignment, every health checked cluster
// through its first health check round, every listener bound and every
// RDS route table loaded.
func (e *Envoy) readyLocked() bool {
	st := e.state
	if e.ads != nil && ((e.ads.cds && !st.cdsReceived) || (e.ads.lds && !st.ldsReceived)) {
		return false
	}
	for _, cc := range st.allClusterConfigs() {
		if cc.kind == kindEDS && st.loadAssignments[cc.serviceName] == nil {
			return false
		}
		if rt := st.runtimes[cc.name]; rt != nil && !rt.isInitialized() {
			return false
		}
	}
	listeners := st.allListeners()
	if !e.listeners.bound(slices.Collect(maps.Keys(listeners))) {
		return false
	}
	for _, lc := range listeners {
		if lc.hcm.rdsName != "" && st.routes[lc.hcm.rdsName] == nil {
			return false
		}
	}
	return true
}
