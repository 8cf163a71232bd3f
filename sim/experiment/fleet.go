package experiment

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/sim/replica"
	"github.com/ilbproject/ilb/sim/workload"
)

// Fleet is the world of an experiment: regions and the network between
// them, the sources (one Envoy fleet per region at most), the models and
// the engine clusters.
type Fleet struct {
	Regions []string
	// Links are the round trips and egress prices between regions, both
	// directions listed; inside a region config.DefaultIntraRegion holds.
	Links   []config.Link
	Sources []Source
	// Models are the served model names; every cluster serves a subset.
	Models []string
	// Adapters is the LoRA adapters of every model (workload.AdapterName),
	// declared in the configuration; 0: none.
	Adapters int
	Clusters []Cluster
}

// Source is an Envoy fleet.
type Source struct {
	Name, Region string
	// Allowed restricts the regions its traffic may be served in (data
	// residency); empty allows every region.
	Allowed []string
}

// Cluster is an engine cluster: Replicas replicas of one replica profile.
type Cluster struct {
	Name, Region string
	Models       []string
	Replicas     int
	// Profile names a sim/replica profile, e.g. "llama-3-8b/h100".
	Profile string
	// LoRA is its engines' LoRA settings (zero: LoRA disabled).
	LoRA replica.LoRA
}

// Validate reports every problem of f at once.
func (f Fleet) Validate() error {
	var errs []error
	region := map[string]bool{}
	for _, r := range f.Regions {
		region[r] = true
	}
	for i, s := range f.Sources {
		if !region[s.Region] {
			errs = append(errs, fmt.Errorf("sources[%d].region: unknown region %q", i, s.Region))
		}
		for _, a := range s.Allowed {
			if !region[a] {
				errs = append(errs, fmt.Errorf("sources[%d].allowed: unknown region %q", i, a))
			}
		}
	}
	for i, c := range f.Clusters {
		if !region[c.Region] {
			errs = append(errs, fmt.Errorf("clusters[%d].region: unknown region %q", i, c.Region))
		}
		if c.Replicas < 1 {
			errs = append(errs, fmt.Errorf("clusters[%d].replicas: %d, want >= 1", i, c.Replicas))
		}
		for _, m := range c.Models {
			if !slices.Contains(f.Models, m) {
				errs = append(errs, fmt.Errorf("clusters[%d].models: unknown model %q", i, m))
			}
		}
	}
	return errors.Join(errs...)
}

// link is the network from a to b.
func (f Fleet) link(a, b string) config.Link {
	for _, l := range f.Links {
		if l.From == a && l.To == b {
			return l
		}
	}
	if a == b {
		return config.DefaultIntraRegion
	}
	return config.Link{From: a, To: b}
}

// ControllerSettings are the controller knobs an experiment sets.
type ControllerSettings struct {
	Policy config.Policy
	// CapacityPerReplica per replica profile, in token-cost units per
	// second at saturation (see Calibrate).
	CapacityPerReplica map[string]float64
	// TickSeconds is the controller tick; 0: 5.
	TickSeconds float64
	// SignalsInterval is signals.interval (0: its default); the scrape
	// and probe timeouts are capped at it.
	SignalsInterval time.Duration
}

// Config renders f as an ILB configuration for the weights controller:
// one profile per replica profile, one endpoint per replica (addresses are
// placeholders: the experiment never dials them), signals off.
func (f Fleet) Config(s ControllerSettings) (*config.Config, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	tick := s.TickSeconds
	if tick == 0 {
		tick = 5
	}
	var b strings.Builder
	b.WriteString("regions:\n")
	for _, r := range f.Regions {
		fmt.Fprintf(&b, "  - name: %s\n", r)
	}
	if len(f.Links) > 0 {
		b.WriteString("network:\n")
		for _, l := range f.Links {
			fmt.Fprintf(&b, "  - {from: %s, to: %s, rtt_ms: %g, egress_usd_per_gb: %g}\n", l.From, l.To, l.RTTMs, l.EgressUSDPerGB)
		}
	}
	b.WriteString("sources:\n")
	for _, src := range f.Sources {
		fmt.Fprintf(&b, "  - {name: %s, region: %s, fail_mode: open, default_model: %s", src.Name, src.Region, f.Models[0])
		if len(src.Allowed) > 0 {
			fmt.Fprintf(&b, ", allowed_regions: [%s]", strings.Join(src.Allowed, ", "))
		}
		b.WriteString("}\n")
	}
	b.WriteString("models:\n")
	for _, m := range f.Models {
		fmt.Fprintf(&b, "  - name: %s\n", m)
		if f.Adapters > 0 {
			b.WriteString("    adapters:\n")
			for i := range f.Adapters {
				fmt.Fprintf(&b, "      - name: %s\n", workload.AdapterName(m, i))
			}
		}
	}
	var profiles []string
	for _, c := range f.Clusters {
		if !slices.Contains(profiles, c.Profile) {
			profiles = append(profiles, c.Profile)
		}
	}
	b.WriteString("profiles:\n")
	for _, p := range profiles {
		capacity, ok := s.CapacityPerReplica[p]
		if !ok || capacity <= 0 {
			return nil, fmt.Errorf("fleet: no capacity for replica profile %q", p)
		}
		fmt.Fprintf(&b, "  - {name: %s, capacity_per_replica: %g}\n", profileName(p), capacity)
	}
	b.WriteString("clusters:\n")
	for ci, c := range f.Clusters {
		eps := make([]string, c.Replicas)
		for i := range eps {
			eps[i] = fmt.Sprintf("\"10.%d.%d.%d:8000\"", ci/250, ci%250, i+1)
		}
		fmt.Fprintf(&b, "  - {name: %s, region: %s, engine: vllm, models: [%s], profile: %s, endpoints: [%s]}\n",
			c.Name, c.Region, strings.Join(c.Models, ", "), profileName(c.Profile), strings.Join(eps, ", "))
	}
	fmt.Fprintf(&b, "controller: {tick: %gs, policy: %s}\n", tick, s.Policy)
	if iv := s.SignalsInterval; iv > 0 {
		fmt.Fprintf(&b, "signals: {disabled: true, interval: %s, timeout: %s, retry_delay: %s}\n", iv, min(iv, 500*time.Millisecond), min(iv, 200*time.Millisecond))
	} else {
		b.WriteString("signals: {disabled: true}\n")
	}
	c, err := config.Parse([]byte(b.String()))
	if err != nil {
		return nil, fmt.Errorf("fleet: configuration: %w", err)
	}
	return c, nil
}

// profileName turns a replica profile name ("llama-3-8b/h100") into a
// configuration name ("llama-3-8b-h100").
func profileName(p string) string { return strings.NewReplacer("/", "-", ".", "-").Replace(p) }
