package test

import (
	"bufio"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// documented is one row of docs/metrics.md.
type documented struct {
	typ    string
	labels []string
}

// readMetricsDoc parses the tables of docs/metrics.md: | `name` | type | labels | meaning |.
func readMetricsDoc(t *testing.T) map[string]documented {
	t.Helper()
	f, err := os.Open("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	row := regexp.MustCompile("^\\| `(ilb_[a-z0-9_]+)` \\| (counter|gauge|histogram) \\| ([a-z_, ]*) \\|")
	out := map[string]documented{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := row.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		var labels []string
		for l := range strings.SplitSeq(m[3], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
		slices.Sort(labels)
		out[m[1]] = documented{typ: m[2], labels: labels}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 30 {
		t.Fatalf("docs/metrics.md: only %d metrics parsed; is the table format intact?", len(out))
	}
	return out
}

// TestMetricsMatchTheDocs scrapes /metrics of a running stack after some
// traffic (routed and refused) and checks every ilb_ family against
// docs/metrics.md: documented, same type, same label names. A core set
// must be present in any running ILB.
func TestMetricsMatchTheDocs(t *testing.T) {
	doc := readMetricsDoc(t)
	s := startStack(t, nil)
	us, eu := envoyURL(t, s, "edge-us"), envoyURL(t, s, "edge-eu")
	for range 3 {
		chat(t, us, "llama3-8b", nil)
		chat(t, eu, "qwen-7b", nil)
	}
	chat(t, us, "no-such-model", nil)
	// Wait for a demand report to reach the aggregator.
	waitUntil(t, "a demand report", 10*time.Second, func() bool { return s.App.Demand.Status().Reports > 0 })

	resp, err := http.Get("http://" + s.App.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics is not valid Prometheus text: %v", err)
	}
	for name, mf := range families {
		if !strings.HasPrefix(name, "ilb_") {
			continue
		}
		d, ok := doc[name]
		if !ok {
			t.Errorf("%s is exposed but not documented in docs/metrics.md", name)
			continue
		}
		if typ := strings.ToLower(mf.GetType().String()); typ != d.typ {
			t.Errorf("%s: type %s, documented %s", name, typ, d.typ)
		}
		for _, m := range mf.GetMetric() {
			if got := labelNames(m); !slices.Equal(got, d.labels) {
				t.Errorf("%s: labels %v, documented %v", name, got, d.labels)
				break
			}
		}
	}
	for _, name := range []string{
		"ilb_extproc_decisions_total", "ilb_extproc_rejections_total", "ilb_extproc_decision_duration_seconds",
		"ilb_controller_ticks_total", "ilb_controller_fail_static", "ilb_weights_share", "ilb_weights_planned_load",
		"ilb_signals_replicas", "ilb_signals_cluster_capacity", "ilb_demand_requests_total", "ilb_xds_acks_total", "ilb_xds_streams",
	} {
		if _, ok := families[name]; !ok {
			t.Errorf("%s is missing from a running ILB's /metrics", name)
		}
	}
}

func labelNames(m *dto.Metric) []string {
	var out []string
	for _, l := range m.GetLabel() {
		out = append(out, l.GetName())
	}
	slices.Sort(out)
	return out
}
