package routetable

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/openai"
	"github.com/ilbproject/ilb/weights"
)

// Kind is what a step of the table matches.
type Kind uint8

const (
	// ToCluster matches a request whose x-ilb-route-cluster names the
	// cluster (ext_proc's decision), one of Clusters.
	ToCluster Kind = iota
	// ByModel matches a request whose x-ilb-route-model names Model
	// exactly: Targets, drawn by x-ilb-route-draw.
	ByModel
	// ByHint matches a fail-open source's request without a decision
	// whose client hint x-ilb-model is one of Names, under Prefixes:
	// Targets, drawn at random.
	ByHint
	// Fallback matches any other request under Prefixes
	// (envoy.path_prefixes): the default model's Targets drawn at random
	// (fail-open), or Reply.
	Fallback
	// NotFound matches any other path: Reply.
	NotFound
)

// Step is one route of the table, in match order.
type Step struct {
	Kind Kind
	// Model is the model of a ByModel or ByHint step, the source's
	// default model for Fallback.
	Model string
	// Names are the values a ByHint step matches: the model's name and
	// aliases.
	Names []string
	// Prefixes are the path prefixes a ByHint or Fallback step is under.
	Prefixes []string
	// Clusters are the clusters a ToCluster step may be named (those in
	// the source's allowed regions).
	Clusters []config.EngineCluster
	// Targets are the weighted clusters requests go to; nil with Reply.
	Targets []weights.Target
	// Reply is the answer Envoy makes itself; nil when the step routes.
	Reply *Reply
}

// Reply is an answer Envoy makes from the route: an OpenAI-style JSON
// error, its code also in x-ilb-reason.
type Reply struct {
	Status     uint32
	Type, Code string
	Message    string
}

// Body is the reply's JSON body.
func (r *Reply) Body() []byte { return openai.ErrorBody(r.Type, r.Code, r.Message, "") }

// Plan is source s's route table under weights w, in match order:
//
//  1. ToCluster: ext_proc named the cluster;
//  2. ByModel, per model: ext_proc named the model (a cell without
//     capacity is a 503 no_capacity);
//  3. ByHint, per model, fail-open sources only: no decision, the
//     client's x-ilb-model hint names the model or an alias;
//  4. Fallback, under envoy.path_prefixes: no decision and no hint — the
//     default model's weights restricted to the clusters that serve every
//     model (Envoy cannot read the model; when no cluster serves them all,
//     every target) for a fail-open source, a 503 routing_unavailable for
//     a fail-closed one;
//  5. NotFound: any other path (an engine's /metrics or /health) is a
//     404 path_not_found.
//
// A cell missing from w plans as one without capacity; the renderers
// check cells against the configuration.
func Plan(c *config.Config, w *weights.Weights, s config.Source) []Step {
	steps := []Step{{Kind: ToCluster, Clusters: allowed(c, s)}}
	cells := map[string][]weights.Target{}
	for _, m := range c.Models {
		cell, _ := w.Cell(s.Name, m.Name)
		cells[m.Name] = cell.Targets
		steps = append(steps, weighted(Step{Kind: ByModel, Model: m.Name}, s, cell.Targets))
	}
	prefixes := slices.Clone(c.Envoy.PathPrefixes)
	if s.FailMode == config.FailOpen {
		for _, m := range c.Models {
			st := Step{Kind: ByHint, Model: m.Name, Names: append([]string{m.Name}, m.Aliases...), Prefixes: prefixes}
			steps = append(steps, weighted(st, s, cells[m.Name]))
		}
	}
	fb := Step{Kind: Fallback, Model: s.DefaultModel, Prefixes: prefixes}
	if s.FailMode == config.FailClosed {
		fb.Reply = &Reply{Status: 503, Type: "service_unavailable", Code: "routing_unavailable", Message: fmt.Sprintf(
			"ILB could not make a routing decision for this request and source %q is fail-closed: no request is routed without one. Retry later.", s.Name)}
		steps = append(steps, fb)
	} else {
		steps = append(steps, weighted(fb, s, ServingAll(c, cells[s.DefaultModel])))
	}
	return append(steps, Step{Kind: NotFound, Reply: &Reply{
		Status: 404, Type: "invalid_request_error", Code: "path_not_found",
		Message: fmt.Sprintf("this path is not served: only paths under %s reach the engines", strings.Join(c.Envoy.PathPrefixes, ", ")),
	}})
}

// weighted completes st with targets, or with a no_capacity reply when
// there are none.
func weighted(st Step, s config.Source, targets []weights.Target) Step {
	if len(targets) == 0 {
		st.Reply = NoCapacity(s.Name, st.Model)
		return st
	}
	st.Targets = targets
	return st
}

// NoCapacity is the reply of a cell whose weights send nothing anywhere:
// no engine cluster has capacity for the model from the source.
func NoCapacity(source, model string) *Reply {
	return &Reply{
		Status: 503, Type: "service_unavailable", Code: "no_capacity",
		Message: fmt.Sprintf("no engine cluster has capacity for model %q from source %q", model, source),
	}
}

// allowed are the clusters in the source's allowed regions.
func allowed(c *config.Config, s config.Source) []config.EngineCluster {
	var out []config.EngineCluster
	for _, e := range c.Clusters {
		if s.Allows(e.Region) {
			out = append(out, e)
		}
	}
	return slices.Clip(out)
}

// ServingAll keeps the targets whose cluster serves every model, or all
// targets when none does.
func ServingAll(c *config.Config, targets []weights.Target) []weights.Target {
	var out []weights.Target
	for _, t := range targets {
		e, _ := c.Cluster(t.Cluster)
		if !slices.ContainsFunc(c.Models, func(m config.Model) bool { return !e.Serves(m.Name) }) {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return targets
	}
	return out
}
