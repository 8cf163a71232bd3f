package route

import (
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

// Targets lays out the targets of source s's cell wc for NewCell, as
// ext_proc and the benchmark both route it: wc's clusters in Envoy's
// weighted_clusters order, then every other cluster s may reach for the
// model (config.Reachable) with weight 0 — a spill target Envoy's draw
// never takes but steering may name — each with its round trip from s.
func Targets(cfg *config.Config, s config.Source, wc weights.Cell) []Target {
	out := make([]Target, 0, len(wc.Targets))
	listed := make(map[string]bool, len(wc.Targets))
	add := func(name string, weight uint64) {
		var rtt float64
		if e, ok := cfg.Cluster(name); ok {
			l, _ := cfg.Link(s.Region, e.Region)
			rtt = l.RTTMs / 1000
		}
		out = append(out, Target{Cluster: name, Weight: weight, RTT: rtt})
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
