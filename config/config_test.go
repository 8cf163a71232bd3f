package config_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
)

const base = `
regions: [{name: us}, {name: eu}]
network:
  - {from: us, to: eu, rtt_ms: 80, egress_usd_per_gb: 0.05}
  - {from: eu, to: us, rtt_ms: 80, egress_usd_per_gb: 0.05}
sources:
  - {name: edge-us, region: us}
  - {name: edge-eu, region: eu, allowed_regions: [eu], fail_mode: closed}
models:
  - {name: m1, aliases: [m-one]}
  - {name: m2}
profiles: [{name: p, capacity_per_replica: 100}]
clusters:
  - {name: us-a, region: us, engine: vllm, models: [m1, m2], profile: p, endpoints: ["10.0.0.1:8000"]}
  - {name: eu-a, region: eu, engine: sglang, models: [m1, m2], profile: p, endpoints: ["eu-a.svc.local:8000", "10.1.0.2:8000"]}
`

func mustParse(t *testing.T) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(base))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

func TestParseAppliesDefaults(t *testing.T) {
	c := mustParse(t)
	s, _ := c.Source("edge-us")
	if s.FailMode != config.FailOpen || s.DefaultModel != "m1" || s.DefaultPriority != "standard" || s.TrustPriorityHeader {
		t.Errorf("source defaults = %q, %q, %q, %v; want open, m1, standard, false", s.FailMode, s.DefaultModel, s.DefaultPriority, s.TrustPriorityHeader)
	}
	if m := c.Models[0]; m.ContextTokens != config.DefaultContextTokens || m.MaxOutputTokens != config.DefaultMaxOutputTokens {
		t.Errorf("model limits = %d, %d; want %d, %d", m.ContextTokens, m.MaxOutputTokens, config.DefaultContextTokens, config.DefaultMaxOutputTokens)
	}
	if c.ExtProc.StreamIdleTimeout.Std() != 2*time.Second {
		t.Errorf("extproc.stream_idle_timeout = %s; want message_timeout + 1s = 2s", c.ExtProc.StreamIdleTimeout)
	}
	if c.Controller.Tick.Std() != 5*time.Second || c.Controller.Policy != config.PolicyOptimizer || c.Controller.TargetUtilization != 0.8 {
		t.Errorf("controller defaults = %+v", c.Controller)
	}
	if c.Listen.XDS != "127.0.0.1:18000" || c.Listen.ExtProc != "127.0.0.1:18001" || c.Listen.Admin != "127.0.0.1:18002" {
		t.Errorf("listen defaults = %+v", c.Listen)
	}
	if l, ok := c.Link("us", "us"); !ok || l.RTTMs != config.DefaultIntraRegion.RTTMs {
		t.Errorf("intra-region link = %+v, %v", l, ok)
	}
	if m, ok := c.ResolveModel("m-one"); !ok || m != "m1" {
		t.Errorf("ResolveModel(m-one) = %q, %v", m, ok)
	}
	eu, _ := c.Source("edge-eu")
	if got := c.Eligible(eu, "m1"); len(got) != 1 || got[0].Name != "eu-a" {
		t.Errorf("Eligible(edge-eu, m1) = %+v; want only eu-a", got)
	}
}

