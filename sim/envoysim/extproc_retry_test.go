package envoysim

import (
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ilbproject/ilb/envoy"
)

// TestExtProcStreamRetry: grpc_service.retry_policy is the default retry
// policy of the filter's streams (GrpcService.retry_policy, honoured by
// envoy_grpc clients; ext_proc buffers what it sent for retry): a stream
// refused before any response (a processor host that is gone) is opened
// again, on another host with previous_hosts, and the request is served;
// without a policy, or with one whose retry_on does not match, the request
// gets the filter's failure (fail closed: 500). Hosts are picked round
// robin from a counter, so the dead host is tried first.
func TestExtProcStreamRetry(t *testing.T) {
	previous := &corev3.RetryPolicy_RetryHostPredicate{
		Name:       "envoy.retry_host_predicates.previous_hosts",
		ConfigType: &corev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: envoy.MustAny(&previoushostsv3.PreviousHostsPredicate{})},
	}
	backoff := &corev3.BackoffStrategy{BaseInterval: durationpb.New(time.Millisecond), MaxInterval: durationpb.New(5 * time.Millisecond)}
	tests := []struct {
		name        string
		policy      *corev3.RetryPolicy
		wantStatus  int
		wantRetries bool
	}{
		{"no retry policy: the dead host's requests fail", nil, 500, false},
		{"connect-failure, previous_hosts: served by the other host", &corev3.RetryPolicy{
			RetryOn: "connect-failure,refused-stream,unavailable", NumRetries: wrapperspb.UInt32(2), RetryBackOff: backoff,
			RetryHostPredicate: []*corev3.RetryPolicy_RetryHostPredicate{previous}, HostSelectionRetryMaxAttempts: 3,
		}, 200, true},
		{"a retry_on that does not match: fails", &corev3.RetryPolicy{
			RetryOn: "retriable-4xx", NumRetries: wrapperspb.UInt32(2), RetryBackOff: backoff,
		}, 500, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.upstream("a", nil)
			procs := staticCluster("procs", true, closedAddr(t), h.proc.addr)
			procs.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
			h.push(append(h.clusters(), procs,
				httpListener("main", "routes", extProc("ilb", &extprocfilterv3.ExternalProcessor{
					GrpcService: &corev3.GrpcService{
						TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "procs"}},
						RetryPolicy:     tc.policy,
					},
				})),
				routeConfig("routes", vhost("all", []string{"*"}, routeTo("a"))))...)
			h.start(counter(0))
			statuses := map[int]int{}
			for range 4 {
				statuses[do(t, "GET", h.url("main", "/"), nil, "").status]++
			}
			retries := h.env.Stats().ExtProc.StreamRetries
			if statuses[tc.wantStatus] == 0 || (tc.wantStatus == 200) != (statuses[500] == 0) || (retries > 0) != tc.wantRetries {
				t.Errorf("statuses %v, stream retries %d; want %d for every request routed to the dead host first (retries: %v)",
					statuses, retries, tc.wantStatus, tc.wantRetries)
			}
		})
	}
}

// TestADSFailsOverToAnotherHost: the xDS cluster lists a host that is
// gone before the live one; each session picks a host of the cluster (not
// always the first endpoint), and one that got nothing makes the next pick
// avoid its host, so envoysim gets its configuration from the live one
// (with a short retry_back_off from envoy_grpc.retry_policy).
func TestADSFailsOverToAnotherHost(t *testing.T) {
	h := newHarness(t, nil)
	h.upstream("a", nil)
	h.push(append(h.clusters(), httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"}, routeTo("a"))))...)
	b := testBootstrap(h.xds.addr, h.proc.addr)
	b.StaticResources.Clusters[0] = staticCluster("xds", true, closedAddr(t), h.xds.addr)
	b.DynamicResources.AdsConfig.GrpcServices[0].GetEnvoyGrpc().RetryPolicy = &corev3.RetryPolicy{
		RetryBackOff: &corev3.BackoffStrategy{BaseInterval: durationpb.New(10 * time.Millisecond), MaxInterval: durationpb.New(50 * time.Millisecond)},
	}
	h.env = startEnvoy(t, b, nil)
	if resp := do(t, "GET", h.url("main", "/"), nil, ""); resp.status != 200 {
		t.Errorf("status %d through the configuration from the live xDS host; want 200", resp.status)
	}
}
