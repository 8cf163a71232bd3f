package extproc

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/route"
	"github.com/ilbproject/ilb/weights"
)

// State is the request-path view of one weights version: for every source
// and model, the clusters in the order Envoy walks them. It is immutable
// and swapped whole (atomic.Pointer) when a new version is published.
type State struct {
	version string
	limits  map[string]demand.Limits // by canonical model
	sources map[string]*sourceState
	models  map[string]string // name or alias -> canonical name
	// adapters are the LoRA adapters by name (config.Model.Adapters).
	adapters map[string]*adapterRoute
	known    string // canonical names, for error messages
}

// adapterRoute is where a LoRA adapter's requests may go: clusters of
// its base model, all of them when clusters is nil.
type adapterRoute struct {
	name, model string
	clusters    map[string]bool
}

// serves reports whether the cluster serves the adapter.
func (a *adapterRoute) serves(cluster string) bool {
	return a.clusters == nil || a.clusters[cluster]
}

// restrict marks the targets of c that do not serve the adapter excluded
// in sig (the cell's live signals, nil without live state, in which case
// a zero signal stands for each target, in buf's memory when it has
// room): the draw then takes the base model's weights over the clusters
// that serve it, and spill targets that serve it when none with weight
// does.
func (a *adapterRoute) restrict(c *cell, sig, buf []route.Signal) []route.Signal {
	if a.clusters == nil {
		return sig
	}
	if sig == nil {
		buf = append(buf[:0], make([]route.Signal, len(c.targets))...)
		sig = buf
	}
	for i, t := range c.targets {
		if !a.clusters[t.Cluster] {
			sig[i].Excluded = true
		}
	}
	return sig
}

type sourceState struct {
	name  string
	debug bool
	// trustPriority: x-ilb-priority is honoured; else defaultPriority
	// applies to every request.
	trustPriority   bool
	defaultPriority weights.Priority
	// trustTenant: x-ilb-tenant is honoured (fair shedding); else every
	// request is the tenant "".
	trustTenant  bool
	defaultModel string
	cells        map[string]*cell // by canonical model
	// pool is the engine cluster of the InferencePool whose endpoint
	// picker this source is (routing: picker), "" otherwise; poolModels
	// the models it serves.
	pool       string
	poolModels map[string]bool
	// models is what ILB answers the source's model list and retrievals.
	models modelList
	// mismatched caches ilb_extproc_served_mismatch_total of the source,
	// filled when first counted (mismatchCounter).
	mismatched atomic.Pointer[prometheus.Counter]
}

// cell is one (source, model): its targets as the route decision takes
// them, their names in the same order, and every cluster serving the
// model for decision records.
type cell struct {
	targets    []route.Target // weighted, then spill targets (route.Targets)
	rc         *route.Cell
	candidates []decision.Candidate
	// modelHeader and clusterHeader (by target) set the route headers,
	// shared by every decision's mutation (never changed).
	modelHeader   *corev3.HeaderValueOption
	clusterHeader []*corev3.HeaderValueOption
	// decided caches ilb_extproc_decisions_total of this cell's source and
	// model for each target and routed reason (index target ×
	// len(routedReasons) + reason), filled when first counted: a series
	// appears with its first request, as without the cache.
	decided []atomic.Pointer[prometheus.Counter]
	// annotated is the candidates with the exclusions and marks of the
	// live state they were annotated with: every record decided on the
	// same live state shares them (records never change them).
	annotated atomic.Pointer[annotated]
}

// annotated is a cell's candidates as one live state marks them.
type annotated struct {
	live       *live.State
	candidates []decision.Candidate
}

