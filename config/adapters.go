package config

import (
	"fmt"
	"slices"
	"strings"
)

// MaxAdapters bounds the LoRA adapters declared for one base model: every
// adapter is a name ext_proc resolves and a label value it may emit.
const MaxAdapters = 4096

// Adapter is a LoRA adapter of a base model (Model.Adapters). Clients name
// it as the model ("model": "sql-lora"); the engines serve it on the base
// model's replicas (vLLM --lora-modules or run-time loading), so its
// requests count in the base model's demand and capacity, go only to the
// clusters that serve it, and within a cluster preferably to a replica
// that has it loaded (docs/architecture.md, "LoRA adapters").
type Adapter struct {
	// Name is the adapter's name as the engines serve it and clients ask
	// for it; unique among every model name, alias and adapter.
	Name string `yaml:"name" json:"name"`
	// Clusters are the engine clusters serving the base model that can
	// serve the adapter; empty: every cluster serving the base model.
	Clusters []string `yaml:"clusters,omitempty" json:"clusters,omitempty"`
}

// ResolvedAdapter is an adapter with its base model.
type ResolvedAdapter struct {
	Adapter
	// Model is the base model's canonical name.
	Model string
}

// FindAdapter returns the adapter named name, if one is declared.
func (c *Config) FindAdapter(name string) (ResolvedAdapter, bool) {
	for _, m := range c.Models {
		for _, a := range m.Adapters {
			if a.Name == name {
				return ResolvedAdapter{Adapter: a, Model: m.Name}, true
			}
		}
	}
	return ResolvedAdapter{}, false
}

// ServesAdapter reports whether cluster e can serve adapter a (of its base
// model).
func (a ResolvedAdapter) ServesAdapter(e EngineCluster) bool {
	return e.Serves(a.Model) && (len(a.Clusters) == 0 || slices.Contains(a.Clusters, e.Name))
}

// validateAdapters checks model i's adapters: names unique across all
// model names (all), clusters known and serving the base model.
func (c *Config) validateAdapters(p *problems, i int, m Model, all map[string]string) {
	if len(m.Adapters) > MaxAdapters {
		p.addf(fmt.Sprintf("models[%d].adapters", i), "%d adapters: want at most %d per model", len(m.Adapters), MaxAdapters)
		return
	}
	for j, a := range m.Adapters {
		path := fmt.Sprintf("models[%d].adapters[%d]", i, j)
		checkModelName(p, path+".name", a.Name, all)
		if strings.Contains(a.Name, ",") {
			p.addf(path+".name", "adapter name %q has a comma: engines list adapters comma-separated (vllm:lora_requests_info)", a.Name)
		}
		seen := map[string]bool{}
		for k, cl := range a.Clusters {
			cpath := fmt.Sprintf("%s.clusters[%d]", path, k)
			e, ok := c.Cluster(cl)
			switch {
			case !ok:
				p.addf(cpath, "unknown engine cluster %q", cl)
			case !e.Serves(m.Name):
				p.addf(cpath, "engine cluster %q does not serve the base model %q (its models: %v)", cl, m.Name, e.Models)
			case seen[cl]:
				p.addf(cpath, "engine cluster %q is listed twice", cl)
			}
			seen[cl] = true
		}
	}
}
