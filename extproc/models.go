package extproc

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/internal/bound"
	"github.com/ilbproject/ilb/openai"
)

// reasonModels is the reason of a model list or retrieval ILB answered.
const reasonModels = "models"

// modelList is what ILB answers a source's clients on GET /v1/models and
// GET /v1/models/{id}: the models the source may reach (a cluster
// serving it is allowed for the source; an endpoint picker's source: the
// models of its pool), each under its name and its aliases, from the
// configuration alone. Every call gets the same answer whatever the
// weights or the engines' state, and none reaches an engine or counts as
// demand.
type modelList struct {
	list []byte            // the list's JSON body
	byID map[string][]byte // a model's JSON body by every name it has
}

// newModelList builds source s's model list (pool: its pool's models, nil
// for a routing source).
func newModelList(c *config.Config, s config.Source, pool map[string]bool) modelList {
	ml := modelList{byID: map[string][]byte{}}
	var all []openai.Model
	for _, m := range c.Models {
		if pool != nil && !pool[m.Name] || pool == nil && len(c.Eligible(s, m.Name)) == 0 {
			continue
		}
		context := m.ContextTokens
		if context <= 0 {
			context = config.DefaultContextTokens
		}
		for _, id := range append([]string{m.Name}, m.Aliases...) {
			om := openai.Model{ID: id, Object: openai.ModelObject, OwnedBy: "ilb", Root: m.Name, MaxModelLen: context}
			all = append(all, om)
			ml.byID[id] = openai.ModelBody(om)
		}
		for _, a := range m.Adapters {
			ra := config.ResolvedAdapter{Adapter: a, Model: m.Name}
			if pool != nil && !servesAdapterIn(c, ra, poolCluster(s)) || pool == nil && !slices.ContainsFunc(c.Eligible(s, m.Name), ra.ServesAdapter) {
				continue
			}
			om := openai.Model{ID: a.Name, Object: openai.ModelObject, OwnedBy: "ilb", Root: a.Name, Parent: m.Name, MaxModelLen: context}
			all = append(all, om)
			ml.byID[a.Name] = openai.ModelBody(om)
		}
	}
	ml.list = openai.ModelList(all)
	return ml
}

// poolCluster is the engine cluster of source s's InferencePool ("" for
// a routing source).
func poolCluster(s config.Source) string {
	if s.Picker == nil {
		return ""
	}
	return s.Picker.Cluster
}

// servesAdapterIn reports whether the engine cluster named cluster serves
// adapter a.
func servesAdapterIn(c *config.Config, a config.ResolvedAdapter, cluster string) bool {
	e, ok := c.Cluster(cluster)
	return ok && a.ServesAdapter(e)
}

// modelsPath reports whether path asks for the model list (id "") or
// one model (its id, percent-escapes decoded: GET /v1/models/org%2Fname
// is org/name) under one of the served prefixes.
func modelsPath(prefixes []string, path string) (id string, ok bool) {
	p, _, _ := strings.Cut(path, "?")
	for _, pre := range prefixes {
		rest, found := strings.CutPrefix(p, pre)
		if !found {
			continue
		}
		if !strings.HasSuffix(pre, "/") {
			if rest, found = strings.CutPrefix(rest, "/"); !found {
				continue
			}
		}
		switch {
		case rest == "models" || rest == "models/":
			return "", true
		case strings.HasPrefix(rest, "models/"):
			id, err := url.PathUnescape(rest[len("models/"):])
			if err != nil {
				return rest[len("models/"):], true // ambiguousPath refused it already
			}
			return id, true
		}
	}
	return "", false
}

// answerModels answers a model list or retrieval from x's source's
// list: GET (or HEAD) only, a known id or 404 model_not_found. The answer
// is recorded (reason models) but never decided on, routed nor booked.
func (s *Server) answerModels(x *exchange, id string, began time.Time) *extprocv3.ProcessingResponse {
	if x.h.method != "" && x.h.method != "GET" && x.h.method != "HEAD" {
		return s.reject(x, &RequestError{
			Status: 405, Type: "invalid_request_error", Code: "method_not_allowed",
			Msg: fmt.Sprintf("%s %s: the model list is read with GET", bound.String(x.h.method, 16), bound.Quote(x.h.path, bound.Excerpt)),
		}, began)
	}
	body := x.src.models.list
	if id != "" {
		b, ok := x.src.models.byID[id]
		if !ok {
			return s.reject(x, &RequestError{
				Status: 404, Type: "invalid_request_error", Code: "model_not_found", Param: "model",
				Msg: fmt.Sprintf("the model %s does not exist for this endpoint (GET %s lists those that do)", bound.Quote(id, bound.Excerpt), modelsListPath(x.h.path)),
			}, began)
		}
		body = b
	}
	x.done = true
	d := time.Since(began)
	r := x.rec
	r.DecisionMicros, r.Reason, r.Status, r.Complete = d.Microseconds(), reasonModels, 200, true
	r.TotalMillis = float64(s.opts.Now().Sub(x.start).Microseconds()) / 1000
	if id != "" {
		r.RequestedModel = bound.String(id, bound.Name)
		r.Model = x.st.models[id]
	}
	s.metrics.latency.Observe(d.Seconds())
	s.metrics.rejections.WithLabelValues(x.source, "200", reasonModels).Inc()
	if x.span != nil {
		s.spanRequest(x)
		x.span.SetAttributes(attrReason.String(reasonModels), attrStatusCode.Int(200))
		s.endSpan(x)
	}
	s.log.Add(r)
	return localAnswer(200, reasonModels, "application/json", body, nil)
}

// modelsListPath is the list's path for a retrieval's path.
func modelsListPath(path string) string {
	p, _, _ := strings.Cut(path, "?")
	if i := strings.Index(p, "/models/"); i >= 0 {
		return p[:i+len("/models")]
	}
	return p
}
