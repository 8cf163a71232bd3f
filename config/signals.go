package config

import (
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Signals configures how ILB watches the engines: metric scrapes, health
// probes and the replica state machine (package signals).
type Signals struct {
	// Disabled turns watching off: every configured endpoint counts as a
	// ready replica, as before any signal.
	Disabled bool `yaml:"disabled,omitempty" json:"disabled,omitempty"`
	// Interval between scrapes of one replica (jittered by ±10%); default
	// 1s. The request path's rules read what the scrapes show in time
	// (a queue or an overload lasts when seen at every scrape over
	// 750 ms), but rates are over one interval and the health rules count
	// probes (UnhealthyAfter, StaleAfter), with Timeout at most Interval.
	Interval Duration `yaml:"interval" json:"interval"`
	// Timeout of one scrape or probe; default 500ms, at most Interval.
	Timeout Duration `yaml:"timeout" json:"timeout"`
	// Concurrency bounds scrapes in flight; default 64.
	Concurrency int `yaml:"concurrency" json:"concurrency"`
	// MaxBodyBytes caps a metrics response; a larger one is an error.
	// Default 4 MiB.
	MaxBodyBytes int `yaml:"max_body_bytes" json:"max_body_bytes"`
	// RetryDelay: after a failed scrape the replica is probed again this
	// soon rather than a whole interval later; default 200ms.
	RetryDelay Duration `yaml:"retry_delay" json:"retry_delay"`
	// UnhealthyAfter consecutive failures make a replica unhealthy, and
	// HealthyAfter consecutive successes bring it back (hysteresis);
	// defaults 2 and 2.
	UnhealthyAfter int `yaml:"unhealthy_after" json:"unhealthy_after"`
	HealthyAfter   int `yaml:"healthy_after" json:"healthy_after"`
	// StaleAfter intervals without fresh metrics (but no failure either,
	// e.g. hanging scrapes) make a replica stale; default 5.
	StaleAfter int `yaml:"stale_after" json:"stale_after"`
	// Warmup is the slow-start ramp of a new or recovered replica: its
	// share of capacity and of load-balancing weight grows linearly from
	// 10% to 100% over it; default 30s, 0 to disable.
	Warmup Duration `yaml:"warmup" json:"warmup"`
	// SaturationQueue: a replica with at least this many waiting requests
	// per running one (or per 1 when none runs) is saturated; default 0.5:
	// a queue of half the batch is seconds of waiting on a vLLM-class
	// engine, and ext_proc steers requests away from saturated clusters
	// (docs/benchmarks.md: 2 reacted too late to a code burst).
	SaturationQueue float64 `yaml:"saturation_queue" json:"saturation_queue"`
	// SaturationKV: a replica whose KV cache usage is at least this is
	// saturated; default 0.95.
	SaturationKV float64 `yaml:"saturation_kv" json:"saturation_kv"`
	// BlindFraction: when health probes of more than this share (or all)
	// of the replicas taking traffic, in two clusters or more, fail
	// silently (timeouts, no answer; not refusals or HTTP errors) at once,
	// ILB takes itself for blind rather than the fleet for dead: replicas
	// failing silently keep their last known state and the controller
	// fails static (blind). ILB is blind too while its signals loop falls
	// behind. In (0, 1], 1 meaning all; default 0.5.
	BlindFraction float64 `yaml:"blind_fraction" json:"blind_fraction"`
	// Mappings are custom metric mappings, referenced by
	// clusters[].metrics.mapping.
	Mappings map[string]MetricMapping `yaml:"mappings,omitempty" json:"mappings,omitempty"`
}

// MetricMapping names the metrics of an engine. Each name is a metric
// family; Waiting and Running are gauges, KVUsage a gauge in [0, 1] (or
// "" when the engine has none: KV stays unknown, not zero), the token
// metrics counters.
type MetricMapping struct {
	Waiting          string `yaml:"waiting" json:"waiting"`
	Running          string `yaml:"running" json:"running"`
	KVUsage          string `yaml:"kv_usage,omitempty" json:"kv_usage,omitempty"`
	PromptTokens     string `yaml:"prompt_tokens,omitempty" json:"prompt_tokens,omitempty"`
	GenerationTokens string `yaml:"generation_tokens,omitempty" json:"generation_tokens,omitempty"`
	// TTFT is a histogram family of the engine's time to first token in
	// seconds (e.g. vllm:time_to_first_token_seconds); "" when it has none.
	TTFT string `yaml:"ttft,omitempty" json:"ttft,omitempty"`
	// ModelLabel is the label that names the model when one endpoint
	// serves several; default "model_name".
	ModelLabel string `yaml:"model_label,omitempty" json:"model_label,omitempty"`
}

// Discovery says where a cluster's replicas come from.
type Discovery struct {
	// Type is "static" (the endpoints list; default), "dns", "file" or
	// "kubernetes".
	Type DiscoveryType `yaml:"type" json:"type"`
	// Name is the DNS name (dns): A/AAAA records with Port, or SRV
	// records when SRV is set (e.g. _http._tcp.vllm.svc.cluster.local).
	Name string `yaml:"name,omitempty" json:"name,omitempty"`
	Port int    `yaml:"port,omitempty" json:"port,omitempty"`
	SRV  bool   `yaml:"srv,omitempty" json:"srv,omitempty"`
	// File is a file of host:port lines (file); a line may end with
	// " draining" to drain that replica; '#' starts a comment. Re-read when
	// it changes. A file that is empty or only whitespace (as an in-place
	// rewrite looks while truncated), unreadable, over 16 MiB or with a
	// malformed line keeps the last targets and is reported (the cluster's
	// discovery error and a log line); a file with only comment lines is an
	// explicit empty list and drains every replica. Replace the file by
	// rename.
	File string `yaml:"file,omitempty" json:"file,omitempty"`
	// Kubernetes takes the replicas from a Service's EndpointSlices or an
	// InferencePool's Pods, watched (kubernetes).
	Kubernetes *KubeDiscovery `yaml:"kubernetes,omitempty" json:"kubernetes,omitempty"`
	// Refresh is how often DNS is re-resolved or the file checked
	// (kubernetes discovery is told of every change by its watch, and
	// re-reads its cache this often too); also how long a replica that
	// left discovery stays draining before it is forgotten. Default 10s.
	Refresh Duration `yaml:"refresh,omitempty" json:"refresh,omitempty"`
}

// DiscoveryType names a discovery method.
type DiscoveryType string

// Discovery types.
const (
	DiscoveryStatic DiscoveryType = "static"
	DiscoveryDNS    DiscoveryType = "dns"
	DiscoveryFile   DiscoveryType = "file"
	DiscoveryKube   DiscoveryType = "kubernetes"
)

// Metrics says how to read a cluster's replicas.
type Metrics struct {
	// Path of the Prometheus endpoint; default "/metrics"
	// ("/prometheus/metrics" for trtllm, whose /metrics is JSON).
	Path string `yaml:"path" json:"path"`
	// Port serves the metrics when it is not the endpoint's own port (the
	// health path is probed on the endpoint's port); 0 means the
	// endpoint's; default 8002 for triton, whose metrics have their own
	// port.
	Port int `yaml:"port,omitempty" json:"port,omitempty"`
	// HealthPath is probed for liveness; default "/health" (vLLM, SGLang,
	// TGI and trtllm-serve serve it), "/v2/health/ready" for triton.
	HealthPath string `yaml:"health_path" json:"health_path"`
	// Mapping names a custom mapping of signals.mappings; default the
	// built-in mapping of the cluster's engine.
	Mapping string `yaml:"mapping,omitempty" json:"mapping,omitempty"`
}

// DefaultSignals returns the signal defaults.
func DefaultSignals() Signals {
	return Signals{
		Interval: Duration(time.Second), Timeout: Duration(500 * time.Millisecond),
		Concurrency: 64, MaxBodyBytes: 4 << 20, RetryDelay: Duration(200 * time.Millisecond),
		UnhealthyAfter: 2, HealthyAfter: 2, StaleAfter: 5, Warmup: Duration(30 * time.Second),
		SaturationQueue: 0.5, SaturationKV: 0.95, BlindFraction: 0.5,
	}
}

func (c *Config) validateSignals(p *problems) {
	s := c.Signals
	if s.Interval.Std() < 10*time.Millisecond {
		p.addf("signals.interval", "%s is too short: want >= 10ms", s.Interval)
	}
	if s.Timeout.Std() <= 0 || s.Timeout > s.Interval {
		p.addf("signals.timeout", "%s is out of range: want a duration in (0, interval %s]", s.Timeout, s.Interval)
	}
	if s.RetryDelay.Std() < 0 || s.RetryDelay > s.Interval {
		p.addf("signals.retry_delay", "%s is out of range: want a duration in [0, interval %s]", s.RetryDelay, s.Interval)
	}
	for _, f := range []struct {
		path string
		v    int
	}{
		{"signals.concurrency", s.Concurrency},
		{"signals.max_body_bytes", s.MaxBodyBytes},
		{"signals.unhealthy_after", s.UnhealthyAfter},
		{"signals.healthy_after", s.HealthyAfter},
		{"signals.stale_after", s.StaleAfter},
	} {
		if f.v < 1 {
			p.addf(f.path, "%d is not positive: want >= 1", f.v)
		}
	}
	if s.Warmup.Std() < 0 {
		p.addf("signals.warmup", "%s is negative", s.Warmup)
	}
	if !finite(s.SaturationQueue) || s.SaturationQueue <= 0 {
		p.addf("signals.saturation_queue", "%v is not valid: want a finite number > 0", s.SaturationQueue)
	}
	if !finite(s.SaturationKV) || s.SaturationKV <= 0 || s.SaturationKV > 1 {
		p.addf("signals.saturation_kv", "%v is out of range: want a number in (0, 1]", s.SaturationKV)
	}
	if !finite(s.BlindFraction) || s.BlindFraction <= 0 || s.BlindFraction > 1 {
		p.addf("signals.blind_fraction", "%v is out of range: want a number in (0, 1]", s.BlindFraction)
	}
	for _, name := range slices.Sorted(maps.Keys(s.Mappings)) { // the same problems in the same order every time
		if m := s.Mappings[name]; m.Waiting == "" || m.Running == "" {
			p.addf("signals.mappings."+name, "waiting and running are required metric names")
		}
	}
}

// validateClusterSignals checks a cluster's discovery and metrics.
func (c *Config) validateClusterSignals(p *problems, path string, e EngineCluster) {
	d := e.Discovery
	switch d.Type {
	case DiscoveryStatic:
		if len(e.Endpoints) == 0 {
			p.addf(path+".endpoints", "cluster %q has no endpoint: want at least one host:port (or a dns or file discovery)", e.Name)
		}
	case DiscoveryDNS:
		name := d.Name
		if d.SRV { // _service._proto.name: the labels may start with '_'
			name = strings.ReplaceAll(name, "_", "x")
		}
		if !validDNSName(name) {
			p.addf(path+".discovery.name", "%q is not a DNS name", d.Name)
		}
		if !d.SRV && (d.Port < 1 || d.Port > 65535) {
			p.addf(path+".discovery.port", "%d is not a port in 1..65535 (A records need one; or set srv)", d.Port)
		}
	case DiscoveryFile:
		if d.File == "" {
			p.addf(path+".discovery.file", "a file discovery needs a file path")
		}
	case DiscoveryKube:
		c.validateKubeDiscovery(p, path, d.Kubernetes)
	default:
		p.addf(path+".discovery.type", "unknown discovery %q: want static, dns, file or kubernetes", d.Type)
	}
	if d.Kubernetes != nil && d.Type != DiscoveryKube {
		p.addf(path+".discovery.kubernetes", "set, but discovery.type is %s: want type kubernetes, or remove the section", d.Type)
	}
	if d.Type != DiscoveryStatic && len(e.Endpoints) > 0 {
		p.addf(path+".endpoints", "cluster %q lists endpoints and uses %s discovery: keep one", e.Name, d.Type)
	}
	if d.Refresh.Std() < 0 {
		p.addf(path+".discovery.refresh", "%s is negative", d.Refresh)
	}
	for _, f := range []struct{ path, v string }{{".metrics.path", e.Metrics.Path}, {".metrics.health_path", e.Metrics.HealthPath}} {
		if u, err := url.Parse(f.v); err != nil || u.Path == "" || u.Path[0] != '/' || u.Host != "" {
			p.addf(path+f.path, "%q is not a URL path: want one starting with /", f.v)
		}
	}
	if e.Metrics.Port < 0 || e.Metrics.Port > 65535 {
		p.addf(path+".metrics.port", "%d is not a port: want 1..65535, or 0 for the endpoint's", e.Metrics.Port)
	}
	if m := e.Metrics.Mapping; m != "" {
		if _, ok := c.Signals.Mappings[m]; !ok {
			names := make([]string, 0, len(c.Signals.Mappings))
			for n := range c.Signals.Mappings {
				names = append(names, n)
			}
			slices.Sort(names)
			p.addf(path+".metrics.mapping", "unknown mapping %q (signals.mappings has: %v)", m, names)
		}
	}
}

// applySignalDefaults fills a cluster's discovery and metrics defaults.
// trtllm-serve serves JSON stats on /metrics and Prometheus text on
// /prometheus/metrics.
func (e *EngineCluster) applySignalDefaults() {
	if e.Protocol == "" {
		e.Protocol = ProtocolHTTP1
	}
	if e.Discovery.Type == "" {
		e.Discovery.Type = DiscoveryStatic
	}
	if e.Discovery.Refresh == 0 {
		e.Discovery.Refresh = Duration(10 * time.Second)
	}
	if e.Metrics.Path == "" {
		e.Metrics.Path = "/metrics"
		if e.Engine == EngineTRTLLM {
			e.Metrics.Path = "/prometheus/metrics"
		}
	}
	if e.Metrics.HealthPath == "" {
		e.Metrics.HealthPath = "/health"
		if e.Engine == EngineTriton {
			e.Metrics.HealthPath = "/v2/health/ready"
		}
	}
	if e.Metrics.Port == 0 && e.Engine == EngineTriton {
		e.Metrics.Port = 8002
	}
}

// Saturated is the one saturation rule, of a replica or of a cluster's
// sums: waiting >= SaturationQueue × max(running, 1), or, when the KV
// cache usage is known, kv >= SaturationKV. The signals monitor, the
// capacity estimator and the routing benchmark all apply it.
func (s Signals) Saturated(waiting, running float64, kvKnown bool, kv float64) bool {
	return waiting >= s.SaturationQueue*max(running, 1) || kvKnown && kv >= s.SaturationKV
}

// OverTarget is the one rule of overload in the SLO's terms, of a
// cluster's engines: more than 1 − TTFTQuantile of their first tokens
// (slow of first, both per second) came past TTFTTarget while at least one
// request waited per replica (waitingPerReplica). First tokens past the
// target with nothing waiting are the prompts' own prefill time, which
// no routing or shedding shortens: not overload. An engine at its
// max_num_seqs queues whatever its queue per running request, so the
// queue is counted per replica, not per running request. The capacity
// estimator applies it to its smoothed window, the fast loop to the last
// signals interval.
func (c CapacityLearning) OverTarget(first, slow, waitingPerReplica float64) bool {
	return first > 0 && slow/first > 1-c.TTFTQuantile && waitingPerReplica >= 1
}
