package config

import (
	"fmt"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ilbproject/ilb/internal/bound"
)

// HA makes `ilb serve` one of several replicas of one ILB that share an
// etcd cluster: one leader, elected through etcd, computes the weights
// and publishes them there; every replica serves the published version;
// demand is shared under leases (docs/operations.md, "High
// availability"). Absent (nil), ILB is the single process it always was.
type HA struct {
	// Endpoints are the etcd members' client URLs, http(s)://host:port
	// or host:port (https when tls is set); 1 to 16. Empty with
	// Kubernetes.
	Endpoints []string `yaml:"endpoints,omitempty" json:"endpoints,omitempty"`
	// Kubernetes, instead of etcd, elects the leader on a
	// coordination.k8s.io Lease and shares the weights versions, demand
	// and store through the API server (config/ha_kube.go).
	Kubernetes *HAKubernetes `yaml:"kubernetes,omitempty" json:"kubernetes,omitempty"`
	// TLS secures the connection to etcd; empty: plain TCP, or https://
	// endpoints verified with the system's roots.
	TLS HATLS `yaml:"tls,omitempty" json:"tls"`
	// KeyPrefix starts every key ILB reads or writes in etcd: the
	// replicas of one ILB share it, ILBs sharing an etcd cluster must not.
	// It starts and ends with '/'; default "/ilb/".
	KeyPrefix string `yaml:"key_prefix" json:"key_prefix"`
	// LeaseTTL is how long etcd keeps a replica's lease without a renewal:
	// a replica that stops renewing it (dead, cut off) loses its
	// leadership and its share of the demand that much later, and a new
	// leader publishes within about two of it. Whole seconds in [2s, 60s];
	// default 5s.
	LeaseTTL Duration `yaml:"lease_ttl" json:"lease_ttl"`
	// Replica names this replica: its demand key in etcd, and the
	// leader's name in logs and /healthz. Unique among the replicas;
	// default "" means the host name and process id (hostname-pid).
	Replica string `yaml:"replica,omitempty" json:"replica,omitempty"`
	// DialTimeout bounds each attempt to reach etcd (connecting, and
	// every request ILB makes); default 5s, in [100ms, 1m].
	DialTimeout Duration `yaml:"dial_timeout" json:"dial_timeout"`
}

// HATLS names the PEM files of ILB's connection to etcd.
type HATLS struct {
	// CAFile is the bundle of CAs that sign the etcd members'
	// certificates; empty: the system's roots.
	CAFile string `yaml:"ca_file,omitempty" json:"ca_file,omitempty"`
	// CertFile and KeyFile are the client certificate and key ILB
	// presents (etcd's --client-cert-auth); both or neither.
	CertFile string `yaml:"cert_file,omitempty" json:"cert_file,omitempty"`
	KeyFile  string `yaml:"key_file,omitempty" json:"key_file,omitempty"`
	// ServerName is the name the members' certificates must carry;
	// empty: the endpoint's host.
	ServerName string `yaml:"server_name,omitempty" json:"server_name,omitempty"`
}

// Enabled reports whether the connection to etcd uses TLS.
func (t HATLS) Enabled() bool { return t != HATLS{} }

// DefaultHA returns the settings of an ha: section that gives only its
// endpoints.
func DefaultHA() HA {
	return HA{KeyPrefix: "/ilb/", LeaseTTL: Duration(5 * time.Second), DialTimeout: Duration(5 * time.Second)}
}

// Limits of the ha: section.
const (
	MaxHAEndpoints   = 16
	MinHALeaseTTL    = 2 * time.Second
	MaxHALeaseTTL    = time.Minute
	maxHAKeyPrefix   = 128
	maxHAEndpointLen = 256
)

// UnmarshalYAML decodes an ha: section strictly (an unknown field is an
// error naming its line) over DefaultHA.
func (h *HA) UnmarshalYAML(n *yaml.Node) error {
	if errs := unknownFields(n, reflect.TypeFor[HA](), "ha"); len(errs) > 0 {
		return &yaml.TypeError{Errors: errs}
	}
	type plain HA // without this method
	v := plain(DefaultHA())
	if err := n.Decode(&v); err != nil {
		return err
	}
	*h = HA(v)
	return nil
}

