package main

import (
	"os"
	"strings"
	"testing"
)

// TestEnvoyConfigTLS: the TLS flags render the secure example's
// bootstraps byte for byte (the command the files' headers show), and a
// configuration serving TLS without them, or flags without it, is an
// error saying what to give.
func TestEnvoyConfigTLS(t *testing.T) {
	const cfg = "../../examples/secure/ilb.yaml"
	certs := "examples/secure/certs/"
	for _, source := range []string{"edge-us", "edge-eu"} {
		t.Run(source, func(t *testing.T) {
			out, _, err := runCmd(t, "envoy-config", "--config", cfg, "--source", source,
				"--xds", "127.0.0.1:18000", "--extproc", "127.0.0.1:18001",
				"--tls-cert", certs+"envoy-"+source+".pem", "--tls-key", certs+"envoy-"+source+"-key.pem",
				"--tls-ca", certs+"ca.pem", "--ilb-san", "spiffe://ilb.local/ilb")
			if err != nil {
				t.Fatal(err)
			}
			file, err := os.ReadFile("../../examples/secure/envoy-" + source + ".yaml")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(string(file), out) {
				t.Errorf("the render differs from examples/secure/envoy-%s.yaml:\n%s", source, out)
			}
		})
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"TLS config without flags", []string{"--config", cfg}, "the configuration serves TLS"},
		{"flags without TLS config", []string{"--config", "../../examples/demo/ilb.yaml", "--tls-ca", "ca.pem", "--ilb-san", "ilb.example.com"}, "serves no TLS"},
		{"mutual TLS without a client certificate", []string{"--config", cfg, "--tls-ca", "ca.pem", "--ilb-san", "ilb.example.com"}, "ILB requires client certificates"},
		{"SDS without the CA secret", []string{"--config", cfg, "--tls-sds-cert", "default", "--sds-address", "unix:/run/agent.sock", "--ilb-san", "spiffe://x/ilb"}, "validation context"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runCmd(t, append([]string{"envoy-config", "--source", "edge-us"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v; want %q", err, tt.want)
			}
		})
	}
	out, _, err := runCmd(t, "envoy-config", "--config", cfg, "--source", "edge-eu", "--tls-sds-cert", "spiffe://ilb.local/envoy/edge-eu/gw-0",
		"--tls-sds-ca", "spiffe://ilb.local", "--sds-cluster", "spire_agent", "--sds-address", "unix:///run/spire/sockets/agent.sock",
		"--ilb-san", "spiffe://ilb.local/ilb")
	if err != nil || !strings.Contains(out, "validation_context_sds_secret_config") || !strings.Contains(out, "path: /run/spire/sockets/agent.sock") {
		t.Errorf("SDS render: %v\n%s", err, out)
	}
}

// TestRenderIstioTLS: --ilb-san adds ILB's TLS cluster to the EnvoyFilter
// and points ext_proc at it; --extproc-address alone is an error.
func TestRenderIstioTLS(t *testing.T) {
	base, err := os.ReadFile("../../examples/istio/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := t.TempDir() + "/ilb.yaml"
	secure := string(base) + "\nsecurity:\n  tls: {cert_file: /certs/cert-chain.pem, key_file: /certs/key.pem, client_ca_file: /certs/root-cert.pem}\n"
	if err := os.WriteFile(cfg, []byte(secure), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"render", "istio", "--config", cfg, "--source", "edge-eu", "--hosts", "llm.example.com", "--gateway", "istio-ingress/llm-gateway"}
	out, _, err := runCmd(t, append(args, "--ilb-san", "spiffe://cluster.local/ns/ilb-system/sa/ilb", "--extproc-address", "ilb.ilb-system.svc:18001")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"applyTo: CLUSTER", "name: ROOTCA", "cluster_name: sds-grpc", "exact: spiffe://cluster.local/ns/ilb-system/sa/ilb", "address: ilb.ilb-system.svc", "cluster_name: ilb_extproc"} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q", want)
		}
	}
	if _, _, err := runCmd(t, append(args, "--extproc-address", "ilb:18001")...); err == nil || !strings.Contains(err.Error(), "give --ilb-san too") {
		t.Errorf("--extproc-address alone: %v", err)
	}
}

// TestEnvoyConfigAdminPerSource: by default each source's bootstrap has
// its own admin port (9901 + its index), so that one Envoy per source
// runs on one host; --admin sets it, empty for none.
func TestEnvoyConfigAdminPerSource(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // in the admin section; "" for no admin
	}{
		{"first source", []string{"--source", "edge-us"}, "port_value: 9901"},
		{"second source", []string{"--source", "edge-eu"}, "port_value: 9902"},
		{"set", []string{"--source", "edge-eu", "--admin", "127.0.0.1:19999"}, "port_value: 19999"},
		{"none", []string{"--source", "edge-eu", "--admin", ""}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runCmd(t, append([]string{"envoy-config", "--config", demoConfig}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			admin, _, _ := strings.Cut(out, "dynamic_resources:")
			switch {
			case tc.want == "" && strings.Contains(admin, "admin:"):
				t.Errorf("an admin section:\n%s", admin)
			case tc.want != "" && !strings.Contains(admin, tc.want):
				t.Errorf("admin section lacks %q:\n%s", tc.want, admin)
			}
		})
	}
}