func TestLoadDemoConfig(t *testing.T) {
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Sources) != 2 || len(c.Clusters) != 4 || len(c.Regions) != 3 {
		t.Errorf("demo config: %d sources, %d clusters, %d regions", len(c.Sources), len(c.Clusters), len(c.Regions))
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"unknown top-level field", base + "colour: blue\n", `line 16: field colour not found`},
		{"unknown nested field", strings.Replace(base, "{name: m2}", "{name: m2, size: 7}", 1), "field size not found"},
		{"wrong type", base + "controller: {target_utilization: high}\n", "cannot unmarshal !!str `high`"},
		{"bad duration", base + "controller: {tick: soon}\n", `"soon" is not a duration`},
		{"empty file", "", "the file is empty"},
		{"two documents", base + "---\nregions: []\n", "more than one YAML document"},
		{"every decode problem, one per line", base + "colour: blue\nsize: 3\n", "decode: line 16: field colour not found in type config.Config\ndecode: line 17: field size not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse error = %v; want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *config.Config)
		want   []string // each must appear in one problem, in this order of problems
	}{
		{
			"unknown cluster region", func(c *config.Config) { c.Clusters[0].Region = "mars" },
			[]string{`clusters[0].region: unknown region "mars" (known: eu, us)`},
		},
		{
			"duplicate cluster", func(c *config.Config) { c.Clusters[1].Name = "us-a" },
			[]string{`clusters[1].name: duplicate cluster "us-a"`},
		},
		{
			"bad cluster name", func(c *config.Config) { c.Clusters[0].Name = "us a" },
			[]string{`clusters[0].name: cluster name "us a" is not valid`},
		},
		{
			"reserved cluster name", func(c *config.Config) { c.Clusters[0].Name = "ilb_extproc" },
			[]string{`clusters[0].name: cluster name "ilb_extproc" is reserved`},
		},
		{
			"replica picking cache, queue skew and CPU adapters out of range", func(c *config.Config) {
				c.Clusters[0].ReplicaPicking = config.ReplicaPicking{Enabled: true, CacheTokens: -1, MaxQueueSkew: -2, MaxCPULoras: -3}
				c.Clusters[1].ReplicaPicking.CacheTokens = config.MaxReplicaCacheTokens + 1
				c.Clusters[1].ReplicaPicking.MaxQueueSkew = config.MaxReplicaQueueSkew + 1
				c.Clusters[1].ReplicaPicking.MaxCPULoras = config.MaxReplicaCPULoras + 1
			},
			[]string{
				`clusters[0].replica_picking.cache_tokens: -1 is out of range: want 0 (the default, 131072) to 16777216 tokens`,
				`clusters[1].replica_picking.cache_tokens: 16777217 is out of range`,
				`clusters[0].replica_picking.max_queue_skew: -2 is out of range: want 0 (no bound) to 4096 requests`,
				`clusters[1].replica_picking.max_queue_skew: 4097 is out of range`,
				`clusters[0].replica_picking.max_cpu_loras: -3 is out of range: want 0 (the default, 64) to 64 adapters`,
				`clusters[1].replica_picking.max_cpu_loras: 65 is out of range`,
			},
		},
		{
			"unknown engine", func(c *config.Config) { c.Clusters[0].Engine = "llamacpp" },
			[]string{`clusters[0].engine: unknown engine "llamacpp": want one of vllm, sglang, tgi, trtllm`},
		},
		{
			"unknown model in cluster", func(c *config.Config) { c.Clusters[0].Models = []string{"m1", "m2", "m9"} },
			[]string{`clusters[0].models[2]: unknown model "m9"`},
		},
		{
			"alias in cluster", func(c *config.Config) { c.Clusters[0].Models = []string{"m-one", "m2"} },
			[]string{`clusters[0].models[0]: "m-one" is an alias: name the model "m1"`},
		},
		{"model served by no cluster", func(c *config.Config) {
			c.Models = append(c.Models, config.Model{Name: "m3"})
		}, []string{`models[2]: model "m3" is served by no engine cluster`}},
		{
			"residency leaves model without cluster", func(c *config.Config) { c.Clusters[1].Models = []string{"m1"} },
			[]string{`sources[1].allowed_regions: source "edge-eu" may not reach model "m2": no cluster serving it is in its allowed regions [eu] (served in: us)`},
		},
		{
			"non-positive capacity", func(c *config.Config) { c.Profiles[0].CapacityPerReplica = 0 },
			[]string{`profiles[0].capacity_per_replica: 0 is not a valid capacity`},
		},
		{
			"bad endpoint port", func(c *config.Config) { c.Clusters[0].Endpoints = []string{"10.0.0.1:99999"} },
			[]string{`clusters[0].endpoints[0]: "10.0.0.1:99999" is not a valid endpoint: port "99999" is not a number in 1..65535`},
		},
		{
			"endpoint without port", func(c *config.Config) { c.Clusters[0].Endpoints = []string{"10.0.0.1"} },
			[]string{`clusters[0].endpoints[0]: "10.0.0.1" is not a valid endpoint: want host:port`},
		},
		{
			"bad endpoint host", func(c *config.Config) { c.Clusters[0].Endpoints = []string{"bad_host!:80"} },
			[]string{`host "bad_host!" is neither an IP address nor a DNS name`},
		},
		{
			"no endpoints", func(c *config.Config) { c.Clusters[0].Endpoints = nil },
			[]string{`clusters[0].endpoints: cluster "us-a" has no endpoint`},
		},
		{
			"unknown profile", func(c *config.Config) { c.Clusters[0].Profile = "h200" },
			[]string{`clusters[0].profile: unknown profile "h200" (known: p)`},
		},
		{
			"unknown allowed region", func(c *config.Config) { c.Sources[1].AllowedRegions = []string{"eu", "asia"} },
			[]string{`sources[1].allowed_regions[1]: unknown region "asia"`},
		},
		{
			"bad fail mode", func(c *config.Config) { c.Sources[0].FailMode = "ajar" },
			[]string{`sources[0].fail_mode: unknown fail mode "ajar": want "open" or "closed"`},
		},
		{
			"unknown default model", func(c *config.Config) { c.Sources[0].DefaultModel = "gpt-9" },
			[]string{`sources[0].default_model: unknown model "gpt-9"`},
		},
		{
			"duplicate source", func(c *config.Config) { c.Sources[1].Name = "edge-us" },
			[]string{`sources[1].name: duplicate source "edge-us"`},
		},
		{
			"missing network link", func(c *config.Config) { c.Network = c.Network[1:] },
			[]string{`network: no link from region "us" to region "eu", which source "edge-us" may use (cluster "eu-a")`},
		},
		{
			"negative rtt", func(c *config.Config) { c.Network[0].RTTMs = -1 },
			[]string{`network[0].rtt_ms: -1 is not a valid round-trip time`},
		},
		{
			"duplicate link", func(c *config.Config) { c.Network = append(c.Network, c.Network[0]) },
			[]string{`network[2]: duplicate link from "us" to "eu"`},
		},
		{
			"alias collides with model", func(c *config.Config) { c.Models[1].Aliases = []string{"m1"} },
			[]string{`models[1].aliases[0]: model name "m1" is already used at models[0].name`},
		},
		{
			"model name with space", func(c *config.Config) { c.Models[1].Aliases = []string{"my model"} },
			[]string{`models[1].aliases[0]: model name "my model" is not valid`},
		},
		{
			"adapter collides with alias", func(c *config.Config) { c.Models[1].Adapters = []config.Adapter{{Name: "m-one"}} },
			[]string{`models[1].adapters[0].name: model name "m-one" is already used at models[0].aliases[0]`},
		},
		{
			"adapter clusters", func(c *config.Config) {
				c.Clusters[1].Models = []string{"m2"}
				c.Models[0].Adapters = []config.Adapter{{Name: "sql", Clusters: []string{"us-a", "nowhere", "eu-a", "us-a"}}}
			},
			[]string{
				`models[0].adapters[0].clusters[1]: unknown engine cluster "nowhere"`,
				`models[0].adapters[0].clusters[2]: engine cluster "eu-a" does not serve the base model "m1"`,
				`models[0].adapters[0].clusters[3]: engine cluster "us-a" is listed twice`,
			},
		},
		{
			"target utilization", func(c *config.Config) { c.Controller.TargetUtilization = 1.5 },
			[]string{`controller.target_utilization: 1.5 is out of range: want a number in (0, 1]`},
		},
		{
			"unknown policy", func(c *config.Config) { c.Controller.Policy = "random" },
			[]string{`controller.policy: unknown policy "random": want one of optimizer, round_robin, proportional, waterfall`},
		},
		{
			"tick too short", func(c *config.Config) { c.Controller.Tick = config.Duration(time.Millisecond) },
			[]string{`controller.tick: 1ms is too short`},
		},
		{
			"listen clash", func(c *config.Config) { c.Listen.Admin = c.Listen.XDS },
			[]string{`listen.admin: address "127.0.0.1:18000" is already used by listen.xds`},
		},
		{
			"retry typo", func(c *config.Config) { c.Envoy.Retry.On = "connect-failure,retriable-status-code" },
			[]string{`envoy.retry.on: unknown retry condition "retriable-status-code"`, `envoy.retry.status_codes: [503 429] with retry_on`},
		},
		{
			"retry status codes", func(c *config.Config) { c.Envoy.Retry.StatusCodes = []uint32{503, 99} },
			[]string{`envoy.retry.status_codes[1]: 99 is not an HTTP status`},
		},
		{
			"panic threshold", func(c *config.Config) { c.Envoy.HealthyPanicThreshold = 150 },
			[]string{`envoy.healthy_panic_threshold: 150 is not a percentage in [0, 100]`},
		},
		{
			"decision log too large", func(c *config.Config) { c.ExtProc.DecisionLogSize = 2_000_000 },
			[]string{`extproc.decision_log_size: 2000000 is out of range: want 1..1000000`},
		},
		{
			"xds knobs", func(c *config.Config) {
				c.Envoy.EDSMinInterval = config.Duration(-time.Second)
				c.Envoy.XDSAPIType = "DELTA"
			},
			[]string{`envoy.eds_min_interval: -1s is negative`, `envoy.xds_api_type: "DELTA": want GRPC (state of the world) or DELTA_GRPC (incremental)`},
		},
		{
			"canary percent", func(c *config.Config) { c.Envoy.Rollout.CanaryPercent = 101 },
			[]string{`envoy.rollout.canary_percent: 101 is out of range: want 0..100`},
		},
		{
			"health check timeout", func(c *config.Config) { c.Envoy.HealthCheck.Timeout = config.Duration(time.Minute) },
			[]string{`envoy.health_check: interval 5s, timeout 1m0s`},
		},
		{
			"engine protocol", func(c *config.Config) { c.Clusters[0].Protocol = "http3" },
			[]string{`clusters[0].protocol: unknown protocol "http3": want http1 or http2`},
		},
		{
			"source routing", func(c *config.Config) { c.Sources[0].Routing = "header" },
			[]string{`sources[0].routing: unknown routing "header": want draw, cluster or picker`},
		},
		{
			"picker routing without its section", func(c *config.Config) { c.Sources[1].Routing = config.RoutingPicker },
			[]string{`sources[1].picker: routing is picker: name the InferencePool's listener and engine cluster`},
		},
		{
			"picker section without picker routing", func(c *config.Config) {
				c.Sources[1].Picker = &config.SourcePicker{Listen: "127.0.0.1:9002", Cluster: "eu-a"}
			},
			[]string{`sources[1].picker: is set while routing is "draw": want routing: picker`},
		},
		{
			"picker on a bad listener, a cluster that picks no replica, or one other clusters share", func(c *config.Config) {
				c.Sources[0].Routing, c.Sources[0].Picker = config.RoutingPicker, &config.SourcePicker{Listen: "9002", Cluster: "us-a"}
				c.Sources[1].Routing, c.Sources[1].Picker = config.RoutingPicker, &config.SourcePicker{Listen: "127.0.0.1:9002", Cluster: "nope"}
			},
			[]string{
				`sources[0].picker.listen: "9002" is not a valid address`,
				`sources[0].picker.cluster: cluster "us-a" does not pick replicas: an endpoint picker must; set its replica_picking.enabled`,
				`sources[0].picker.cluster: model "m1" of source "edge-us" may also be served by cluster "eu-a", which its InferencePool does not reach: restrict the source's allowed_regions to "us-a"'s`,
				`sources[1].picker.cluster: unknown cluster "nope"`,
			},
		},
		{
			"two pickers on one listener", func(c *config.Config) {
				c.Clusters[0].ReplicaPicking.Enabled, c.Clusters[1].ReplicaPicking.Enabled = true, true
				c.Sources[0].AllowedRegions = []string{"us"}
				c.Sources[0].Routing, c.Sources[0].Picker = config.RoutingPicker, &config.SourcePicker{Listen: "127.0.0.1:9002", Cluster: "us-a"}
				c.Sources[1].Routing, c.Sources[1].Picker = config.RoutingPicker, &config.SourcePicker{Listen: "127.0.0.1:9002", Cluster: "eu-a"}
			},
			[]string{`sources[1].picker.listen: "127.0.0.1:9002" is also source "edge-us"'s picker listener: want one per source`},
		},
		{
			"default priority", func(c *config.Config) { c.Sources[0].DefaultPriority = "urgent" },
			[]string{`sources[0].default_priority: unknown priority "urgent": want one of critical, standard, sheddable`},
		},
		{
			"max output over context", func(c *config.Config) { c.Models[0].ContextTokens, c.Models[0].MaxOutputTokens = 4096, 8192 },
			[]string{`models[0].max_output_tokens: 8192 is out of range: want 1..context_tokens (4096)`},
		},
		{
			"context too small", func(c *config.Config) { c.Models[1].ContextTokens = 8 },
			[]string{`models[1].context_tokens: 8 is out of range`},
		},
		{
			"stream idle timeout under message timeout", func(c *config.Config) { c.ExtProc.StreamIdleTimeout = config.Duration(100 * time.Millisecond) },
			[]string{`extproc.stream_idle_timeout: 100ms is shorter than envoy.message_timeout 1s`},
		},
		{
			"max streams and log bytes", func(c *config.Config) { c.ExtProc.MaxStreams, c.ExtProc.DecisionLogBytes = 0, 10 },
			[]string{`extproc.decision_log_bytes: 10 is too small`, `extproc.max_streams: 0 is not positive`},
		},
		{
			"nack quorum", func(c *config.Config) { c.Envoy.Rollout.NACKQuorum = 1 },
			[]string{`envoy.rollout.nack_quorum: 1 is out of range: want a share in [0, 1)`},
		},
		{
			"blind fraction", func(c *config.Config) { c.Signals.BlindFraction = 2 },
			[]string{`signals.blind_fraction: 2 is out of range`},
		},
		{
			"tls half set", func(c *config.Config) { c.Security.TLS.CertFile = "ilb.pem" },
			[]string{`security.tls.key_file: is empty while cert_file is "ilb.pem"`},
		},
		{
			"peers without client ca", func(c *config.Config) {
				c.Security.TLS = config.TLS{CertFile: "a.pem", KeyFile: "a-key.pem"}
				c.Security.Peers = []config.Peer{{Identity: "spiffe://x/[", Sources: []string{"edge-mars"}}}
			},
			[]string{
				`security.peers: identities come from client certificates: set security.tls.client_ca_file`,
				`security.peers[0].identity: "spiffe://x/[" is not a valid pattern`,
				`security.peers[0].sources[0]: unknown source "edge-mars" (known: edge-us, edge-eu)`,
			},
		},
		{
			"admin off loopback in the clear", func(c *config.Config) { c.Listen.Admin = "0.0.0.0:18002" },
			[]string{`listen.admin: "0.0.0.0:18002" is not a loopback address: serve the admin API off loopback only with security.admin.tls or a security.admin.token_file`},
		},
		{
			"admin client certs without tls", func(c *config.Config) { c.Security.Admin.ClientCerts = true },
			[]string{`security.admin.client_certs: needs security.admin.tls and security.tls.client_ca_file`},
		},
		{"every problem at once", func(c *config.Config) {
			c.Clusters[0].Region = "mars"
			c.Profiles[0].CapacityPerReplica = -3
			c.Sources[0].FailMode = "ajar"
		}, []string{`clusters[0].region`, `profiles[0].capacity_per_replica`, `sources[0].fail_mode`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t)
			tt.mutate(c)
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate() = nil; want problems")
			}
			msgs := problems(t, err)
			for _, w := range tt.want {
				if !containsOne(msgs, w) {
					t.Errorf("no problem contains %q; got:\n%s", w, strings.Join(msgs, "\n"))
				}
			}
		})
	}
}

