package route

import (
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

// Targets lays out the targets of source s's cell wc for NewCell, as
// ext_proc and the benchmark both route it: wc's clusters in Envoy's
// weighted_clusters order, then every other cluster s may reach for the
// model (config.Reachable) with weight 0 — a spill target Envoy's draw
// never takes but steering may name — each with its round trip from s
// and its profile's capacity per replica.
func Targets(cfg *config.Config, s config.Source, wc weights.Cell) []Target {
	out := make([]Target, 0, len(wc.Targets))
	listed := make(map[string]bool, len(wc.Targets))
	add := func(name string, weight uint64) {
		t := Target{Cluster: name, Weight: weight}
		if e, ok := cfg.Cluster(name); ok {
			l, _ := cfg.Link(s.Region, e.Region)
			t.RTT = l.RTTMs / 1000
			if p, ok := cfg.Profile(e.Profile); ok {
				t.Capacity = p.CapacityPerReplica
			}
		}
		out = append(out, t)
		listed[name] = true
	}
	for _, t := range wc.Targets {
		add(t.Cluster, uint64(t.Weight))
	}
	for _, e := range cfg.Reachable(s, wc.Model) {
		if !listed[e.Name] {
			add(e.Name, 0)
		}
	}
	return out
}
