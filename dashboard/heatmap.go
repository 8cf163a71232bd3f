package dashboard

import (
	"slices"
	"time"

	"github.com/ilbproject/ilb/weights"
)

// Heatmap is the /ui/api/weights document: the weights in force, one
// sources × clusters matrix per model.
type Heatmap struct {
	Version  string      `json:"version"`
	Policy   string      `json:"policy"`
	Computed time.Time   `json:"computed"`
	Status   string      `json:"status,omitempty"`
	Models   []HeatModel `json:"models"`
}

// HeatModel is the matrix of one model: a row per source, a column per
// cluster serving the model.
type HeatModel struct {
	Model    string        `json:"model"`
	Clusters []HeatCluster `json:"clusters"`
	Rows     []HeatRow     `json:"rows"`
}

// HeatCluster is a column: an engine cluster with the controller's plan.
type HeatCluster struct {
	Name        string   `json:"name"`
	Region      string   `json:"region,omitempty"`
	Engine      string   `json:"engine,omitempty"`
	Capacity    *float64 `json:"capacity"`
	Utilization *float64 `json:"utilization"`
}

// HeatRow is a source's traffic of the model.
type HeatRow struct {
	Source string `json:"source"`
	Region string `json:"region,omitempty"`
	// NoCapacity: the cell has no target (requests get 503 no_capacity).
	NoCapacity bool                  `json:"no_capacity"`
	Shed       weights.ShedFractions `json:"shed"`
	Demand     float64               `json:"demand"`
	Served     float64               `json:"served"`
	Summary    string                `json:"summary,omitempty"`
	Cells      []HeatCell            `json:"cells"`
}

// HeatCell is one (source, model, cluster): the integer weight, its share
// (weight / weights.Total) and, when the cluster gets nothing, why.
type HeatCell struct {
	Cluster  string  `json:"cluster"`
	Weight   uint32  `json:"weight"`
	Share    float64 `json:"share"`
	Excluded string  `json:"excluded,omitempty"`
}

// layout is the heatmap's axes.
type layout struct {
	sources, models []string
	regions         map[string]string   // source or cluster → region
	engines         map[string]string   // cluster → engine kind
	serving         map[string][]string // model → clusters serving it, in order
}

// layoutOf returns the axes: from the configuration when there is one,
// else from the cells of vi (sorted names).
func (d *Dashboard) layoutOf(vi *versionInfo) layout {
	l := layout{regions: map[string]string{}, engines: map[string]string{}, serving: map[string][]string{}}
	if c := d.o.Config; c != nil {
		for _, s := range c.Sources {
			l.sources = append(l.sources, s.Name)
			l.regions[s.Name] = s.Region
		}
		for _, m := range c.Models {
			l.models = append(l.models, m.Name)
		}
		for _, e := range c.Clusters {
			l.regions[e.Name], l.engines[e.Name] = e.Region, string(e.Engine)
			for _, m := range e.Models {
				l.serving[m] = append(l.serving[m], e.Name)
			}
		}
		return l
	}
	if vi == nil {
		return l
	}
	for _, c := range vi.cells {
		l.sources = append(l.sources, c.Source)
		l.models = append(l.models, c.Model)
		add := func(cl string) {
			if !slices.Contains(l.serving[c.Model], cl) {
				l.serving[c.Model] = append(l.serving[c.Model], cl)
			}
		}
		for _, t := range c.Targets {
			add(t.Cluster)
		}
		if c.Explanation != nil {
			for _, t := range c.Explanation.Terms {
				add(t.Cluster)
			}
		}
	}
	slices.Sort(l.sources)
	slices.Sort(l.models)
	l.sources, l.models = slices.Compact(l.sources), slices.Compact(l.models)
	for m := range l.serving {
		slices.Sort(l.serving[m])
	}
	return l
}

// heatmap builds the document of vi.
func (d *Dashboard) heatmap(vi *versionInfo) Heatmap {
	w := vi.w
	h := Heatmap{Version: w.Version(), Policy: w.Policy(), Computed: w.Computed(), Status: w.Status()}
	l := d.layoutOf(vi)
	for _, m := range l.models {
		hm := HeatModel{Model: m, Clusters: []HeatCluster{}, Rows: []HeatRow{}}
		for _, cl := range l.serving[m] {
			hm.Clusters = append(hm.Clusters, HeatCluster{
				Name: cl, Region: l.regions[cl], Engine: l.engines[cl],
				Capacity: lookup(vi.capacity, cl), Utilization: lookup(vi.util, cl),
			})
		}
		for _, s := range l.sources {
			cell, ok := w.Cell(s, m)
			if !ok {
				continue // the source does not route this model
			}
			row := HeatRow{
				Source: s, Region: l.regions[s], NoCapacity: len(cell.Targets) == 0,
				Shed: cell.Shed, Demand: cell.Demand, Served: cell.Served, Cells: []HeatCell{},
			}
			e := vi.explanation(s, m)
			if e != nil {
				row.Summary = e.Summary
			}
			for _, cl := range l.serving[m] {
				hc := HeatCell{Cluster: cl}
				for _, t := range cell.Targets {
					if t.Cluster == cl {
						hc.Weight = t.Weight
					}
				}
				hc.Share = float64(hc.Weight) / weights.Total
				if e != nil {
					for _, t := range e.Terms {
						if t.Cluster == cl {
							hc.Excluded = t.Excluded
						}
					}
				}
				row.Cells = append(row.Cells, hc)
			}
			hm.Rows = append(hm.Rows, row)
		}
		h.Models = append(h.Models, hm)
	}
	return h
}

// clusterSamples reads the signals monitor and vi's plan, one entry per
// cluster of the configuration (or of the snapshot without one).
func (d *Dashboard) clusterSamples(vi *versionInfo) []ClusterSample {
	var names []string
	if d.o.Config != nil {
		for _, e := range d.o.Config.Clusters {
			names = append(names, e.Name)
		}
	}
	snap := d.snapshot()
	if d.o.Config == nil && snap != nil {
		for n := range snap.Clusters {
			names = append(names, n)
		}
		slices.Sort(names)
	}
	out := make([]ClusterSample, 0, len(names))
	for _, n := range names {
		cs := ClusterSample{Name: n}
		if snap != nil {
			if c, ok := snap.Clusters[n]; ok {
				cs.Known = true
				cs.Ready, cs.Warming, cs.Draining, cs.Unhealthy, cs.Stale, cs.Starting = c.Ready, c.Warming, c.Draining, c.Unhealthy, c.Stale, c.Starting
				cs.Saturated, cs.SaturatedReplicas = c.Saturated, c.SaturatedReplicas
				if c.LoadKnown > 0 {
					w, r := c.Waiting, c.Running
					cs.Waiting, cs.Running = &w, &r
				}
				if c.RatesKnown > 0 {
					tps := c.TokensPerSecond
					cs.TokensPerSecond = &tps
				}
				if c.KVKnown {
					kv := c.KVUsage
					cs.KVUsage = &kv
				}
			}
		}
		if vi != nil {
			cs.Capacity, cs.Utilization = lookup(vi.capacity, n), lookup(vi.util, n)
		}
		out = append(out, cs)
	}
	return out
}

func lookup(m map[string]float64, k string) *float64 {
	v, ok := m[k]
	if !ok {
		return nil
	}
	return &v
}
