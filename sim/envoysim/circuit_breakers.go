package envoysim

import (
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// circuitBreakers is the compiled DEFAULT priority threshold of a cluster
// (ClusterInfoImpl::ResourceManagers::load, source/common/upstream/
// upstream_impl.cc): the first threshold of that priority, defaults 1024
// connections, 1024 pending requests, 1024 requests and 3 retries; a
// retry_budget (budget_percent default 20 %, min_retry_concurrency default
// 3) replaces max_retries. Thresholds of priority HIGH are inert: routes
// always use the DEFAULT priority (RouteAction.priority is refused).
// max_connections is accepted but not enforced: envoysim does not model the
// connection pool's connection limit.
type circuitBreakers struct {
	maxPending  uint64
	maxRequests uint64
	maxRetries  uint64
	budget      bool
	budgetPct   float64
	minRetryCon uint64
}

func compileCircuitBreakers(cb *clusterv3.CircuitBreakers) circuitBreakers {
	c := circuitBreakers{maxPending: 1024, maxRequests: 1024, maxRetries: 3}
	for _, t := range cb.GetThresholds() {
		if t.GetPriority() != corev3.RoutingPriority_DEFAULT {
			continue
		}
		if v := t.GetMaxPendingRequests(); v != nil {
			c.maxPending = uint64(v.GetValue())
		}
		if v := t.GetMaxRequests(); v != nil {
			c.maxRequests = uint64(v.GetValue())
		}
		if v := t.GetMaxRetries(); v != nil {
			c.maxRetries = uint64(v.GetValue())
		}
		if rb := t.GetRetryBudget(); rb != nil {
			c.budget, c.budgetPct, c.minRetryCon = true, 20, 3
			if p := rb.GetBudgetPercent(); p != nil {
				c.budgetPct = p.GetValue()
			}
			if m := rb.GetMinRetryConcurrency(); m != nil {
				c.minRetryCon = uint64(m.GetValue())
			}
		}
		break
	}
	return c
}

// resourceManager is ResourceManagerImpl (source/common/upstream/
// resource_manager_impl.h) for the DEFAULT priority: pending requests
// (waiting for a connection), requests (attached to a connection) and
// retries in flight, each checked with canCreate (count < max) before it is
// taken.
type resourceManager struct {
	cfg circuitBreakers

	mu       sync.Mutex
	pending  uint64
	requests uint64
	retries  uint64
}

func newResourceManager(cfg circuitBreakers) *resourceManager {
	return &resourceManager{cfg: cfg}
}

// tryPending takes a pending request slot; false is an overflow.
func (r *resourceManager) tryPending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending >= r.cfg.maxPending {
		return false
	}
	r.pending++
	return true
}

func (r *resourceManager) releasePending() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending--
}

// tryRequest takes an active request slot; false is an overflow.
func (r *resourceManager) tryRequest() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.requests >= r.cfg.maxRequests {
		return false
	}
	r.requests++
	return true
}

func (r *resourceManager) releaseRequest() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests--
}

// tryRetry is retries().canCreate() followed by retries().inc(). With a
// retry budget the limit is RetryBudgetImpl::max():
// max(uint64(budget_percent / 100 × (requests + pending)), min_retry_concurrency).
func (r *resourceManager) tryRetry() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	limit := r.cfg.maxRetries
	if r.cfg.budget {
		limit = max(uint64(r.cfg.budgetPct/100*float64(r.requests+r.pending)), r.cfg.minRetryCon)
	}
	if r.retries >= limit {
		return false
	}
	r.retries++
	return true
}

func (r *resourceManager) releaseRetry() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retries--
}
