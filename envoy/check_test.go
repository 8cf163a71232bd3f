package envoy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ilbproject/ilb/envoy"
)

// demoBundle is what an Envoy of source has: its rendered bootstrap plus
// the resources the xDS server serves it (both golden files).
func demoBundle(t *testing.T, source string) *envoy.Bundle {
	t.Helper()
	b, err := envoy.LoadBundle("testdata/bootstrap-"+source+".yaml", "../xds/testdata/"+source+".yaml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCheckDemoBundles: every source's bootstrap with its resources has
// no problem at all, warnings included.
func TestCheckDemoBundles(t *testing.T) {
	for _, s := range []string{"edge-eu", "edge-us"} {
		t.Run(s, func(t *testing.T) {
			b := demoBundle(t, s)
			if ps := b.Check(); len(ps) > 0 {
				t.Errorf("problems:\n%s", join(ps))
			}
			if got := b.Summary(); !strings.HasPrefix(got, "bootstrap, ") || !strings.Contains(got, "1 listener") {
				t.Errorf("summary %q", got)
			}
		})
	}
}

func join(ps []envoy.Problem) string {
	var sb strings.Builder
	for _, p := range ps {
		fmt.Fprintln(&sb, p)
	}
	return sb.String()
}

// hcm edits the listener's HTTP connection manager in place.
func hcm(t *testing.T, b *envoy.Bundle, edit func(h *hcmv3.HttpConnectionManager)) {
	t.Helper()
	f := b.Listeners[0].GetFilterChains()[0].GetFilters()[0]
	var h hcmv3.HttpConnectionManager
	if err := f.GetTypedConfig().UnmarshalTo(&h); err != nil {
		t.Fatal(err)
	}
	edit(&h)
	f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: envoy.MustAny(&h)}
}

// extProc edits the ext_proc filter of the listener in place.
func extProc(t *testing.T, b *envoy.Bundle, edit func(e *extprocv3.ExternalProcessor)) {
	t.Helper()
	hcm(t, b, func(h *hcmv3.HttpConnectionManager) {
		for _, f := range h.GetHttpFilters() {
			var e extprocv3.ExternalProcessor
			if f.GetTypedConfig().UnmarshalTo(&e) == nil {
				edit(&e)
				f.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: envoy.MustAny(&e)}
				return
			}
		}
		t.Fatal("no ext_proc filter")
	})
}

// defaultRoute is the first route with a route action.
func defaultRoute(b *envoy.Bundle) *routev3.RouteAction {
	for _, rt := range b.Routes[0].GetVirtualHosts()[0].GetRoutes() {
		if a := rt.GetRoute(); a != nil && a.GetWeightedClusters() != nil {
			return a
		}
	}
	return nil
}