// newState indexes a weights version for the request path.
func newState(c *config.Config, w *weights.Weights) (*State, error) {
	st := &State{version: w.Version(), sources: map[string]*sourceState{}, models: map[string]string{}, limits: map[string]demand.Limits{}}
	var names []string
	ep := c.ExtProc
	for _, m := range c.Models {
		st.models[m.Name] = m.Name
		lim := demand.NewLimits(ep, m)
		st.limits[m.Name] = lim
		for _, a := range m.Aliases {
			st.models[a] = m.Name
		}
		for _, a := range m.Adapters {
			if st.adapters == nil {
				st.adapters = map[string]*adapterRoute{}
			}
			ar := &adapterRoute{name: a.Name, model: m.Name}
			if len(a.Clusters) > 0 {
				ar.clusters = map[string]bool{}
				for _, cl := range a.Clusters {
					ar.clusters[cl] = true
				}
			}
			st.adapters[a.Name] = ar
		}
		names = append(names, m.Name)
	}
	st.known = strings.Join(names, ", ")
	for _, s := range c.Sources {
		prio, err := weights.ParsePriority(s.DefaultPriority)
		if err != nil {
			return nil, fmt.Errorf("source %s: default priority: %w", s.Name, err)
		}
		ss := &sourceState{
			name: s.Name, debug: s.Debug, defaultModel: s.DefaultModel, cells: map[string]*cell{},
			trustPriority: s.TrustPriorityHeader, defaultPriority: prio, trustTenant: s.TrustTenantHeader,
		}
		if s.Picker != nil {
			ss.pool, ss.poolModels = s.Picker.Cluster, map[string]bool{}
			if e, ok := c.Cluster(s.Picker.Cluster); ok {
				for _, m := range e.Models {
					ss.poolModels[m] = true
				}
			}
		}
		ss.models = newModelList(c, s, ss.poolModels)
		for _, m := range c.Models {
			wc, ok := w.Cell(s.Name, m.Name)
			if !ok {
				return nil, fmt.Errorf("weights %s have no cell for source %s, model %s", w.Version(), s.Name, m.Name)
			}
			ss.cells[m.Name] = newCell(c, s, m.Name, wc)
		}
		st.sources[s.Name] = ss
	}
	return st, nil
}

// newCell indexes a cell. Its candidates are every cluster serving the
// model, in configuration order: those with a weight, and the others with
// why they have none that is known without the controller's explanation
// (residency); `ilb why` tells the rest.
func newCell(cfg *config.Config, s config.Source, model string, wc weights.Cell) *cell {
	c := &cell{targets: route.Targets(cfg, s, wc)}
	c.decided = make([]atomic.Pointer[prometheus.Counter], len(c.targets)*len(routedReasons))
	c.modelHeader = sharedHeader(header.RouteModel, model)
	for _, t := range c.targets {
		c.clusterHeader = append(c.clusterHeader, sharedHeader(header.RouteCluster, t.Cluster))
	}
	c.rc = route.NewCell(c.targets, wc.Shed)
	weight := map[string]uint32{}
	for _, t := range wc.Targets {
		weight[t.Cluster] = t.Weight
	}
	for _, e := range cfg.Clusters {
		if !e.Serves(model) {
			continue
		}
		cand := decision.Candidate{Cluster: e.Name, Weight: weight[e.Name], Share: float64(weight[e.Name]) / float64(max(c.rc.Total(), 1))}
		switch {
		case !s.Allows(e.Region):
			cand.Excluded = fmt.Sprintf("residency: region %s is not in the allowed regions of source %s", e.Region, s.Name)
		case cand.Weight == 0 && slices.ContainsFunc(c.targets, func(t route.Target) bool { return t.Cluster == e.Name }):
			cand.Spill = true // weight 0, but steering may use it
		case cand.Weight == 0:
			cand.Excluded = "weight 0 in this weights version (ilb weights --explain says why)"
		}
		c.candidates = append(c.candidates, cand)
	}
	return c
}

// sameModel reports whether two names a client gave name one model (the
// same name, or a name and its alias).
func (s *State) sameModel(a, b string) bool {
	if a == b {
		return true
	}
	ca, ok := s.models[a]
	return ok && ca == s.models[b]
}

// Version is the weights version this state was built from.
func (s *State) Version() string { return s.version }
