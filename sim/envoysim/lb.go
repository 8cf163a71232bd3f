package envoysim

import (
	"container/heap"
	"math"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// hostHealth is the coarse health of a host as the load balancer sees it.
type hostHealth int

const (
	hostHealthy hostHealth = iota
	hostDegraded
	hostUnhealthy
	hostExcluded
)

// healthOf maps an EDS health_status: UNKNOWN and HEALTHY are healthy;
// DEGRADED is degraded; UNHEALTHY and TIMEOUT fail EDS health
// (FAILED_EDS_HEALTH); DRAINING excludes the host from the health
// computation (EDS_STATUS_DRAINING, runtime exclude_host_in_eds_status_draining,
// source/common/upstream/upstream_impl.cc setEdsHealthFlag).
func healthOf(s corev3.HealthStatus) hostHealth {
	switch s {
	case corev3.HealthStatus_UNKNOWN, corev3.HealthStatus_HEALTHY:
		return hostHealthy
	case corev3.HealthStatus_DEGRADED:
		return hostDegraded
	case corev3.HealthStatus_DRAINING:
		return hostExcluded
	default:
		return hostUnhealthy
	}
}

// host is an upstream host of a built cluster: its state at build time
// and a pointer to its runtime state.
type host struct {
	addr       string
	weight     uint32
	health     hostHealth
	excluded   bool
	lastHCPass time.Time
	st         *hostState
}

// Host sources, as LoadBalancerBase::HostsSource::SourceType.
const (
	srcAll = iota
	srcHealthy
	srcDegraded
	numSources
)

// cluster is a cluster of a snapshot: its configuration, its hosts and the
// priority-0 load computation of LoadBalancerBase::recalculatePerPriorityState
// and recalculatePerPriorityPanic (source/extensions/load_balancing_policies/
// common/load_balancer_impl.cc).
type cluster struct {
	cfg          *clusterConfig
	rt           *clusterRuntime
	sources      [numSources][]*host
	healthyLoad  uint32
	degradedLoad uint32
	panic        bool

	latestHostAdded time.Time // slow start: latest_host_added_time_ at build

	hostMap map[string]*host // cross-priority host map; only with override_host (override_host.go)

	mu  sync.Mutex
	edf [numSources]*edfScheduler // only when host weights differ or a host is in slow start
}

// buildCluster computes the host sets and loads for hosts, as
// ClusterImplBase::partitionHostList and LoadBalancerBase::
// recalculatePerPriorityState do: healthy and degraded lists by coarse
// health, excluded hosts not counted. With slow start, a source gets an EDF
// scheduler while any host is in its slow start window even when weights are
// equal (EdfLoadBalancerBase::refresh).
func buildCluster(cfg *clusterConfig, rt *clusterRuntime, hosts []hostView, overprovisioning uint32, latestHostAdded time.Time) *cluster {
	c := &cluster{cfg: cfg, rt: rt, latestHostAdded: latestHostAdded}
	excluded := 0
	for _, hv := range hosts {
		h := &host{addr: hv.st.addr, weight: hv.weight, health: hv.health, excluded: hv.excluded, lastHCPass: hv.lastHCPass, st: hv.st}
		c.sources[srcAll] = append(c.sources[srcAll], h)
		switch h.health {
		case hostHealthy:
			c.sources[srcHealthy] = append(c.sources[srcHealthy], h)
		case hostDegraded:
			c.sources[srcDegraded] = append(c.sources[srcDegraded], h)
		}
		if h.excluded {
			excluded++
		}
	}
	count := uint64(len(c.sources[srcAll]) - excluded)
	nHealthy, nDegraded := uint64(len(c.sources[srcHealthy])), uint64(len(c.sources[srcDegraded]))
	var health, degraded uint64
	if count > 0 {
		health = min(100, uint64(overprovisioning)*nHealthy/count)
		degraded = min(100, uint64(overprovisioning)*nDegraded/count)
	}
	normalized := min(100, health+degraded)
	if normalized > 0 {
		hl := min(100, health*100/normalized)
		dl := min(100-hl, degraded*100/normalized)
		if rem := 100 - hl - dl; rem != 0 {
			if health > 0 {
				hl += rem
			} else {
				dl += rem
			}
		}
		c.healthyLoad, c.degradedLoad = uint32(hl), uint32(dl)
	}
	threshold := uint64(math.Round(min(100, cfg.panicThreshold)))
	switch {
	case threshold == 0 && normalized == 0:
		c.healthyLoad = 100
	case normalized == 100:
		c.panic = false
	default:
		var pct float64
		if count > 0 {
			pct = 100 * float64(nHealthy+nDegraded) / float64(count)
		}
		c.panic = pct < float64(threshold)
	}
	if c.panic {
		c.healthyLoad, c.degradedLoad = 100, 0 // recalculateLoadInTotalPanic with one priority
	}
	if cfg.override != nil {
		c.hostMap = buildHostMap(c.sources[srcAll])
	}
	now := rt.clock.Now()
	for src, hs := range c.sources {
		if len(hs) > 1 && (!weightsEqual(hs) || !c.noHostsInSlowStart(now)) {
			c.edf[src] = newEDF(hs, c.hostWeight)
		}
	}
	return c
}

func weightsEqual(hs []*host) bool {
	for _, h := range hs {
		if h.weight != hs[0].weight {
			return false
		}
	}
	return true
}

// hostWeight is the EDF weight: the configured weight for round robin, and
// weight / (active + 1) for least request (active_request_bias 1.0,
// least_request_lb.cc hostWeight); while any host is in slow start it is
// scaled by the host's slow start factor (applySlowStartFactor), which only
// applies to healthy hosts.
func (c *cluster) hostWeight(h *host) float64 {
	w := float64(h.weight)
	if c.cfg.lb == lbLeastRequest {
		w /= float64(h.st.active.Load() + 1)
	}
	if ss := c.cfg.slowStart; ss != nil && h.health == hostHealthy && !h.lastHCPass.IsZero() {
		if now := c.rt.clock.Now(); !c.noHostsInSlowStart(now) {
			w *= ss.factor(h.lastHCPass, now)
		}
	}
	return w
}

// noHostsInSlowStart is EdfLoadBalancerBase::noHostsAreInSlowStart: false
// while the latest host became healthy within the slow start window.
func (c *cluster) noHostsInSlowStart(now time.Time) bool {
	ss := c.cfg.slowStart
	return ss == nil || now.Sub(c.latestHostAdded) > ss.window
}

// lbContext is the router's LoadBalancerContext for a retry
// (router.h shouldSelectAnotherHost, hostSelectionRetryCount).
type lbContext struct {
	retry       bool
	maxAttempts uint32                 // host_selection_retry_max_attempts
	avoid       func(addr string) bool // retry host predicates
	req         *lbRequest             // the request picked for (override_host); nil: none
}

// chooseHostBase is ZoneAwareLoadBalancerBase::chooseHost, the cluster's
// policy (or override_host's fallback policy, see chooseHost): up to
// hostSelectionRetryCount()+1 picks (1+1 outside a retry), returning the
// first host the retry predicates accept, else the last one picked. Outside
// a retry the predicates accept every host.
func (c *cluster) chooseHostBase(rand func() uint64, lc *lbContext) *host {
	attempts := 2
	if lc != nil && lc.retry {
		attempts = int(lc.maxAttempts) + 1
	}
	var h *host
	for range attempts {
		h = c.chooseHostOnce(rand)
		if h == nil || lc == nil || !lc.retry || lc.avoid == nil || !lc.avoid(h.addr) {
			return h
		}
	}
	return h
}

// chooseHostOnce is EdfLoadBalancerBase::chooseHostOnce for one priority:
// one random value picks healthy or degraded hosts by load (hash % 100 + 1
// against the cumulative loads), panic mode uses all hosts; then round robin
// or least request picks a host. It returns nil when the source is empty.
func (c *cluster) chooseHostOnce(rand func() uint64) *host {
	hash := rand()
	src := srcHealthy
	if c.panic {
		src = srcAll
	} else if p := uint32(hash%100 + 1); p > c.healthyLoad && p <= c.healthyLoad+c.degradedLoad {
		src = srcDegraded
	}
	hosts := c.sources[src]
	if len(hosts) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.edf[src]; e != nil {
		return e.pickAndAdd(c.hostWeight)
	}
	if c.cfg.lb == lbLeastRequest {
		// unweightedHostPickNChoices: choice_count random samples, fewest active wins, ties keep the first.
		var cand *host
		for range c.cfg.choiceCount {
			h := hosts[rand()%uint64(len(hosts))]
			if cand == nil || h.st.active.Load() < cand.st.active.Load() {
				cand = h
			}
		}
		return cand
	}
	c.rt.mu.Lock()
	i := c.rt.rrIndex[src]
	c.rt.rrIndex[src]++
	c.rt.mu.Unlock()
	return hosts[i%uint64(len(hosts))]
}

// edfScheduler is Envoy's EdfScheduler (source/common/upstream/edf_scheduler.h):
// each entry's deadline is the current time plus 1/weight; the earliest
// deadline (then the earliest insertion) is picked and re-added with its
// current weight. envoysim does not pre-pick a random number of entries.
type edfScheduler struct {
	now   float64
	order uint64
	q     edfHeap
}

type edfEntry struct {
	deadline float64
	order    uint64
	h        *host
}

type edfHeap []edfEntry

func (q edfHeap) Len() int { return len(q) }
func (q edfHeap) Less(i, j int) bool {
	if q[i].deadline != q[j].deadline {
		return q[i].deadline < q[j].deadline
	}
	return q[i].order < q[j].order
}
func (q edfHeap) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *edfHeap) Push(x any)   { *q = append(*q, x.(edfEntry)) }
func (q *edfHeap) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func newEDF(hosts []*host, weight func(*host) float64) *edfScheduler {
	s := &edfScheduler{}
	for _, h := range hosts {
		s.add(weight(h), h)
	}
	return s
}

func (s *edfScheduler) add(w float64, h *host) {
	heap.Push(&s.q, edfEntry{deadline: s.now + 1/w, order: s.order, h: h})
	s.order++
}

func (s *edfScheduler) pickAndAdd(weight func(*host) float64) *host {
	e := heap.Pop(&s.q).(edfEntry)
	s.now = e.deadline
	s.add(weight(e.h), e.h)
	return e.h
}
