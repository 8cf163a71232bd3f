package xds_test

import (
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/ilbproject/ilb/config"
)

// TestClusterProduction checks what an engine cluster carries: least
// request with slow start, active HTTP health checks on the engine's
// health path, enforced outlier detection, circuit breakers with a retry
// budget, and HTTP/2 where the engine speaks it.
func TestClusterProduction(t *testing.T) {
	c, w := demo(t)
	c.Clusters[3].Protocol = config.ProtocolHTTP2 // eu-west-tgi
	clusters := map[string]*clusterv3.Cluster{}
	for _, cl := range build(t, c, w, "edge-eu").Clusters {
		clusters[cl.GetName()] = cl
	}
	vllm := clusters["eu-west-vllm"]
	tests := []struct {
		name string
		ok   bool
	}{
		{"least request, two choices, slow start 30s", vllm.GetLbPolicy() == clusterv3.Cluster_LEAST_REQUEST &&
			vllm.GetLeastRequestLbConfig().GetChoiceCount().GetValue() == 2 &&
			vllm.GetLeastRequestLbConfig().GetSlowStartConfig().GetSlowStartWindow().AsDuration() == c.Envoy.SlowStart.Std()},
		{"HTTP health check on /health", len(vllm.GetHealthChecks()) == 1 && vllm.GetHealthChecks()[0].GetHttpHealthCheck().GetPath() == "/health" &&
			vllm.GetHealthChecks()[0].GetUnhealthyThreshold().GetValue() == 2},
		{"outlier detection enforced", vllm.GetOutlierDetection().GetConsecutive_5Xx().GetValue() == 5 &&
			vllm.GetOutlierDetection().GetEnforcingConsecutive_5Xx().GetValue() == 100 &&
			vllm.GetOutlierDetection().GetConsecutiveGatewayFailure().GetValue() == 3 &&
			vllm.GetOutlierDetection().GetEnforcingConsecutiveGatewayFailure().GetValue() == 100},
		{"retry budget 20%, at least 3", vllm.GetCircuitBreakers().GetThresholds()[0].GetRetryBudget().GetBudgetPercent().GetValue() == 20 &&
			vllm.GetCircuitBreakers().GetThresholds()[0].GetRetryBudget().GetMinRetryConcurrency().GetValue() == 3},
		{"connect timeout", vllm.GetConnectTimeout().AsDuration() == c.Envoy.ConnectTimeout.Std()},
		{"HTTP/1.1 by default", len(vllm.GetTypedExtensionProtocolOptions()) == 0},
		{"HTTP/2 when configured", func() bool {
			var po upstreamhttpv3.HttpProtocolOptions
			a := clusters["eu-west-tgi"].GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
			return a != nil && a.UnmarshalTo(&po) == nil && po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.ok {
				t.Errorf("not so: %v", vllm)
			}
		})
	}
}

// TestRouteRetries: every route retries connect failures, resets, 503 and
// 429 on another host with back-off honouring retry-after; no overall
// timeout, an idle timeout.
func TestRouteRetries(t *testing.T) {
	c, w := demo(t)
	for _, r := range build(t, c, w, "edge-us").Routes[0].GetVirtualHosts()[0].GetRoutes() {
		a := r.GetRoute()
		if a == nil {
			continue
		}
		rp := a.GetRetryPolicy()
		switch {
		case rp.GetRetryOn() != "connect-failure,reset,retriable-status-codes" || !slices.Equal(rp.GetRetriableStatusCodes(), []uint32{503, 429}):
			t.Errorf("route %s retries on %q %v", r.GetName(), rp.GetRetryOn(), rp.GetRetriableStatusCodes())
		case rp.GetNumRetries().GetValue() != 2 || rp.GetHostSelectionRetryMaxAttempts() != 3 ||
			len(rp.GetRetryHostPredicate()) != 1 || rp.GetRetryHostPredicate()[0].GetName() != "envoy.retry_host_predicates.previous_hosts":
			t.Errorf("route %s: attempts/host predicate %v", r.GetName(), rp)
		case rp.GetRateLimitedRetryBackOff().GetResetHeaders()[0].GetName() != "retry-after" ||
			rp.GetRateLimitedRetryBackOff().GetResetHeaders()[0].GetFormat() != routev3.RetryPolicy_SECONDS:
			t.Errorf("route %s does not honour retry-after: %v", r.GetName(), rp.GetRateLimitedRetryBackOff())
		case a.GetTimeout().AsDuration() != 0 || a.GetIdleTimeout().AsDuration() != c.Envoy.RouteIdleTimeout.Std():
			t.Errorf("route %s timeouts %v / %v", r.GetName(), a.GetTimeout(), a.GetIdleTimeout())
		}
	}
}
