package envoy_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func TestBootstrapGolden(t *testing.T) {
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Sources {
		t.Run(s.Name, func(t *testing.T) {
			b, err := envoy.Bootstrap(c, s.Name, envoy.BootstrapOptions{Admin: "127.0.0.1:9901"})
			if err != nil {
				t.Fatal(err)
			}
			got, err := envoy.MarshalYAML(b)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "bootstrap-"+s.Name+".yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./envoy -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("bootstrap differs from %s (run go test ./envoy -update):\n%s", path, got)
			}
			// What a real Envoy would read: strict decode, ValidateAll into every Any.
			var back bootstrapv3.Bootstrap
			if err := envoy.DecodeYAML(want, &back); err != nil {
				t.Fatal(err)
			}
			if err := envoy.Validate(&back); err != nil {
				t.Fatal(err)
			}
			if back.GetNode().GetCluster() != s.Name {
				t.Errorf("node.cluster = %q; want the source %q", back.GetNode().GetCluster(), s.Name)
			}
		})
	}
}

func TestBootstrapErrors(t *testing.T) {
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		source string
		opts   envoy.BootstrapOptions
		want   string
	}{
		{"unknown source", "edge-mars", envoy.BootstrapOptions{}, `unknown source "edge-mars"`},
		{"bad xds address", "edge-us", envoy.BootstrapOptions{XDS: "ilb"}, "xds address"},
		{"port zero", "edge-us", envoy.BootstrapOptions{ExtProc: "127.0.0.1:0"}, "want a port in 1..65535"},
		{"a bad replica among several", "edge-us", envoy.BootstrapOptions{XDS: "10.0.0.1:18000,ilb-b"}, `"ilb-b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := envoy.Bootstrap(c, tt.source, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v; want %q", err, tt.want)
			}
		})
	}
}

func TestDecodeAndValidate(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"unknown field", "node: {id: a, colour: red}", `unknown field "colour"`},
		{"unknown Any type", `static_resources: {listeners: [{name: l, filter_chains: [{filters: [{name: f, typed_config: {"@type": type.googleapis.com/envoy.nope.v3.Nope}}]}]}]}`, "envoy.nope.v3.Nope"},
		{"empty", "", "the document is empty"},
		{"validation inside an Any", `static_resources:
  listeners:
  - name: l
    address: {socket_address: {address: 127.0.0.1, port_value: 1}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          route_config: {name: r}
          http_filters: [{name: envoy.filters.http.router}]`, "HttpConnectionManager.StatPrefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bootstrapv3.Bootstrap
			err := envoy.DecodeYAML([]byte(tt.yaml), &b)
			if err == nil {
				err = envoy.Validate(&b)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v; want %q", err, tt.want)
			}
		})
	}
}

// TestBootstrapReplicas: every ILB replica a bootstrap names is an
// endpoint of the xDS and ext_proc clusters; with several, both are
// health checked every second and a replica that fails one check is out
// (no panic mode), and the ADS stream comes back within a second; one
// replica keeps envoy.health_check's pace, and its xDS cluster no check.
func TestBootstrapReplicas(t *testing.T) {
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		xds, extproc  string
		wantEndpoints int
		wantType      string
		wantInterval  time.Duration
		wantXDSCheck  bool
	}{
		{"one replica", "127.0.0.1:18000", "127.0.0.1:18001", 1, "STATIC", 5 * time.Second, false},
		{"three replicas", "10.0.0.1:18000,10.0.0.2:18000, 10.0.0.3:18000", "10.0.0.1:18001,10.0.0.2:18001,10.0.0.3:18001", 3, "STATIC", time.Second, true},
		{"names resolved by DNS", "ilb-0.ilb:18000,ilb-1.ilb:18000", "ilb-0.ilb:18001,ilb-1.ilb:18001", 2, "STRICT_DNS", time.Second, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := envoy.Bootstrap(c, "edge-us", envoy.BootstrapOptions{XDS: tc.xds, ExtProc: tc.extproc})
			if err != nil {
				t.Fatal(err)
			}
			if err := envoy.Validate(b); err != nil {
				t.Fatal(err)
			}
			for _, cl := range b.GetStaticResources().GetClusters() {
				if cl.GetName() != c.Envoy.XDSCluster && cl.GetName() != c.Envoy.ExtProcCluster {
					continue
				}
				n := len(cl.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints())
				hcs := cl.GetHealthChecks()
				checked := len(hcs) == 1
				if n != tc.wantEndpoints || cl.GetType().String() != tc.wantType {
					t.Errorf("%s: %d endpoints of type %s; want %d, %s", cl.GetName(), n, cl.GetType(), tc.wantEndpoints, tc.wantType)
				}
				wantChecked := cl.GetName() == c.Envoy.ExtProcCluster || tc.wantXDSCheck
				if checked != wantChecked || checked && hcs[0].GetInterval().AsDuration() != tc.wantInterval {
					t.Errorf("%s: health checks %v; want checked %v every %s", cl.GetName(), hcs, wantChecked, tc.wantInterval)
				}
				if checked && tc.wantEndpoints > 1 && (hcs[0].GetUnhealthyThreshold().GetValue() != 1 || cl.GetCommonLbConfig().GetHealthyPanicThreshold().GetValue() != 0) {
					t.Errorf("%s: unhealthy after %d checks, panic threshold %v; want 1 and 0", cl.GetName(), hcs[0].GetUnhealthyThreshold().GetValue(), cl.GetCommonLbConfig().GetHealthyPanicThreshold())
				}
			}
			back := b.GetDynamicResources().GetAdsConfig().GetGrpcServices()[0].GetEnvoyGrpc().GetRetryPolicy().GetRetryBackOff()
			if back.GetMaxInterval().AsDuration() > time.Second {
				t.Errorf("ADS reconnection back-off up to %s; want at most 1s", back.GetMaxInterval().AsDuration())
			}
		})
	}
}