// unknownFields lists the keys of mapping n (and of its nested mappings)
// that no yaml tag of struct t names, each as "line N: field K not found
// in type config.T" like the strict decoder of the whole file.
func unknownFields(n *yaml.Node, t reflect.Type, path string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind != yaml.MappingNode || t.Kind() != reflect.Struct {
		return nil
	}
	var errs []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		f, ok := fieldByTag(t, k.Value)
		if !ok {
			errs = append(errs, fmt.Sprintf("line %d: field %s not found in type config.%s", k.Line, k.Value, t.Name()))
			continue
		}
		errs = append(errs, unknownFields(v, f.Type, path+"."+k.Value)...)
	}
	return errs
}

func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// validateHA checks the ha: section, if any.
func (c *Config) validateHA(p *problems) {
	h := c.HA
	if h == nil {
		return
	}
	switch {
	case h.Kubernetes != nil:
		c.validateHAKube(p)
	case len(h.Endpoints) == 0:
		p.addf("ha.endpoints", "is empty: want the client URLs of the etcd members, such as [https://etcd-0:2379], or a kubernetes section to keep the group in a Kubernetes API server")
	case len(h.Endpoints) > MaxHAEndpoints:
		p.addf("ha.endpoints", "has %d entries: want at most %d", len(h.Endpoints), MaxHAEndpoints)
	}
	for i, e := range h.Endpoints {
		path := fmt.Sprintf("ha.endpoints[%d]", i)
		if err := checkEndpoint(e, h.TLS.Enabled()); err != nil {
			p.addf(path, "%s is not a valid etcd endpoint: %v", bound.Quote(e, bound.Excerpt), err)
		} else if slices.Index(h.Endpoints, e) < i {
			p.addf(path, "%q is listed twice", e)
		}
	}
	t := h.TLS
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		p.addf("ha.tls.key_file", "is empty while cert_file is %q: want the client certificate's private key", t.CertFile)
	case t.CertFile == "" && t.KeyFile != "":
		p.addf("ha.tls.cert_file", "is empty while key_file is %q: want the client certificate", t.KeyFile)
	}
	if len(t.ServerName) > 253 || strings.ContainsFunc(t.ServerName, func(r rune) bool { return r <= ' ' || r > '~' }) {
		p.addf("ha.tls.server_name", "%s is not a host name: want at most 253 printable ASCII characters", bound.Quote(t.ServerName, bound.Excerpt))
	}
	kp := h.KeyPrefix
	if len(kp) < 3 || len(kp) > maxHAKeyPrefix || !strings.HasPrefix(kp, "/") || !strings.HasSuffix(kp, "/") ||
		strings.ContainsFunc(kp, func(r rune) bool { return r <= ' ' || r > '~' }) {
		p.addf("ha.key_prefix", "%s is not a key prefix: want 3-%d printable ASCII characters without spaces, starting and ending with '/', such as \"/ilb/\"", bound.Quote(kp, bound.Excerpt), maxHAKeyPrefix)
	}
	if ttl := h.LeaseTTL.Std(); ttl < MinHALeaseTTL || ttl > MaxHALeaseTTL || ttl%time.Second != 0 {
		p.addf("ha.lease_ttl", "%s is out of range: want whole seconds in [%s, %s] (etcd leases count seconds)", h.LeaseTTL, MinHALeaseTTL, MaxHALeaseTTL)
	}
	if h.Replica != "" && !namePattern.MatchString(h.Replica) {
		p.addf("ha.replica", "%s is not a valid replica name: want %s", bound.Quote(h.Replica, bound.Excerpt), nameRule)
	}
	if d := h.DialTimeout.Std(); d < 100*time.Millisecond || d > time.Minute {
		p.addf("ha.dial_timeout", "%s is out of range: want a duration in [100ms, 1m]", h.DialTimeout)
	}
}

// checkEndpoint checks an etcd client URL or host:port; with tls, plain
// http:// is refused.
func checkEndpoint(e string, tls bool) error {
	if len(e) > maxHAEndpointLen {
		return fmt.Errorf("%d bytes: want at most %d", len(e), maxHAEndpointLen)
	}
	hostport := e
	if strings.Contains(e, "://") {
		u, err := url.Parse(e)
		if err != nil {
			return fmt.Errorf("want http(s)://host:port: %w", err)
		}
		switch {
		case u.Scheme != "http" && u.Scheme != "https":
			return fmt.Errorf("scheme %q: want http or https", u.Scheme)
		case u.Scheme == "http" && tls:
			return fmt.Errorf("plain http while ha.tls is set: want https://")
		case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
			return fmt.Errorf("want only a scheme, host and port")
		}
		hostport = u.Host
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("want host:port: %w", err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q: want 1-65535", port)
	}
	if host == "" {
		return fmt.Errorf("no host")
	}
	return nil
}
