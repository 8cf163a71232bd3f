package envoysim

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ilbproject/ilb/envoy"
)

// ilbHealthCheck is the HTTP health check ILB puts on engine clusters.
func ilbHealthCheck(path string) *corev3.HealthCheck {
	return &corev3.HealthCheck{
		Timeout:            durationpb.New(time.Second),
		Interval:           durationpb.New(5 * time.Second),
		UnhealthyThreshold: u32(2),
		HealthyThreshold:   u32(1),
		HealthChecker:      &corev3.HealthCheck_HttpHealthCheck_{HttpHealthCheck: &corev3.HealthCheck_HttpHealthCheck{Path: path}},
	}
}

// ilbGRPCHealthCheck is the gRPC health check of ILB's ext_proc cluster.
func ilbGRPCHealthCheck() *corev3.HealthCheck {
	hc := ilbHealthCheck("")
	hc.HealthChecker = &corev3.HealthCheck_GrpcHealthCheck_{GrpcHealthCheck: &corev3.HealthCheck_GrpcHealthCheck{}}
	return hc
}

// ilbOutlier is ILB's outlier detection.
func ilbOutlier() *clusterv3.OutlierDetection {
	return &clusterv3.OutlierDetection{
		Consecutive_5Xx:                    u32(5),
		ConsecutiveGatewayFailure:          u32(3),
		EnforcingConsecutive_5Xx:           u32(100),
		EnforcingConsecutiveGatewayFailure: u32(100),
		Interval:                           durationpb.New(5 * time.Second),
		BaseEjectionTime:                   durationpb.New(30 * time.Second),
		MaxEjectionPercent:                 u32(50),
	}
}

// ilbCircuitBreakers are ILB's thresholds with its retry budget.
func ilbCircuitBreakers(limit uint32) *clusterv3.CircuitBreakers {
	return &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
		MaxConnections:     u32(limit),
		MaxPendingRequests: u32(limit),
		MaxRequests:        u32(limit),
		RetryBudget: &clusterv3.CircuitBreakers_Thresholds_RetryBudget{
			BudgetPercent:       &typev3.Percent{Value: 20},
			MinRetryConcurrency: u32(3),
		},
	}}}
}

// ilbSlowStart is ILB's least request configuration.
func ilbSlowStart(c *clusterv3.Cluster) {
	c.LbConfig = &clusterv3.Cluster_LeastRequestLbConfig_{LeastRequestLbConfig: &clusterv3.Cluster_LeastRequestLbConfig{
		ChoiceCount: u32(2),
		SlowStartConfig: &clusterv3.Cluster_SlowStartConfig{
			SlowStartWindow: durationpb.New(30 * time.Second),
			Aggression:      &corev3.RuntimeDouble{DefaultValue: 1, RuntimeKey: "x"},
		},
	}}
}

// ilbEngineCluster is an engine cluster as ILB emits it.
func ilbEngineCluster(name string) *clusterv3.Cluster {
	c := edsCluster(name, clusterv3.Cluster_LEAST_REQUEST)
	ilbSlowStart(c)
	c.HealthChecks = []*corev3.HealthCheck{ilbHealthCheck("/health")}
	c.OutlierDetection = ilbOutlier()
	c.CircuitBreakers = ilbCircuitBreakers(10000)
	return c
}

// ilbRetryPolicy is the retry policy of ILB's routes.
func ilbRetryPolicy() *routev3.RetryPolicy {
	return &routev3.RetryPolicy{
		RetryOn:              "connect-failure,reset,retriable-status-codes",
		RetriableStatusCodes: []uint32{503, 429},
		NumRetries:           u32(2),
		RetryHostPredicate: []*routev3.RetryPolicy_RetryHostPredicate{{
			Name:       "envoy.retry_host_predicates.previous_hosts",
			ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: envoy.MustAny(&previoushostsv3.PreviousHostsPredicate{})},
		}},
		HostSelectionRetryMaxAttempts: 3,
		RetryBackOff:                  &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(25 * time.Millisecond), MaxInterval: durationpb.New(250 * time.Millisecond)},
		RateLimitedRetryBackOff: &routev3.RetryPolicy_RateLimitedRetryBackOff{
			ResetHeaders: []*routev3.RetryPolicy_ResetHeader{{Name: "retry-after", Format: routev3.RetryPolicy_SECONDS}},
			MaxInterval:  durationpb.New(5 * time.Second),
		},
	}
}

// ilbRoute is a "/" route to cluster with ILB's route action.
func ilbRoute(cluster string) *routev3.Route {
	r := routeTo(cluster)
	a := r.GetRoute()
	a.Timeout = durationpb.New(0)
	a.IdleTimeout = durationpb.New(300 * time.Second)
	a.ClusterNotFoundResponseCode = routev3.RouteAction_SERVICE_UNAVAILABLE
	a.RetryPolicy = ilbRetryPolicy()
	return r
}

// backend is an upstream with a programmable application handler and a
// /health endpoint answering health (200 by default; abortHealth drops the
// connection, a network failure).
type backend struct {
	*upstream
	health atomic.Int32
}

// abortHealth makes a backend drop health check connections.
const abortHealth = -1

func startBackend(t *testing.T, name string, app http.HandlerFunc) *backend {
	t.Helper()
	b := &backend{}
	b.health.Store(http.StatusOK)
	b.upstream = startUpstream(t, name, false, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			code := b.health.Load()
			if code == abortHealth {
				panic(http.ErrAbortHandler)
			}
			w.WriteHeader(int(code))
			return
		}
		w.Header().Set("x-upstream", name)
		if app != nil {
			app(w, r)
			return
		}
		_, _ = io.WriteString(w, "hello from "+name)
	})
	return b
}

// appRequests are the requests other than health checks.
func (u *upstream) appRequests() []recorded {
	return slices.DeleteFunc(u.requests(), func(r recorded) bool { return r.path == "/health" })
}

// healthRequests are the health check requests.
func (u *upstream) healthRequests() []recorded {
	return slices.DeleteFunc(u.requests(), func(r recorded) bool { return r.path != "/health" })
}

// healthyHosts lists the addresses of the healthy hosts of a cluster in the
// current snapshot.
func healthyHosts(e *Envoy, name string) []string {
	cl := e.snap.Load().clusters[name]
	if cl == nil {
		return nil
	}
	var out []string
	for _, h := range cl.sources[srcHealthy] {
		out = append(out, h.addr)
	}
	slices.Sort(out)
	return out
}

// sorted returns addrs sorted.
func sorted(addrs ...string) []string {
	out := slices.Clone(addrs)
	slices.Sort(out)
	return out
}

// doErr is do without failing on transport errors.
func doErr(method, url string, body string) (response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return response{}, err
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}, err
}