// problems unwraps the joined error into its FieldErrors' messages.
func problems(t *testing.T, err error) []string {
	t.Helper()
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		t.Fatalf("error %v is not a joined error", err)
	}
	var out []string
	for _, e := range joined.Unwrap() {
		var fe *config.FieldError
		if !errors.As(e, &fe) {
			t.Errorf("problem %v is not a *config.FieldError", e)
		}
		out = append(out, e.Error())
	}
	return out
}

func containsOne(msgs []string, want string) bool {
	for _, m := range msgs {
		if strings.Contains(m, want) {
			return true
		}
	}
	return false
}

func TestSRVDiscoveryAccepted(t *testing.T) {
	c := mustParse(t)
	c.Clusters[0].Endpoints = nil
	c.Clusters[0].Discovery = config.Discovery{Type: config.DiscoveryDNS, Name: "_http._tcp.vllm.svc.cluster.local", SRV: true}
	if err := c.Validate(); err != nil {
		t.Errorf("SRV discovery: %v", err)
	}
}

func TestSourcesOf(t *testing.T) {
	c := mustParse(t)
	c.Security.Peers = []config.Peer{
		{Identity: "spiffe://ilb.test/envoy/edge-us/*", Sources: []string{"edge-us"}},
		{Identity: "*.eu.ilb.internal", Sources: []string{"edge-eu"}},
		{Identity: "spiffe://ilb.test/extproc/*", Sources: []string{"*"}},
		{Identity: "spiffe://ilb.test/envoy/both", Sources: []string{"edge-eu", "edge-us"}},
	}
	tests := []struct {
		name, identity string
		want           []string
	}{
		{"spiffe id of one source", "spiffe://ilb.test/envoy/edge-us/gw-1", []string{"edge-us"}},
		{"star stops at a slash", "spiffe://ilb.test/envoy/edge-us/gw/1", nil},
		{"dns name", "gw-7.eu.ilb.internal", []string{"edge-eu"}},
		{"every source", "spiffe://ilb.test/extproc/r1", []string{"edge-us", "edge-eu"}},
		{"two sources in config order", "spiffe://ilb.test/envoy/both", []string{"edge-us", "edge-eu"}},
		{"no rule", "spiffe://evil.test/envoy/edge-us/gw-1", nil},
		{"empty identity", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.SourcesOf(tt.identity); !slices.Equal(got, tt.want) {
				t.Errorf("SourcesOf(%q) = %v, want %v", tt.identity, got, tt.want)
			}
		})
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:18002": true, "[::1]:1": true, "localhost:80": true, "127.8.9.1:0": true,
		"0.0.0.0:18002": false, "[::]:18002": false, "10.0.0.1:18002": false, "ilb.internal:18002": false, "bad": false,
	} {
		if got := config.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestCapacityLearningValidation(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string // problems, in any order; none: valid
	}{
		{"defaults", ``, nil},
		{"configured", `{mode: configured}`, nil},
		{"every field wrong", `{mode: guessed, ttft_target: 0s, ttft_quantile: 1, time_constant: 10ms}`, []string{
			`controller.capacity.mode: "guessed" is not a mode`,
			"controller.capacity.ttft_target: 0s is not positive",
			"controller.capacity.ttft_quantile: 1 is out of range",
			"controller.capacity.time_constant: 10ms is too short",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := base
			if tt.yaml != "" {
				doc += "controller: {capacity: " + tt.yaml + "}\n"
			}
			c, err := config.Parse([]byte(doc))
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if c.Controller.Capacity.TTFTTarget.Std() != 2*time.Second || c.Controller.Capacity.TTFTQuantile != 0.99 {
					t.Errorf("capacity %+v; want the defaults filled", c.Controller.Capacity)
				}
				if !c.ExtProc.Steering {
					t.Error("extproc.steering is off by default; want on")
				}
				return
			}
			if err == nil {
				t.Fatal("Parse: no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestSteeringOff(t *testing.T) {
	c, err := config.Parse([]byte(base + "extproc: {steering: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.ExtProc.Steering || c.ExtProc.LiveTTL.Std() != 5*time.Second {
		t.Errorf("extproc %+v; want steering off and the other defaults kept", c.ExtProc)
	}
}
