package config

import (
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"time"
)

func (c *Config) validateSettings(p *problems) {
	ct := c.Controller
	if ct.Tick.Std() < 100*time.Millisecond {
		p.addf("controller.tick", "%s is too short: want >= 100ms", ct.Tick)
	}
	if math.IsNaN(ct.TargetUtilization) || ct.TargetUtilization <= 0 || ct.TargetUtilization > 1 {
		p.addf("controller.target_utilization", "%v is out of range: want a number in (0, 1]", ct.TargetUtilization)
	}
	if !slices.Contains(Policies, ct.Policy) {
		p.addf("controller.policy", "unknown policy %q: want one of %s", ct.Policy, join(Policies))
	}
	c.validateController(p)
	c.validateSignals(p)
	c.validateEnvoyKnobs(p)
	c.validateSecurity(p)

	ev := c.Envoy
	if err := checkHostPortZero(ev.Listener); err != nil {
		p.addf("envoy.listener", "%q is not a valid address: %v", ev.Listener, err)
	}
	seen := map[string]bool{}
	checkName(p, "envoy.extproc_cluster", "cluster", ev.ExtProcCluster, seen)
	checkName(p, "envoy.xds_cluster", "cluster", ev.XDSCluster, seen)
	if ev.MessageTimeout.Std() <= 0 || ev.MessageTimeout.Std() > time.Hour {
		p.addf("envoy.message_timeout", "%s is out of range: want a duration in (0, 1h], such as 1s", ev.MessageTimeout)
	}
	if ev.ConnectTimeout.Std() <= 0 {
		p.addf("envoy.connect_timeout", "%s is not positive: want a duration such as 2s", ev.ConnectTimeout)
	}
	switch {
	case len(ev.PathPrefixes) == 0:
		p.addf("envoy.path_prefixes", "is empty: want the path prefixes that reach the engines, such as [/v1/]")
	case len(ev.PathPrefixes) > 32:
		p.addf("envoy.path_prefixes", "has %d entries: want at most 32", len(ev.PathPrefixes))
	}
	for i, pre := range ev.PathPrefixes {
		switch {
		case !strings.HasPrefix(pre, "/") || len(pre) > 256 || strings.ContainsFunc(pre, func(r rune) bool { return r <= ' ' || r > '~' }):
			p.addf(fmt.Sprintf("envoy.path_prefixes[%d]", i), "%q is not a path prefix: want printable ASCII starting with /, at most 256 bytes", pre)
		case slices.Index(ev.PathPrefixes, pre) < i:
			p.addf(fmt.Sprintf("envoy.path_prefixes[%d]", i), "%q is listed twice", pre)
		}
	}
	if ev.RequestBufferBytes < 1024 {
		p.addf("envoy.request_buffer_bytes", "%d is too small: want >= 1024 bytes", ev.RequestBufferBytes)
	}

	if n := c.ExtProc.DecisionLogSize; n < 1 || n > MaxDecisionLogSize {
		p.addf("extproc.decision_log_size", "%d is out of range: want 1..%d (readers scan the log: a query looks at up to every record kept)", n, MaxDecisionLogSize)
	}
	if c.ExtProc.MaxBodyBytes < 1024 {
		p.addf("extproc.max_body_bytes", "%d is too small: want >= 1024 bytes", c.ExtProc.MaxBodyBytes)
	}
	ep := c.ExtProc
	for _, f := range []struct {
		path string
		v    int
	}{{"extproc.default_prompt_tokens", ep.DefaultPromptTokens}, {"extproc.default_output_tokens", ep.DefaultOutputTokens}, {"extproc.retry_after", ep.RetryAfter}} {
		if f.v < 0 {
			p.addf(f.path, "%d is negative", f.v)
		}
	}
	if ep.ReportInterval.Std() < 10*time.Millisecond {
		p.addf("extproc.report_interval", "%s is too short: want >= 10ms", ep.ReportInterval)
	}
	if ep.LiveTTL.Std() <= 0 {
		p.addf("extproc.live_ttl", "%s is not positive", ep.LiveTTL)
	}
	if ep.DecisionLogBytes < 1<<20 {
		p.addf("extproc.decision_log_bytes", "%d is too small: want >= 1048576 bytes (1 MiB)", ep.DecisionLogBytes)
	}
	cn := c.Listen.Connections
	for _, f := range []struct {
		name string
		v    int
	}{{"extproc", cn.ExtProc}, {"xds", cn.XDS}, {"admin", cn.Admin}, {"per_peer", cn.PerPeer}} {
		if f.v < 0 {
			p.addf("listen.connections."+f.name, "%d is negative: want 0 (derived from the open-file limit) or a count", f.v)
		}
	}
	if cn.HandshakeTimeout.Std() < 0 {
		p.addf("listen.connections.handshake_timeout", "%s is negative: want 0 (10s) or a duration", cn.HandshakeTimeout)
	}
	if cn.IdleTimeout.Std() < 0 {
		p.addf("listen.connections.idle_timeout", "%s is negative: want 0 (5m) or a duration", cn.IdleTimeout)
	}
	if ep.MaxHeldBodyBytes < int64(ep.MaxBodyBytes) {
		p.addf("extproc.max_held_body_bytes", "%d is under extproc.max_body_bytes %d: one body could never be held", ep.MaxHeldBodyBytes, ep.MaxBodyBytes)
	}
	if ep.MaxStreams < 1 {
		p.addf("extproc.max_streams", "%d is not positive: want >= 1", ep.MaxStreams)
	}
	if ep.MaxStreamsPerPeer < 0 || ep.MaxStreamsPerPeer > max(ep.MaxStreams, 1) {
		p.addf("extproc.max_streams_per_peer", "%d is out of range: want 0 (half of extproc.max_streams) to extproc.max_streams (%d)", ep.MaxStreamsPerPeer, ep.MaxStreams)
	}
	if ep.MaxFollowedStreams < 0 || ep.MaxFollowedStreams > max(ep.MaxStreams, 1) {
		p.addf("extproc.max_followed_streams", "%d is out of range: want 0 (a quarter of extproc.max_streams) to extproc.max_streams (%d)", ep.MaxFollowedStreams, ep.MaxStreams)
	}
	if ep.StreamIdleTimeout.Std() < ev.MessageTimeout.Std() {
		p.addf("extproc.stream_idle_timeout", "%s is shorter than envoy.message_timeout %s: ILB would end streams Envoy still waits on", ep.StreamIdleTimeout, ev.MessageTimeout)
	}
	if !finite(ep.MaxReportRate) || ep.MaxReportRate <= 0 {
		p.addf("extproc.max_report_rate", "%v is not valid: want a finite number of requests per second > 0", ep.MaxReportRate)
	}

	addrs := map[string]string{}
	for _, l := range []struct{ path, addr string }{
		{"listen.xds", c.Listen.XDS}, {"listen.extproc", c.Listen.ExtProc}, {"listen.admin", c.Listen.Admin},
	} {
		if err := checkHostPortZero(l.addr); err != nil {
			p.addf(l.path, "%q is not a valid address: %v", l.addr, err)
			continue
		}
		if other, dup := addrs[l.addr]; dup && !isPortZero(l.addr) {
			p.addf(l.path, "address %q is already used by %s", l.addr, other)
		}
		addrs[l.addr] = l.path
	}
}

// checkHostPortZero is checkHostPort that also accepts port 0 (an
// ephemeral port, for tests).
func checkHostPortZero(s string) error {
	if isPortZero(s) {
		return nil
	}
	return checkHostPort(s)
}

func isPortZero(s string) bool {
	host, port, err := net.SplitHostPort(s)
	return err == nil && host != "" && port == "0"
}
