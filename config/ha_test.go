package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
)

// TestHADefaults: no ha: section is the single process; a section with
// endpoints only gets the defaults.
func TestHADefaults(t *testing.T) {
	if c := mustParse(t); c.HA != nil {
		t.Fatalf("without ha: the config has HA = %+v, want nil (one process)", c.HA)
	}
	c, err := config.Parse([]byte(base + "ha: {endpoints: [\"127.0.0.1:2379\"]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := config.DefaultHA()
	want.Endpoints = []string{"127.0.0.1:2379"}
	if c.HA == nil || c.HA.KeyPrefix != "/ilb/" || c.HA.LeaseTTL.Std() != 5*time.Second || c.HA.DialTimeout.Std() != 5*time.Second ||
		c.HA.Replica != "" || c.HA.TLS.Enabled() || len(c.HA.Endpoints) != 1 {
		t.Fatalf("ha = %+v, want %+v", c.HA, want)
	}
	full := base + `ha:
  endpoints: ["https://etcd-0:2379", "etcd-1:2379"]
  tls: {ca_file: ca.pem, cert_file: c.pem, key_file: k.pem, server_name: etcd.internal}
  key_prefix: /fleet-a/
  lease_ttl: 10s
  replica: ilb-0
  dial_timeout: 2s
`
	c, err = config.Parse([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	h := c.HA
	if h.KeyPrefix != "/fleet-a/" || h.LeaseTTL.Std() != 10*time.Second || h.Replica != "ilb-0" || h.DialTimeout.Std() != 2*time.Second ||
		h.TLS != (config.HATLS{CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem", ServerName: "etcd.internal"}) {
		t.Fatalf("ha = %+v", h)
	}
}

func TestHADecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"unknown field", "ha:\n  endpoints: [\"a:1\"]\n  ttl: 5s\n", "line 18: field ttl not found in type config.HA"},
		{"unknown nested field", "ha:\n  endpoints: [\"a:1\"]\n  tls: {ca: x}\n", "line 18: field ca not found in type config.HATLS"},
		{"wrong type", "ha: {endpoints: \"a:1\"}\n", "cannot unmarshal !!str `a:1` into []string"},
		{"bad duration", "ha: {endpoints: [\"a:1\"], lease_ttl: long}\n", `"long" is not a duration`},
		{"not a mapping", "ha: [1]\n", "cannot unmarshal !!seq into config.plain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse([]byte(base + tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse error = %v; want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestHAValidate(t *testing.T) {
	long := strings.Repeat("x", 300)
	tests := []struct {
		name   string
		mutate func(h *config.HA)
		want   []string // each in one problem, in this order
	}{
		{"valid", func(*config.HA) {}, nil},
		{"no endpoint", func(h *config.HA) { h.Endpoints = nil }, []string{"ha.endpoints: is empty"}},
		{"too many endpoints", func(h *config.HA) {
			h.Endpoints = nil
			for i := range 17 {
				h.Endpoints = append(h.Endpoints, "e:"+string(rune('1'+i%9))+"0"+string(rune('0'+i/9)))
			}
		}, []string{"ha.endpoints: has 17 entries: want at most 16"}},
		{"bad endpoints", func(h *config.HA) {
			h.Endpoints = []string{"etcd-0", "ftp://e:1", "http://e:99999", "https://u@e:1", "https://e:1/path", ":2379", long, "e:1", "e:1"}
		}, []string{
			`ha.endpoints[0]: "etcd-0" is not a valid etcd endpoint: want host:port`,
			`ha.endpoints[1]: "ftp://e:1" is not a valid etcd endpoint: scheme "ftp": want http or https`,
			`ha.endpoints[2]: "http://e:99999" is not a valid etcd endpoint: port "99999": want 1-65535`,
			`ha.endpoints[3]: "https://u@e:1" is not a valid etcd endpoint: want only a scheme, host and port`,
			`ha.endpoints[4]: "https://e:1/path" is not a valid etcd endpoint: want only a scheme, host and port`,
			`ha.endpoints[5]: ":2379" is not a valid etcd endpoint: no host`,
			`ha.endpoints[6]: "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…(+251 bytes)" is not a valid etcd endpoint: 300 bytes: want at most 256`,
			`ha.endpoints[8]: "e:1" is listed twice`,
		}},
		{"plain http with tls", func(h *config.HA) {
			h.Endpoints = []string{"http://e:1", "https://e:2"}
			h.TLS.CAFile = "ca.pem"
		}, []string{`ha.endpoints[0]: "http://e:1" is not a valid etcd endpoint: plain http while ha.tls is set`}},
		{"cert without key", func(h *config.HA) { h.TLS.CertFile = "c.pem" }, []string{`ha.tls.key_file: is empty while cert_file is "c.pem"`}},
		{"key without cert", func(h *config.HA) { h.TLS.KeyFile = "k.pem" }, []string{`ha.tls.cert_file: is empty while key_file is "k.pem"`}},
		{"bad server name", func(h *config.HA) { h.TLS.ServerName = "etcd internal" }, []string{`ha.tls.server_name: "etcd internal" is not a host name`}},
		{"bad key prefixes", func(h *config.HA) { h.KeyPrefix = "ilb" }, []string{`ha.key_prefix: "ilb" is not a key prefix`}},
		{"root prefix", func(h *config.HA) { h.KeyPrefix = "/" }, []string{`ha.key_prefix: "/" is not a key prefix`}},
		{"prefix with a space", func(h *config.HA) { h.KeyPrefix = "/a b/" }, []string{`ha.key_prefix: "/a b/" is not a key prefix`}},
		{"long prefix", func(h *config.HA) { h.KeyPrefix = "/" + long + "/" }, []string{`ha.key_prefix: "/xxx`}},
		{"lease too short", func(h *config.HA) { h.LeaseTTL = config.Duration(time.Second) }, []string{"ha.lease_ttl: 1s is out of range: want whole seconds in [2s, 1m0s]"}},
		{"lease too long", func(h *config.HA) { h.LeaseTTL = config.Duration(2 * time.Minute) }, []string{"ha.lease_ttl: 2m0s is out of range"}},
		{"lease not whole seconds", func(h *config.HA) { h.LeaseTTL = config.Duration(2500 * time.Millisecond) }, []string{"ha.lease_ttl: 2.5s is out of range"}},
		{"bad replica", func(h *config.HA) { h.Replica = "ilb 0" }, []string{`ha.replica: "ilb 0" is not a valid replica name`}},
		{"dial timeout", func(h *config.HA) { h.DialTimeout = 0 }, []string{"ha.dial_timeout: 0s is out of range: want a duration in [100ms, 1m]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t)
			h := config.DefaultHA()
			h.Endpoints = []string{"https://etcd-0:2379", "etcd-1:2379"}
			tt.mutate(&h)
			c.HA = &h
			wantProblems(t, c.Validate(), tt.want)
		})
	}
}

// wantProblems checks err holds one *config.FieldError per want, in
// order, each containing its want; none when want is empty.
func wantProblems(t *testing.T, err error, want []string) {
	t.Helper()
	var got []string
	for _, e := range unjoin(err) {
		var fe *config.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("problem %v is not a *config.FieldError", e)
		}
		got = append(got, e.Error())
	}
	if len(got) != len(want) {
		t.Fatalf("problems:\n%s\nwant %d:\n%s", strings.Join(got, "\n"), len(want), strings.Join(want, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("problem %d = %q; want it to contain %q", i, got[i], w)
		}
	}
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// TestHAKubernetes: ha.kubernetes decodes over its defaults, strictly,
// and is checked with every problem named: etcd settings beside it, the
// API server, namespace, Lease and replica names.
func TestHAKubernetes(t *testing.T) {
	c, err := config.Parse([]byte(base + "ha: {kubernetes: {namespace: ilb}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if k := c.HA.Kubernetes; k == nil || *k != (config.HAKubernetes{Namespace: "ilb", Lease: "ilb"}) || len(c.HA.Endpoints) != 0 {
		t.Fatalf("ha = %+v, kubernetes %+v; want the default Lease", c.HA, c.HA.Kubernetes)
	}
	if _, err := config.Parse([]byte(base + "ha: {kubernetes: {namespace: ilb, leases: x}}\n")); err == nil ||
		!strings.Contains(err.Error(), "field leases not found in type config.HAKubernetes") {
		t.Fatalf("an unknown field: err = %v", err)
	}
	tests := []struct {
		name   string
		mutate func(c *config.Config)
		want   []string
	}{
		{"valid", func(*config.Config) {}, nil},
		{"valid with a named API server", func(c *config.Config) {
			c.Kubernetes.APIServers = []config.KubeAPIServer{{Name: "east", Kubeconfig: "k.yaml"}, {Name: "west", Kubeconfig: "k.yaml"}}
			c.HA.Kubernetes.APIServer = "west"
		}, nil},
		{"etcd settings beside it", func(c *config.Config) {
			c.HA.Endpoints = []string{"e:1"}
			c.HA.TLS.CAFile = "ca.pem"
		}, []string{"ha.endpoints: lists 1 etcd members while ha.kubernetes is set", "ha.tls: is set while ha.kubernetes is set"}},
		{"unknown API server", func(c *config.Config) { c.HA.Kubernetes.APIServer = "east" }, []string{`ha.kubernetes.api_server: unknown API server "east": want one of in-cluster`}},
		{"API server to name", func(c *config.Config) {
			c.Kubernetes.APIServers = []config.KubeAPIServer{{Name: "east", Kubeconfig: "k.yaml"}, {Name: "west", Kubeconfig: "k.yaml"}}
		}, []string{"ha.kubernetes.api_server: kubernetes.api_servers has 2 API servers: name one of east, west"}},
		{"bad names", func(c *config.Config) {
			c.HA.Kubernetes.Namespace, c.HA.Kubernetes.Lease, c.HA.Replica = "", "ILB", "ilb_0"
		}, []string{`ha.kubernetes.namespace: "" is not a namespace name`, `ha.kubernetes.lease: "ILB" is not a Lease name`, `ha.replica: "ilb_0" cannot name a Kubernetes object`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t)
			h := config.DefaultHA()
			k := config.DefaultHAKubernetes()
			k.Namespace = "ilb"
			h.Kubernetes = &k
			c.HA = &h
			tt.mutate(c)
			wantProblems(t, c.Validate(), tt.want)
		})
	}
}
