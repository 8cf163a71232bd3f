package weights

import (
	"cmp"
	"slices"
	"strings"

	"github.com/ilbproject/ilb/config"
)

// index is the lookup tables of one computation: the configuration's
// lookups scan lists, which at a thousand sources and thousands of
// clusters dominates a solve.
type index struct {
	c       *config.Config
	cluster map[string]int // name -> index in c.Clusters
	region  map[string]int
	links   [][]config.Link // [from][to]
	linkOK  [][]bool
	curve   []config.CostBand
	// clusterRegion is the region index of each cluster.
	clusterRegion []int
	byModel       map[string][]int       // clusters serving a model, config order
	position      map[string]map[int]int // model -> cluster index -> position in byModel
	source        map[string]int         // name -> index in c.Sources
	model         map[string]int         // canonical name -> index in c.Models
	// sourcesByName and modelsByName are the indexes of the sources and
	// models in name order: the order of Demand.Keys.
	sourcesByName, modelsByName []int
	// residency is, per source, its allowed regions sorted and joined by
	// commas, "*" when it has none (every region): part of a class key.
	residency []string
}

func newIndex(c *config.Config) *index {
	ix := &index{
		c: c, cluster: make(map[string]int, len(c.Clusters)), region: make(map[string]int, len(c.Regions)),
		curve: c.Controller.CostCurve(), byModel: map[string][]int{}, position: map[string]map[int]int{},
	}
	for i, r := range c.Regions {
		ix.region[r.Name] = i
	}
	ix.clusterRegion = make([]int, len(c.Clusters))
	for i, e := range c.Clusters {
		ix.cluster[e.Name] = i
		ix.clusterRegion[i] = ix.region[e.Region]
	}
	ix.links = make([][]config.Link, len(c.Regions))
	ix.linkOK = make([][]bool, len(c.Regions))
	for i, a := range c.Regions {
		ix.links[i] = make([]config.Link, len(c.Regions))
		ix.linkOK[i] = make([]bool, len(c.Regions))
		if i < len(c.Regions) {
			ix.links[i][i], ix.linkOK[i][i] = config.DefaultIntraRegion, true
			ix.links[i][i].From, ix.links[i][i].To = a.Name, a.Name
		}
	}
	for _, l := range c.Network {
		f, t := ix.region[l.From], ix.region[l.To]
		ix.links[f][t], ix.linkOK[f][t] = l, true
	}
	for _, m := range c.Models {
		pos := map[int]int{}
		for i, e := range c.Clusters {
			if e.Serves(m.Name) {
				pos[i] = len(ix.byModel[m.Name])
				ix.byModel[m.Name] = append(ix.byModel[m.Name], i)
			}
		}
		ix.position[m.Name] = pos
	}
	ix.source = make(map[string]int, len(c.Sources))
	ix.residency = make([]string, len(c.Sources))
	for i, s := range c.Sources {
		ix.source[s.Name] = i
		ix.residency[i] = "*"
		if len(s.AllowedRegions) > 0 {
			allowed := slices.Clone(s.AllowedRegions)
			slices.Sort(allowed)
			ix.residency[i] = strings.Join(allowed, ",")
		}
	}
	ix.model = make(map[string]int, len(c.Models))
	for i, m := range c.Models {
		ix.model[m.Name] = i
	}
	ix.sourcesByName = byName(c.Sources, func(s config.Source) string { return s.Name })
	ix.modelsByName = byName(c.Models, func(m config.Model) string { return m.Name })
	return ix
}

// byName returns the indexes of list in the order of its names.
func byName[T any](list []T, name func(T) string) []int {
	out := make([]int, len(list))
	for i := range out {
		out[i] = i
	}
	slices.SortStableFunc(out, func(a, b int) int { return cmp.Compare(name(list[a]), name(list[b])) })
	return out
}
