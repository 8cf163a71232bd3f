package config

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
)

// FieldError is one problem of a configuration: the field path (such as
// "clusters[2].region") and what is wrong with its value.
type FieldError struct {
	Path string
	Msg  string
}

func (e *FieldError) Error() string { return e.Path + ": " + e.Msg }

// problems collects every FieldError of one validation.
type problems []error

func (p *problems) addf(path, format string, args ...any) {
	*p = append(*p, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// namePattern is what names that become Envoy cluster names, xDS node
// clusters or metric labels may look like.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

const nameRule = "1-63 characters of letters, digits, '.', '_' or '-', starting with a letter or digit"

// Validate checks the whole configuration and returns every problem at
// once, joined with errors.Join; each is a *FieldError naming the field
// path and the bad value. It returns nil for a valid configuration.
func (c *Config) Validate() error {
	var p problems
	regions := c.validateRegions(&p)
	c.validateNetwork(&p, regions)
	models := c.validateModels(&p)
	profiles := c.validateProfiles(&p)
	c.validateClusters(&p, regions, models, profiles)
	c.validateSources(&p, regions, models)
	c.validateServed(&p)
	c.validateSettings(&p)
	c.validateHA(&p)
	c.validateKubernetes(&p)
	c.validateTenants(&p)
	return errors.Join(p...)
}

func checkName(p *problems, path, kind, name string, seen map[string]bool) {
	switch {
	case name == "":
		p.addf(path, "%s name is empty", kind)
		return
	case !namePattern.MatchString(name):
		p.addf(path, "%s name %q is not valid: want %s", kind, name, nameRule)
	}
	if seen[name] {
		p.addf(path, "duplicate %s %q", kind, name)
	}
	seen[name] = true
}

func (c *Config) validateRegions(p *problems) map[string]bool {
	seen := map[string]bool{}
	if len(c.Regions) == 0 {
		p.addf("regions", "no region is defined: want at least one")
	}
	for i, r := range c.Regions {
		checkName(p, fmt.Sprintf("regions[%d].name", i), "region", r.Name, seen)
	}
	return seen
}

func (c *Config) validateNetwork(p *problems, regions map[string]bool) {
	pairs := map[[2]string]bool{}
	for i, l := range c.Network {
		path := fmt.Sprintf("network[%d]", i)
		checkRegion(p, path+".from", l.From, regions)
		checkRegion(p, path+".to", l.To, regions)
		if bad(l.RTTMs) {
			p.addf(path+".rtt_ms", "%v is not a valid round-trip time: want a finite number >= 0", l.RTTMs)
		}
		if bad(l.EgressUSDPerGB) {
			p.addf(path+".egress_usd_per_gb", "%v is not a valid price: want a finite number >= 0", l.EgressUSDPerGB)
		}
		k := [2]string{l.From, l.To}
		if pairs[k] {
			p.addf(path, "duplicate link from %q to %q", l.From, l.To)
		}
		pairs[k] = true
	}
}

// bad reports whether v is not a finite number >= 0.
func bad(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) || v < 0 }

func checkRegion(p *problems, path, name string, regions map[string]bool) {
	if !regions[name] {
		p.addf(path, "unknown region %q (known: %s)", name, keys(regions))
	}
}

func keys(m map[string]bool) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	if len(ks) == 0 {
		return "none"
	}
	return strings.Join(ks, ", ")
}

func (c *Config) validateModels(p *problems) map[string]bool {
	names := map[string]bool{}
	if len(c.Models) == 0 {
		p.addf("models", "no model is defined: want at least one")
	}
	all := map[string]string{} // name or alias -> path of first use
	for i, m := range c.Models {
		path := fmt.Sprintf("models[%d].name", i)
		checkModelName(p, path, m.Name, all)
		names[m.Name] = true
		for j, a := range m.Aliases {
			checkModelName(p, fmt.Sprintf("models[%d].aliases[%d]", i, j), a, all)
		}
		c.validateAdapters(p, i, m, all)
	}
	return names
}

// checkModelName checks a model name or alias: it travels in a header
// (x-ilb-route-model), so it must be printable ASCII without spaces.
func checkModelName(p *problems, path, name string, all map[string]string) {
	switch {
	case name == "":
		p.addf(path, "model name is empty")
		return
	case len(name) > 256 || strings.IndexFunc(name, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0:
		p.addf(path, "model name %q is not valid: want 1-256 printable ASCII characters without spaces", name)
	}
	if first, dup := all[name]; dup {
		p.addf(path, "model name %q is already used at %s", name, first)
		return
	}
	all[name] = path
}

func (c *Config) validateProfiles(p *problems) map[string]bool {
	seen := map[string]bool{}
	for i, pr := range c.Profiles {
		path := fmt.Sprintf("profiles[%d]", i)
		checkName(p, path+".name", "profile", pr.Name, seen)
		if math.IsNaN(pr.CapacityPerReplica) || math.IsInf(pr.CapacityPerReplica, 0) || pr.CapacityPerReplica <= 0 {
			p.addf(path+".capacity_per_replica", "%v is not a valid capacity: want a finite number > 0 (token-cost units per second per replica)", pr.CapacityPerReplica)
		}
	}
	return seen
}