func cluster(b *envoy.Bundle, name string) *clusterv3.Cluster {
	for _, c := range b.Clusters {
		if c.GetName() == name {
			return c
		}
	}
	for _, c := range b.Bootstrap.GetStaticResources().GetClusters() {
		if c.GetName() == name {
			return c
		}
	}
	return nil
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(t *testing.T, b *envoy.Bundle)
		want    []string // substrings, each in one problem
		warning bool     // every wanted problem is a warning
	}{
		{"override_host header reachable by clients", func(t *testing.T, b *envoy.Bundle) {
			cluster(b, "eu-west-vllm").LoadBalancingPolicy = envoy.OverrideHostPolicy(0)
			hcm(t, b, func(h *hcmv3.HttpConnectionManager) { h.EarlyHeaderMutationExtensions = nil })
		}, []string{`cluster "eu-west-vllm" picks its host from the request header x-gateway-destination-endpoint (override_host), which this listener does not remove`}, false},
		{"override_host metadata not accepted from ext_proc", func(t *testing.T, b *envoy.Bundle) {
			cluster(b, "eu-west-vllm").LoadBalancingPolicy = envoy.OverrideHostPolicy(0)
			extProc(t, b, func(e *extprocv3.ExternalProcessor) { e.MetadataOptions = nil })
		}, []string{`cluster "eu-west-vllm" reads its host from dynamic metadata namespace envoy.lb (override_host), which this ext_proc filter does not accept`}, true},
		{"unknown weighted cluster", func(t *testing.T, b *envoy.Bundle) {
			defaultRoute(b).GetWeightedClusters().GetClusters()[0].Name = "us-east-vllm"
		}, []string{`weighted_clusters.clusters[0]: cluster "us-east-vllm" is not defined (known: `}, false},
		{"weights sum to zero", func(t *testing.T, b *envoy.Bundle) {
			for _, cw := range defaultRoute(b).GetWeightedClusters().GetClusters() {
				cw.Weight = wrapperspb.UInt32(0)
			}
		}, []string{"weighted_clusters: the weights sum to 0"}, false},
		{"weights overflow", func(t *testing.T, b *envoy.Bundle) {
			wc := defaultRoute(b).GetWeightedClusters()
			wc.Clusters = append(wc.Clusters, wc.Clusters[0])
			for _, cw := range wc.GetClusters() {
				cw.Weight = wrapperspb.UInt32(1 << 31)
			}
		}, []string{"more than Envoy's 32-bit maximum"}, false},
		{
			"timeout unset", func(t *testing.T, b *envoy.Bundle) { defaultRoute(b).Timeout = nil },
			[]string{"timeout unset: Envoy's default 15s"},
			false,
		},
		{
			"short timeout", func(t *testing.T, b *envoy.Bundle) { defaultRoute(b).Timeout = durationpb.New(30e9) },
			[]string{"timeout 30s cuts any generation"},
			true,
		},
		{"retry condition typo", func(t *testing.T, b *envoy.Bundle) {
			defaultRoute(b).GetRetryPolicy().RetryOn = "connect-failure,retriable-status-code"
		}, []string{`retry_on: unknown condition "retriable-status-code"`, "retriable_status_codes [503 429] are ignored"}, false},
		{
			"retriable codes missing", func(t *testing.T, b *envoy.Bundle) { defaultRoute(b).GetRetryPolicy().RetriableStatusCodes = nil },
			[]string{"retriable_status_codes is empty"},
			false,
		},
		{"previous hosts without attempts", func(t *testing.T, b *envoy.Bundle) {
			defaultRoute(b).GetRetryPolicy().HostSelectionRetryMaxAttempts = 0
		}, []string{"previous_hosts with host_selection_retry_max_attempts 0"}, true},
		{"per try timeout", func(t *testing.T, b *envoy.Bundle) {
			a := defaultRoute(b)
			a.Timeout = durationpb.New(600e9)
			a.GetRetryPolicy().PerTryTimeout = durationpb.New(600e9)
		}, []string{"per_try_timeout 10m0s is not below the route timeout 10m0s"}, true},
		{"full duplex without trailers", func(t *testing.T, b *envoy.Bundle) {
			extProc(t, b, func(e *extprocv3.ExternalProcessor) {
				e.GetProcessingMode().RequestBodyMode = extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED
			})
		}, []string{
			"request_body_mode FULL_DUPLEX_STREAMED needs request_trailer_mode SEND, not SKIP",
			"failure_mode_allow must be false when a body mode is FULL_DUPLEX_STREAMED",
		}, false},
		{"route cache retained", func(t *testing.T, b *envoy.Bundle) {
			extProc(t, b, func(e *extprocv3.ExternalProcessor) { e.RouteCacheAction = extprocv3.ExternalProcessor_RETAIN })
		}, []string{"the route cache is never cleared"}, false},
		{"paths not normalised", func(t *testing.T, b *envoy.Bundle) {
			hcm(t, b, func(h *hcmv3.HttpConnectionManager) {
				h.NormalizePath, h.MergeSlashes, h.PathWithEscapedSlashesAction = nil, false, hcmv3.HttpConnectionManager_IMPLEMENTATION_SPECIFIC_DEFAULT
			})
		}, []string{"normalize_path false, merge_slashes false, path_with_escaped_slashes_action IMPLEMENTATION_SPECIFIC_DEFAULT: ILB's listener has true, true, UNESCAPE_AND_FORWARD"}, true},
		{"escaped slashes rejected", func(t *testing.T, b *envoy.Bundle) {
			hcm(t, b, func(h *hcmv3.HttpConnectionManager) {
				h.PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_REJECT_REQUEST
			})
		}, []string{"path_with_escaped_slashes_action REJECT_REQUEST: ILB's listener has"}, true},
		{"message timeout unset", func(t *testing.T, b *envoy.Bundle) {
			extProc(t, b, func(e *extprocv3.ExternalProcessor) { e.MessageTimeout = nil })
		}, []string{"message_timeout unset"}, true},
		{"ext_proc cluster missing", func(t *testing.T, b *envoy.Bundle) {
			cluster(b, "ilb_extproc").Name = "renamed"
		}, []string{`envoy_grpc.cluster_name: cluster "ilb_extproc" is not defined`}, false},
		{"ext_proc cluster over HTTP/1", func(t *testing.T, b *envoy.Bundle) {
			cluster(b, "ilb_extproc").TypedExtensionProtocolOptions = nil
		}, []string{`envoy_grpc cluster "ilb_extproc" does not speak HTTP/2`, "a gRPC health check needs the cluster to speak HTTP/2"}, false},
		{"ADS cluster not static", func(t *testing.T, b *envoy.Bundle) {
			b.Bootstrap.GetDynamicResources().GetAdsConfig().GetGrpcServices()[0].GetEnvoyGrpc().ClusterName = "eu-west-vllm"
		}, []string{`envoy_grpc cluster "eu-west-vllm" must be a static cluster of the bootstrap`}, false},
		{"RDS name", func(t *testing.T, b *envoy.Bundle) {
			hcm(t, b, func(h *hcmv3.HttpConnectionManager) { h.GetRds().RouteConfigName = "nope" })
		}, []string{`route configuration "nope" is not in this bundle`}, false},
		{"router not last", func(t *testing.T, b *envoy.Bundle) {
			hcm(t, b, func(h *hcmv3.HttpConnectionManager) {
				f := h.HttpFilters
				f[len(f)-1], f[len(f)-2] = f[len(f)-2], f[len(f)-1]
			})
		}, []string{"Envoy requires the terminal router filter last"}, false},
		{
			"EDS assignment missing", func(t *testing.T, b *envoy.Bundle) { b.Endpoints = b.Endpoints[1:] },
			[]string{"EDS cluster has no endpoint assignment"},
			false,
		},
		{"validation error inside Any", func(t *testing.T, b *envoy.Bundle) {
			hcm(t, b, func(h *hcmv3.HttpConnectionManager) { h.StatPrefix = "" })
		}, []string{`listener "ilb_listener": Listener.filter_chains[0].filters[0].typed_config(HttpConnectionManager): invalid HttpConnectionManager.StatPrefix`}, false},
		{
			"duplicate cluster", func(t *testing.T, b *envoy.Bundle) { b.Clusters = append(b.Clusters, b.Clusters[0]) },
			[]string{"defined twice"},
			false,
		},
		{"ADS not configured", func(t *testing.T, b *envoy.Bundle) {
			b.Bootstrap.GetDynamicResources().AdsConfig = nil
		}, []string{"cds_config: uses ads but dynamic_resources.ads_config is not set"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := demoBundle(t, "edge-eu")
			tt.mutate(t, b)
			ps := b.Check()
			for _, w := range tt.want {
				found := false
				for _, p := range ps {
					if strings.Contains(p.String(), w) {
						found = true
						if p.Warning != tt.warning {
							t.Errorf("%q: warning = %v, want %v", p, p.Warning, tt.warning)
						}
					}
				}
				if !found {
					t.Errorf("no problem contains %q; got:\n%s", w, join(ps))
				}
			}
			if (envoy.Errors(ps) != nil) == tt.warning {
				t.Errorf("Errors() = %v with warning=%v", envoy.Errors(ps), tt.warning)
			}
		})
	}
}

