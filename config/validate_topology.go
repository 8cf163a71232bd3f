package config

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

func (c *Config) validateClusters(p *problems, regions, models, profiles map[string]bool) {
	seen := map[string]bool{}
	reserved := map[string]bool{c.Envoy.ExtProcCluster: true, c.Envoy.XDSCluster: true}
	if len(c.Clusters) == 0 {
		p.addf("clusters", "no engine cluster is defined: want at least one")
	}
	for i, e := range c.Clusters {
		path := fmt.Sprintf("clusters[%d]", i)
		checkName(p, path+".name", "cluster", e.Name, seen)
		if reserved[e.Name] {
			p.addf(path+".name", "cluster name %q is reserved for ILB's own bootstrap clusters (envoy.extproc_cluster, envoy.xds_cluster)", e.Name)
		}
		checkRegion(p, path+".region", e.Region, regions)
		if !slices.Contains(EngineKinds, e.Engine) {
			p.addf(path+".engine", "unknown engine %q: want one of %s", e.Engine, join(EngineKinds))
		}
		if len(e.Models) == 0 {
			p.addf(path+".models", "cluster %q serves no model: want at least one", e.Name)
		}
		servedHere := map[string]bool{}
		for j, m := range e.Models {
			mp := fmt.Sprintf("%s.models[%d]", path, j)
			switch {
			case servedHere[m]:
				p.addf(mp, "model %q is listed twice", m)
			case !models[m]:
				if canon, ok := c.ResolveModel(m); ok {
					p.addf(mp, "%q is an alias: name the model %q", m, canon)
				} else {
					p.addf(mp, "unknown model %q (known: %s)", m, keys(models))
				}
			}
			servedHere[m] = true
		}
		if !profiles[e.Profile] {
			p.addf(path+".profile", "unknown profile %q (known: %s)", e.Profile, keys(profiles))
		}
		c.validateClusterSignals(p, path, e)
		eps := map[string]bool{}
		for j, ep := range e.Endpoints {
			ep0 := fmt.Sprintf("%s.endpoints[%d]", path, j)
			if err := checkHostPort(ep); err != nil {
				p.addf(ep0, "%q is not a valid endpoint: %v", ep, err)
			}
			if eps[ep] {
				p.addf(ep0, "endpoint %q is listed twice", ep)
			}
			eps[ep] = true
		}
	}
}

// checkHostPort accepts "host:port" with a non-empty host (IP or DNS name)
// and a port in 1..65535.
func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("want host:port: %w", err)
	}
	if host == "" {
		return fmt.Errorf("the host is empty")
	}
	if net.ParseIP(host) == nil && !validDNSName(host) {
		return fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number in 1..65535", port)
	}
	return nil
}

func validDNSName(h string) bool {
	if len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '-' {
				return false
			}
		}
	}
	return true
}

func (c *Config) validateSources(p *problems, regions, models map[string]bool) {
	seen := map[string]bool{}
	if len(c.Sources) == 0 {
		p.addf("sources", "no source is defined: want at least one")
	}
	for i, s := range c.Sources {
		path := fmt.Sprintf("sources[%d]", i)
		checkName(p, path+".name", "source", s.Name, seen)
		checkRegion(p, path+".region", s.Region, regions)
		allowed := map[string]bool{}
		for j, r := range s.AllowedRegions {
			rp := fmt.Sprintf("%s.allowed_regions[%d]", path, j)
			checkRegion(p, rp, r, regions)
			if allowed[r] {
				p.addf(rp, "region %q is listed twice", r)
			}
			allowed[r] = true
		}
		if s.FailMode != FailOpen && s.FailMode != FailClosed {
			p.addf(path+".fail_mode", "unknown fail mode %q: want %q or %q", s.FailMode, FailOpen, FailClosed)
		}
		if s.Listener != "" {
			if err := checkHostPortZero(s.Listener); err != nil {
				p.addf(path+".listener", "%q is not a valid address: %v", s.Listener, err)
			}
		}
		if !models[s.DefaultModel] {
			p.addf(path+".default_model", "unknown model %q (known: %s)", s.DefaultModel, keys(models))
		}
		if !slices.Contains(Priorities, s.DefaultPriority) {
			p.addf(path+".default_priority", "unknown priority %q: want one of %s", s.DefaultPriority, strings.Join(Priorities, ", "))
		}
		c.validateReach(p, path, s, models)
	}
}

// validateReach checks that residency leaves every model of the source at
// least one cluster, and that the network reaches every cluster the source
// may use.
func (c *Config) validateReach(p *problems, path string, s Source, models map[string]bool) {
	for _, m := range c.Models {
		if !models[m.Name] || len(c.servers(m.Name)) == 0 {
			continue // reported once per model by validateServed
		}
		if pk := s.Picker; pk != nil {
			if e, ok := c.Cluster(pk.Cluster); ok && !e.Serves(m.Name) {
				continue // not the pool's model: refused by its picker
			}
		}
		if len(c.Eligible(s, m.Name)) == 0 {
			p.addf(path+".allowed_regions", "source %q may not reach model %q: no cluster serving it is in its allowed regions [%s] (served in: %s)",
				s.Name, m.Name, strings.Join(s.AllowedRegions, ", "), strings.Join(c.servedRegions(m.Name), ", "))
		}
	}
	missing := map[string]bool{}
	for _, e := range c.Clusters {
		if !s.Allows(e.Region) || missing[e.Region] {
			continue
		}
		if _, ok := c.Link(s.Region, e.Region); !ok {
			missing[e.Region] = true
			p.addf("network", "no link from region %q to region %q, which source %q may use (cluster %q): add {from: %s, to: %s, rtt_ms: ..., egress_usd_per_gb: ...}",
				s.Region, e.Region, s.Name, e.Name, s.Region, e.Region)
		}
	}
}

// validateServed checks that every model is served by some cluster.
func (c *Config) validateServed(p *problems) {
	for i, m := range c.Models {
		if m.Name != "" && len(c.servers(m.Name)) == 0 {
			p.addf(fmt.Sprintf("models[%d]", i), "model %q is served by no engine cluster", m.Name)
		}
	}
}

func (c *Config) servers(model string) []EngineCluster {
	var out []EngineCluster
	for _, e := range c.Clusters {
		if e.Serves(model) {
			out = append(out, e)
		}
	}
	return out
}

func (c *Config) servedRegions(model string) []string {
	var out []string
	for _, e := range c.servers(model) {
		if !slices.Contains(out, e.Region) {
			out = append(out, e.Region)
		}
	}
	return out
}

func join[T ~string](vs []T) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}
