package envoysim

import (
	"errors"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ilbproject/ilb/envoy"
)

// checkAndCompile runs what a resource goes through: validation, the field
// policy, then compilation.
func checkAndCompile(msg proto.Message) error {
	if err := errors.Join(envoy.Validate(msg), newFieldPolicy().check(msg, "r")); err != nil {
		return err
	}
	switch m := msg.(type) {
	case *clusterv3.Cluster:
		_, err := compileCluster(m)
		return err
	case *routev3.RouteConfiguration:
		_, err := compileRouteTable(m, nil, false)
		return err
	case *hcmv3.HttpConnectionManager:
		_, err := compileHCM(m, nil)
		return err
	}
	return nil
}

// ilbListenerHCM is the HCM of ILB's listeners: header_mutation, ext_proc,
// router.
func ilbListenerHCM() *hcmv3.HttpConnectionManager {
	var hcm hcmv3.HttpConnectionManager
	l := httpListener("main", "routes", ilbHeaderMutation(), extProc("ilb", &extprocfilterv3.ExternalProcessor{FailureModeAllow: true}))
	if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		panic(err)
	}
	return &hcm
}

// TestILBConfigAccepted: the resources ILB emits pass validation, the field
// policy and compilation.
func TestILBConfigAccepted(t *testing.T) {
	extProcCluster := staticCluster("ext-proc", true, "127.0.0.1:1")
	extProcCluster.HealthChecks = []*corev3.HealthCheck{ilbGRPCHealthCheck()}
	extProcCluster.CircuitBreakers = ilbCircuitBreakers(100000)
	h2 := ilbEngineCluster("engine-h2")
	h2.TypedExtensionProtocolOptions = staticCluster("x", true).TypedExtensionProtocolOptions
	wc := weightedRoute("x-draw", "engine-a", 30, "engine-b", 70)
	a := ilbRoute("engine-a").GetRoute()
	a.ClusterSpecifier = wc.GetRoute().GetClusterSpecifier()
	wc.Action = &routev3.Route_Route{Route: a}
	for name, msg := range map[string]proto.Message{
		"engine cluster":   ilbEngineCluster("engine"),
		"http2 engine":     h2,
		"ext_proc cluster": extProcCluster,
		"routes":           routeConfig("routes", vhost("all", []string{"*"}, wc, ilbRoute("fallback"))),
		"listener HCM":     ilbListenerHCM(),
	} {
		if err := checkAndCompile(msg); err != nil {
			t.Errorf("%s refused: %v", name, err)
		}
	}
}

// TestResilienceRefused: variants envoysim does not model are refused with
// an error naming them.
func TestResilienceRefused(t *testing.T) {
	cluster := func(mut func(c *clusterv3.Cluster)) proto.Message {
		c := ilbEngineCluster("engine")
		mut(c)
		return c
	}
	route := func(mut func(p *routev3.RetryPolicy)) proto.Message {
		r := ilbRoute("engine")
		mut(r.GetRoute().GetRetryPolicy())
		return routeConfig("routes", vhost("all", []string{"*"}, r))
	}
	for _, c := range []struct {
		name string
		msg  proto.Message
		want string
	}{
		{"tcp health check", cluster(func(c *clusterv3.Cluster) {
			c.HealthChecks[0].HealthChecker = &corev3.HealthCheck_TcpHealthCheck_{TcpHealthCheck: &corev3.HealthCheck_TcpHealthCheck{}}
		}), "tcp_health_check"},
		{
			"two health checks", cluster(func(c *clusterv3.Cluster) { c.HealthChecks = append(c.HealthChecks, ilbHealthCheck("/h")) }),
			"multiple health checks not supported",
		},
		{"interval jitter", cluster(func(c *clusterv3.Cluster) { c.HealthChecks[0].IntervalJitter = durationpb.New(time.Second) }), "interval_jitter"},
		{"response body check", cluster(func(c *clusterv3.Cluster) {
			c.HealthChecks[0].GetHttpHealthCheck().Receive = []*corev3.HealthCheck_Payload{{Payload: &corev3.HealthCheck_Payload_Text{Text: "6f6b"}}}
		}), "receive"},
		{
			"local origin split", cluster(func(c *clusterv3.Cluster) { c.OutlierDetection.SplitExternalLocalOriginErrors = true }),
			"split_external_local_origin_errors",
		},
		{
			"max ejection time below base", cluster(func(c *clusterv3.Cluster) { c.OutlierDetection.MaxEjectionTime = durationpb.New(time.Second) }),
			"max_ejection_time cannot be smaller than base_ejection_time",
		},
		{"per host thresholds", cluster(func(c *clusterv3.Cluster) {
			c.CircuitBreakers.PerHostThresholds = []*clusterv3.CircuitBreakers_Thresholds{{MaxConnections: wrapperspb.UInt32(1)}}
		}), "per_host_thresholds"},
		{"active request bias", cluster(func(c *clusterv3.Cluster) {
			c.GetLeastRequestLbConfig().ActiveRequestBias = &corev3.RuntimeDouble{DefaultValue: 2}
		}), "active_request_bias"},
		{"retry priority", route(func(p *routev3.RetryPolicy) {
			p.RetryPriority = &routev3.RetryPolicy_RetryPriority{Name: "envoy.retry_priorities.previous_priorities"}
		}), "retry_priority"},
		{"retriable headers", route(func(p *routev3.RetryPolicy) {
			p.RetriableHeaders = []*routev3.HeaderMatcher{{Name: "x"}}
		}), "retriable_headers"},
		{
			"per-route header mutation", routeConfig("routes", &routev3.VirtualHost{
				Name: "all", Domains: []string{"*"}, Routes: []*routev3.Route{ilbRoute("engine")},
				TypedPerFilterConfig: map[string]*anypb.Any{"envoy.filters.http.header_mutation": envoy.MustAny(&headermutationv3.HeaderMutationPerRoute{})},
			}),
			"HeaderMutationPerRoute",
		},
		{"query parameter mutations", func() proto.Message {
			hcm := ilbListenerHCM()
			hm := &headermutationv3.HeaderMutation{Mutations: &headermutationv3.Mutations{
				QueryParameterMutations: []*corev3.KeyValueMutation{{Remove: "q"}},
			}}
			hcm.HttpFilters[0].ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: envoy.MustAny(hm)}
			return hcm
		}(), "query_parameter_mutations"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkAndCompile(c.msg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want it to name %s", err, c.want)
			}
		})
	}
}