// TestCheckResourcesAlone: the resources ILB serves, without the
// bootstrap, only warn that the ext_proc cluster lives elsewhere.
func TestCheckResourcesAlone(t *testing.T) {
	b, err := envoy.LoadBundle("../xds/testdata/edge-eu.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ps := b.Check()
	if len(ps) != 1 || !ps[0].Warning || !strings.Contains(ps[0].Message, `envoy_grpc cluster "ilb_extproc" is not in these files`) {
		t.Errorf("problems:\n%s", join(ps))
	}
}

func TestDecodeBundle(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"mixed keys", "clusters: []\nnode: {id: a}", "top-level keys node are not resource lists"},
		{"not a map", "- a\n- b", "the document is not a map"},
		{"bad resource", "clusters:\n- name: a\n  colour: red", `clusters[0]: decode envoy.config.cluster.v3.Cluster: `},
		{"list expected", "routes: {name: a}", "routes: want a list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := envoy.DecodeBundle([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want %q", err, tt.want)
			}
		})
	}
	b, err := envoy.DecodeBundle([]byte("node: {id: a, cluster: s}"))
	if err != nil || b.Bootstrap.GetNode().GetId() != "a" {
		t.Errorf("bootstrap: %v %v", b, err)
	}
}

// TestCheckOrderIsStable: problems found while walking a map (here two
// typed_extension_protocol_options entries) come out in one order on
// every run (found by FuzzBundle: 4 runs in 50 gave the other order).
func TestCheckOrderIsStable(t *testing.T) {
	data := []byte("static_resources:\n  clusters:\n  - name: c\n    typed_extension_protocol_options:\n      a: {}\n      b: {'@type': type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions}\n")
	var first []envoy.Problem
	for i := range 100 {
		b, err := envoy.DecodeBundle(data)
		if err != nil {
			t.Fatal(err)
		}
		ps := b.Check()
		if i == 0 {
			first = ps
			if len(ps) < 2 {
				t.Fatalf("want at least two problems, got %v", ps)
			}
			continue
		}
		if !slices.Equal(ps, first) {
			t.Fatalf("run %d gave %v; run 0 gave %v", i, ps, first)
		}
	}
}
