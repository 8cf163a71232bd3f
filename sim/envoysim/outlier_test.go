package envoysim

import (
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// outlierHarness runs a least request EDS cluster "pool" with ILB's outlier
// detection over the given hosts (closed ones have no backend), a plain
// route without retries, random host picks and a fake clock.
func outlierHarness(t *testing.T, hosts []testHost) (*harness, *fakeClock, []string, []*backend) {
	t.Helper()
	h := newHarness(t, nil)
	cla := loadAssignment("pool")
	var addrs []string
	var ups []*backend
	for i, th := range hosts {
		addr := closedAddr(t)
		var b *backend
		if !th.closed {
			b = startBackend(t, "h"+strconv.Itoa(i), th.app)
			addr = b.addr()
		}
		ups = append(ups, b)
		addrs = append(addrs, addr)
		cla.Endpoints[0].LbEndpoints = append(cla.Endpoints[0].LbEndpoints, lbEndpoint(addr, corev3.HealthStatus_HEALTHY))
	}
	cl := edsCluster("pool", clusterv3.Cluster_LEAST_REQUEST)
	cl.OutlierDetection = ilbOutlier()
	h.push(cl, cla, httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"}, routeTo("pool"))))
	clock := newFakeClock()
	h.startOpts(Options{Clock: clock})
	clock.waitSleepers(t, 1) // the outlier detection interval timer
	return h, clock, addrs, ups
}

// sendUntil sends requests until cond holds (at most 100).
func sendUntil(t *testing.T, h *harness, what string, cond func() bool) {
	t.Helper()
	for range 100 {
		if cond() {
			return
		}
		_, _ = doErr("GET", h.url("main", "/"), "")
	}
	t.Fatalf("no %s after 100 requests", what)
}

// tick advances the fake clock by d and waits for the detector's next
// interval timer.
func tick(t *testing.T, clock *fakeClock, d time.Duration) {
	t.Helper()
	clock.Advance(d)
	clock.waitSleepers(t, 1)
}

// TestOutlierEjection: consecutive 5xx and gateway failures (connect
// failures included) eject a host, which gets no traffic until the interval
// timer finds base_ejection_time × ejections elapsed; max_ejection_percent
// (50 %) keeps one of two failing hosts in.
func TestOutlierEjection(t *testing.T) {
	t.Run("consecutive 5xx, then back after base_ejection_time, longer the second time", func(t *testing.T) {
		h, clock, addrs, ups := outlierHarness(t, []testHost{{app: always(500)}, {}})
		sendUntil(t, h, "five 500s", func() bool { return len(ups[0].appRequests()) == 5 })
		waitFor(t, "ejection", func() bool { return slices.Equal(healthyHosts(h.env, "pool"), addrs[1:]) })
		for range 6 {
			if got := do(t, "GET", h.url("main", "/"), nil, ""); got.status != 200 {
				t.Fatalf("request while ejected: %d", got.status)
			}
		}
		if n := len(ups[0].appRequests()); n != 5 {
			t.Errorf("ejected host got %d requests, want 5", n)
		}
		st := h.env.Stats().Clusters["pool"]
		if st.OutlierDetectedConsecutive5xx != 1 || st.OutlierEjectionsEnforced != 1 || st.OutlierEjectionsActive != 1 {
			t.Errorf("stats %+v", st)
		}
		tick(t, clock, 25*time.Second)
		if len(healthyHosts(h.env, "pool")) != 1 {
			t.Fatal("unejected before base_ejection_time")
		}
		tick(t, clock, 5*time.Second)
		waitFor(t, "unejection after 30s", func() bool { return len(healthyHosts(h.env, "pool")) == 2 })

		// Ejected again: the backoff doubles the ejection time.
		sendUntil(t, h, "five more 500s", func() bool { return len(ups[0].appRequests()) == 10 })
		waitFor(t, "second ejection", func() bool { return len(healthyHosts(h.env, "pool")) == 1 })
		tick(t, clock, 30*time.Second)
		if len(healthyHosts(h.env, "pool")) != 1 {
			t.Fatal("second ejection lasted only base_ejection_time")
		}
		tick(t, clock, 30*time.Second)
		waitFor(t, "unejection after 60s", func() bool { return len(healthyHosts(h.env, "pool")) == 2 })
	})
	t.Run("gateway errors", func(t *testing.T) {
		h, _, addrs, ups := outlierHarness(t, []testHost{{app: always(503)}, {}})
		sendUntil(t, h, "three 503s", func() bool { return len(ups[0].appRequests()) == 3 })
		waitFor(t, "ejection", func() bool { return slices.Equal(healthyHosts(h.env, "pool"), addrs[1:]) })
		if st := h.env.Stats().Clusters["pool"]; st.OutlierDetectedGatewayFailure != 1 || st.OutlierDetectedConsecutive5xx != 0 {
			t.Errorf("stats %+v", st)
		}
	})
	t.Run("connect failures", func(t *testing.T) {
		h, _, addrs, _ := outlierHarness(t, []testHost{closedHost(), {}})
		sendUntil(t, h, "three connect failures", func() bool { return h.env.Stats().UpstreamConnectFailures == 3 })
		waitFor(t, "ejection", func() bool { return slices.Equal(healthyHosts(h.env, "pool"), addrs[1:]) })
	})
	t.Run("max_ejection_percent", func(t *testing.T) {
		h, _, _, ups := outlierHarness(t, []testHost{{app: always(500)}, {app: always(500)}})
		sendUntil(t, h, "five 500s on both hosts", func() bool { return len(ups[0].appRequests()) >= 5 && len(ups[1].appRequests()) >= 5 })
		st := h.env.Stats().Clusters["pool"]
		if st.OutlierEjectionsActive != 1 || st.OutlierEjectionsOverflow == 0 || len(healthyHosts(h.env, "pool")) != 1 {
			t.Errorf("stats %+v healthy %v: want one ejection and an overflow", st, healthyHosts(h.env, "pool"))
		}
	})
}

// TestEjectionPercent checks DetectorImpl::ejectHost's limit: an ejection
// is allowed while 100 × (ejected + 1) / hosts ≤ max_ejection_percent; with
// always_eject_one_host the first ejection is always allowed. Envoy does
// not otherwise guarantee one: with one host and 50 % nothing is ejected.
func TestEjectionPercent(t *testing.T) {
	for _, c := range []struct {
		name       string
		hosts      int
		maxPercent uint64
		alwaysOne  bool
		want       int // hosts ejected when all fail
	}{
		{"one host, 50%", 1, 50, false, 0},
		{"one host, 50%, always_eject_one_host", 1, 50, true, 1},
		{"two hosts, 50%", 2, 50, false, 1},
		{"three hosts, 50%", 3, 50, false, 1},
		{"four hosts, 50%", 4, 50, false, 2},
		{"ten hosts, default 10%", 10, 10, false, 1},
		{"four hosts, 100%", 4, 100, false, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			od := &outlierConfig{
				interval: 5 * time.Second, baseEjectionTime: 30 * time.Second, maxEjectionTime: 300 * time.Second,
				consecutive5xx: 1, consecutiveGatewayFailure: 1, maxEjectionPercent: c.maxPercent,
				enforcingConsecutive5xx: 100, alwaysEjectOneHost: c.alwaysOne,
			}
			rt := testRuntime(t, &clusterConfig{name: "c", outlier: od}, 0)
			var specs []hostSpec
			for i := range c.hosts {
				specs = append(specs, hostSpec{addr: "10.0.0." + strconv.Itoa(i+1) + ":80", weight: 1})
			}
			members := rt.syncMembers(specs)
			for _, hs := range members {
				rt.putStatus(hs, http.StatusInternalServerError)
			}
			ejected := 0
			for _, hs := range members {
				if hs.od.ejected {
					ejected++
				}
			}
			if ejected != c.want {
				t.Errorf("%d ejected, want %d", ejected, c.want)
			}
		})
	}
}

// TestSuccessRateEjection checks processSuccessRateEjections (on by
// default): with five hosts of volume 100, success rates
// {50, 100, 100, 100, 100} give mean 90, stdev 20 and a threshold of
// 90 − 1.9 × 20 = 52, so the first host is ejected at the interval.
func TestSuccessRateEjection(t *testing.T) {
	od := &outlierConfig{
		interval: 10 * time.Second, baseEjectionTime: 30 * time.Second, maxEjectionTime: 300 * time.Second,
		consecutive5xx: 1000, consecutiveGatewayFailure: 1000, maxEjectionPercent: 100,
		enforcingSuccessRate: 100, successRateMinimumHosts: 5, successRateRequestVolume: 100,
		successRateStdevFactor: 1900, failurePercentageThreshold: 85, failurePercentageMinHosts: 5,
		failurePercentageReqVolume: 50,
	}
	rt := testRuntime(t, &clusterConfig{name: "c", outlier: od}, 0)
	var specs []hostSpec
	for i := range 5 {
		specs = append(specs, hostSpec{addr: "10.0.0." + strconv.Itoa(i+1) + ":80", weight: 1})
	}
	members := rt.syncMembers(specs)
	for i, hs := range members {
		for n := range 100 {
			code := http.StatusOK
			if i == 0 && n%2 == 0 {
				code = http.StatusInternalServerError
			}
			rt.putStatus(hs, code)
		}
	}
	rt.mu.Lock()
	changed := rt.od.onIntervalLocked(rt.clock.Now())
	rt.mu.Unlock()
	if !changed || !members[0].od.ejected || slices.ContainsFunc(members[1:], func(hs *hostState) bool { return hs.od.ejected }) {
		t.Errorf("ejected: %v %v %v %v %v", members[0].od.ejected, members[1].od.ejected, members[2].od.ejected, members[3].od.ejected, members[4].od.ejected)
	}
}
