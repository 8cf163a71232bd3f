package test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// alertRules is Prometheus's rule file format (the fields ILB's file uses;
// decoding is strict, so a misspelt field fails).
type alertRules struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// promqlMetrics parses expr and returns the metric names it selects
// (histogram series suffixes stripped).
func promqlMetrics(t *testing.T, where, expr string) []string {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: PromQL does not parse: %v\n%s", where, err, expr)
		return nil
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				name = strings.TrimSuffix(name, suf)
			}
			names = append(names, name)
		}
		return nil
	})
	return names
}

// operationsAnchors are the GitHub anchors of docs/operations.md's headings.
func operationsAnchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^a-z0-9 -]`)
	out := map[string]bool{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			out[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
		}
	}
	return out
}

// TestAlertRules checks examples/observability/prometheus-alerts.yaml:
// strict rule-file structure, PromQL that parses, only documented metrics,
// a severity, and a summary, description and runbook link that exists.
func TestAlertRules(t *testing.T) {
	b, err := os.ReadFile("../examples/observability/prometheus-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	if err := yaml.UnmarshalStrict(b, &rules); err != nil {
		t.Fatalf("prometheus-alerts.yaml: %v", err)
	}
	doc, anchors := readMetricsDoc(t), operationsAnchors(t)
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			where := g.Name + "/" + r.Alert
			for _, m := range promqlMetrics(t, where, r.Expr) {
				if _, ok := doc[m]; !ok {
					t.Errorf("%s: uses %s, which docs/metrics.md does not document", where, m)
				}
			}
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", where, r.For, err)
				}
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q; want warning or critical", where, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s annotation", where, a)
				}
			}
			if _, anchor, _ := strings.Cut(r.Annotations["runbook_url"], "#"); !anchors[anchor] {
				t.Errorf("%s: runbook_url %q: docs/operations.md has no heading #%s", where, r.Annotations["runbook_url"], anchor)
			}
		}
	}
	if n < 8 {
		t.Errorf("%d alert rules; want the fleet shedding, fail-static, NACK and stale-signal alerts at least", n)
	}
}

// grafanaDashboard is the part of Grafana's dashboard model the test reads.
type grafanaDashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestGrafanaDashboard checks examples/observability/grafana-dashboard.json:
// valid JSON, a Prometheus datasource variable, and every panel query
// valid PromQL over documented metrics once Grafana's variables are
// substituted.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../examples/observability/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Error("the dashboard needs a uid and a title")
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	if !vars["datasource"] {
		t.Error("no datasource variable: the dashboard would be tied to one Prometheus")
	}
	doc := readMetricsDoc(t)
	subst := strings.NewReplacer("$__rate_interval", "5m", "$source", ".*", "$model", ".*")
	queries := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			queries++
			for _, m := range promqlMetrics(t, p.Title, subst.Replace(tg.Expr)) {
				if _, ok := doc[m]; !ok {
					t.Errorf("panel %q: uses %s, which docs/metrics.md does not document", p.Title, m)
				}
			}
		}
	}
	if queries < 20 {
		t.Errorf("%d queries; want the weights, split, shedding, clusters, controller and xDS panels", queries)
	}
}
