package envoysim

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// hostState is an upstream host as a cluster's runtime keeps it across
// snapshots (Envoy's HostImpl): its active request counter and its health
// flags (Host::HealthFlag). A host removed from the cluster and added again
// is a new host with fresh state.
type hostState struct {
	addr   string
	active atomic.Int64 // rq_active: requests attached to a connection

	// Guarded by clusterRuntime.mu.
	weight           uint32
	eds              hostHealth // the EDS health_status (hostExcluded: DRAINING)
	conns            int        // open upstream connections of the router's pool
	failedActiveHC   bool       // FAILED_ACTIVE_HC
	pendingActiveHC  bool       // PENDING_ACTIVE_HC
	degradedActiveHC bool       // DEGRADED_ACTIVE_HC
	immediateHCFail  bool       // EXCLUDED_VIA_IMMEDIATE_HC_FAIL
	pendingRemoval   bool       // PENDING_DYNAMIC_REMOVAL
	lastHCPass       time.Time  // zero: unset
	od               outlierHost
}

// coarse is HostImplBase::coarseHealth: FAILED_ACTIVE_HC,
// FAILED_OUTLIER_CHECK, FAILED_EDS_HEALTH (UNHEALTHY, TIMEOUT) and
// EDS_STATUS_DRAINING make a host unhealthy; DEGRADED_ACTIVE_HC and
// DEGRADED_EDS_HEALTH degraded; PENDING_DYNAMIC_REMOVAL alone keeps it
// healthy (source/common/upstream/upstream_impl.h).
func (h *hostState) coarse() hostHealth {
	switch {
	case h.failedActiveHC, h.od.ejected, h.eds == hostUnhealthy, h.eds == hostExcluded:
		return hostUnhealthy
	case h.degradedActiveHC, h.eds == hostDegraded:
		return hostDegraded
	}
	return hostHealthy
}

// excluded is excludeBasedOnHealthFlag (upstream_impl.cc): PENDING_ACTIVE_HC,
// EXCLUDED_VIA_IMMEDIATE_HC_FAIL and EDS_STATUS_DRAINING hosts do not count
// in the load computation.
func (h *hostState) excluded() bool {
	return h.pendingActiveHC || h.immediateHCFail || h.eds == hostExcluded
}

// clusterRuntime is the state of a cluster that outlives snapshots while its
// definition is unchanged (Envoy's Cluster with its ClusterInfo): connection
// pool, hosts and their health, health checker, outlier detector, circuit
// breakers, load balancer indexes and slow start state.
type clusterRuntime struct {
	cfg       *clusterConfig
	transport *http.Transport
	clock     Clock
	rand      func() uint64
	stats     *statsRegistry
	resources *resourceManager
	hc        *healthChecker   // nil without active health checking
	od        *outlierDetector // nil without outlier detection
	onChange  func()           // rebuilds and publishes the cluster
	cancel    context.CancelFunc
	traffic   atomic.Bool // upstream_cx_total used: the cluster made a connection

	mu              sync.Mutex
	rrIndex         [numSources]uint64
	members         []*hostState
	byAddr          map[string]*hostState
	membersKnown    bool
	latestHostAdded time.Time // EdfLoadBalancerBase::latest_host_added_time_
	initialized     bool
}

// runtimeDeps are what a cluster runtime takes from its Envoy.
type runtimeDeps struct {
	clock    Clock
	rand     func() uint64
	stats    *statsRegistry
	onChange func(rt *clusterRuntime)
}

// newClusterRuntime creates the runtime of cc; start runs its health
// checker and outlier detector.
func newClusterRuntime(cc *clusterConfig, seed uint64, deps runtimeDeps) *clusterRuntime {
	rt := &clusterRuntime{
		cfg:             cc,
		clock:           deps.clock,
		rand:            deps.rand,
		stats:           deps.stats,
		resources:       newResourceManager(cc.cb),
		byAddr:          map[string]*hostState{},
		latestHostAdded: deps.clock.Now(),
		initialized:     cc.hc == nil,
	}
	rt.onChange = func() { deps.onChange(rt) }
	for i := range rt.rrIndex {
		rt.rrIndex[i] = seed
	}
	rt.transport = newTransport(cc, rt.connOpened, deps.stats)
	if cc.hc != nil {
		rt.hc = newHealthChecker(rt)
	}
	if cc.outlier != nil {
		rt.od = &outlierDetector{cfg: cc.outlier, rt: rt}
	}
	return rt
}

// start runs the health checker and the outlier detector until ctx is done
// or the runtime is closed; wg tracks their goroutines.
func (rt *clusterRuntime) start(ctx context.Context, wg *sync.WaitGroup) {
	ctx, rt.cancel = context.WithCancel(ctx)
	if rt.hc != nil {
		wg.Go(func() { rt.hc.run(ctx) })
	}
	if rt.od != nil {
		wg.Go(func() { rt.od.run(ctx) })
	}
}

// close stops the runtime's goroutines (without waiting for them) and
// releases the connection pool.
func (rt *clusterRuntime) close() {
	if rt.cancel != nil {
		rt.cancel()
	}
	rt.transport.CloseIdleConnections()
}

// isInitialized reports whether the cluster finished initializing: without
// active health checking at once, else when every initial host got its first
// health check result (ClusterImplBase::onInitDone).
func (rt *clusterRuntime) isInitialized() bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.initialized
}

// connOpened counts a new upstream connection to addr and returns the
// function that uncounts it when it closes. It marks the cluster as having
// made a connection (upstream_cx_total), which selects the health check
// intervals.
func (rt *clusterRuntime) connOpened(addr string) func() {
	rt.traffic.Store(true)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	hs := rt.byAddr[addr]
	if hs == nil {
		return func() {}
	}
	hs.conns++
	var once sync.Once
	return func() {
		once.Do(func() {
			rt.mu.Lock()
			defer rt.mu.Unlock()
			hs.conns--
		})
	}
}

// connReady estimates whether the router's pool has a connection ready for
// a new stream to hs (ConnPoolImplBase::newStreamImpl: ready_clients_): an
// HTTP/2 connection takes any number of streams, an HTTP/1.1 connection one.
func (rt *clusterRuntime) connReady(hs *hostState) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.cfg.http2 {
		return hs.conns > 0
	}
	return int64(hs.conns) > hs.active.Load()
}

// newTransport returns the connection pool of a cluster: HTTP/1.1, or
// prior-knowledge HTTP/2 when the cluster's protocol options select
// HTTP/2, over TCP or over the cluster's TLS transport socket (the codec
// does not depend on ALPN, as in Envoy). Compression is never added and
// the connect timeout (TLS handshake included) is the cluster's
// connect_timeout. opened is told about every connection; stats counts
// the TLS handshakes.
func newTransport(cc *clusterConfig, opened func(addr string) func(), stats *statsRegistry) *http.Transport {
	outcome := stats.tls(cc.name)
	t := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			c, err := dialUpstream(ctx, addr, cc.connectTimeout, cc.tls, outcome)
			if err != nil {
				return nil, err
			}
			return &trackedConn{Conn: c, closed: opened(addr)}, nil
		},
		DisableCompression:  true,
		MaxIdleConnsPerHost: 1024,
		Proxy:               nil,
	}
	protocols := new(http.Protocols)
	if cc.http2 {
		protocols.SetUnencryptedHTTP2(true)
	} else {
		protocols.SetHTTP1(true)
	}
	t.Protocols = protocols
	return t
}

// trackedConn reports its Close.
type trackedConn struct {
	net.Conn
	closed func()
}

func (c *trackedConn) Close() error {
	c.closed()
	return c.Conn.Close()
}
