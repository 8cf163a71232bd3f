package dashboard_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/dashboard"
	"github.com/ilbproject/ilb/decision"

	"github.com/ilbproject/ilb/weights"
)

// TestAPIOnDemo checks every endpoint over loopback HTTP against the demo
// world after some load: status, content type, and what the answer holds.
func TestAPIOnDemo(t *testing.T) {
	d := startDemo(t)
	log := d.Stack.App.ExtProc.Decisions()
	recent := log.Recent(1)
	if len(recent) == 0 {
		t.Fatal("no decision records after the load")
	}
	id := recent[0].RequestID

	type errBody struct {
		Error dashboard.APIError `json:"error"`
	}
	tests := []struct {
		name   string
		path   string
		status int
		ctype  string
		check  func(t *testing.T, body []byte)
		// param and value are the parameter an error answer must name.
		param, value string
	}{
		{name: "page", path: "/ui/", status: 200, ctype: "text/html", check: contains("<title>ILB dashboard</title>", `src="app.js"`)},
		{name: "script", path: "/ui/app.js", status: 200, ctype: "text/javascript", check: contains("data-share")},
		{name: "style", path: "/ui/app.css", status: 200, ctype: "text/css", check: contains("prefers-color-scheme: dark")},
		{name: "unknown file", path: "/ui/secret.txt", status: 404},
		{name: "weights", path: "/ui/api/weights", status: 200, ctype: "application/json"},
		{name: "clusters", path: "/ui/api/clusters", status: 200, ctype: "application/json", check: contains(`"name":"us-east-vllm"`, `"known":true`)},
		{name: "history", path: "/ui/api/history", status: 200, ctype: "application/json", check: contains(`"samples":[{`)},
		{name: "history window", path: "/ui/api/history?window=10s", status: 200, ctype: "application/json", check: contains(`"samples":[{`)},
		{name: "history points", path: "/ui/api/history?points=2", status: 200, ctype: "application/json", check: func(t *testing.T, body []byte) {
			var h struct{ Samples []dashboard.Sample }
			if err := json.Unmarshal(body, &h); err != nil || len(h.Samples) != 2 {
				t.Errorf("%d samples (%v), want 2", len(h.Samples), err)
			}
		}},
		{name: "history bad points", path: "/ui/api/history?points=1", status: 400, param: "points", value: "1"},
		{name: "history bad window", path: "/ui/api/history?window=soon", status: 400, ctype: "application/json", param: "window", value: "soon"},
		{name: "history negative window", path: "/ui/api/history?window=-5m", status: 400, param: "window", value: "-5m"},
		{name: "versions", path: "/ui/api/versions?limit=3", status: 200, ctype: "application/json", check: contains(`"targets":[{"cluster":`)},
		{name: "versions bad limit", path: "/ui/api/versions?limit=0", status: 400, param: "limit", value: "0"},
		{name: "decisions", path: "/ui/api/decisions?limit=5", status: 200, ctype: "application/json", check: contains(`"request_id":`)},
		{name: "decisions bad limit", path: "/ui/api/decisions?limit=ten", status: 400, param: "limit", value: "ten"},
		{name: "decisions limit too big", path: "/ui/api/decisions?limit=5000", status: 400, param: "limit", value: "5000"},
		{name: "decision", path: "/ui/api/decisions/" + url.PathEscape(id), status: 200, ctype: "application/json", check: contains(`"request_id":"` + id + `"`)},
		{name: "unknown decision", path: "/ui/api/decisions/no-such-request", status: 404, param: "id", value: "no-such-request"},
		{name: "unknown api", path: "/ui/api/nothing", status: 404, ctype: "application/json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, ctype, raw := get(t, d.URL+tc.path)
			if status != tc.status {
				t.Fatalf("GET %s: status %d, want %d: %s", tc.path, status, tc.status, raw)
			}
			if !strings.HasPrefix(ctype, tc.ctype) {
				t.Errorf("GET %s: content type %q, want %q", tc.path, ctype, tc.ctype)
			}
			if tc.check != nil {
				tc.check(t, raw)
			}
			if tc.param != "" {
				var e errBody
				if err := json.Unmarshal(raw, &e); err != nil {
					t.Fatal(err)
				}
				if e.Error.Parameter != tc.param || e.Error.Value != tc.value || !strings.Contains(e.Error.Message, tc.value) {
					t.Errorf("GET %s: error %+v, want parameter %q value %q named in the message", tc.path, e.Error, tc.param, tc.value)
				}
			}
		})
	}

	t.Run("heatmap is the live weights", func(t *testing.T) {
		for range 10 { // the controller may publish between the two reads
			var h dashboard.Heatmap
			getJSON(t, d.URL+"/ui/api/weights", &h)
			cur := d.Stack.App.Controller.Current()
			if h.Version != cur.Version() {
				continue
			}
			checkHeatmap(t, h, cur)
			return
		}
		t.Fatal("the weights version kept changing")
	})
	t.Run("decisions are the log's completed ones, newest first", func(t *testing.T) {
		// A request in flight: not shown while the completed are.
		inflight := &decision.Record{RequestID: "in-flight", Source: "edge-us", Reason: "weighted", Chosen: "us-east-vllm"}
		log.Add(inflight)
		var recs []decision.Record
		getJSON(t, d.URL+"/ui/api/decisions?limit=7", &recs)
		if len(recs) != 7 {
			t.Fatalf("%d records, want 7", len(recs))
		}
		want := log.Find(decision.Filter{Complete: true}, 7) // the load is over: the log does not move
		for i := range recs {
			if recs[i].RequestID != want[i].RequestID || recs[i].Chosen != want[i].Chosen {
				t.Errorf("record %d: %s chosen %q, want %s chosen %q", i, recs[i].RequestID, recs[i].Chosen, want[i].RequestID, want[i].Chosen)
			}
			if !recs[i].Complete || recs[i].RequestID == "in-flight" {
				t.Errorf("record %d: %s complete %v; want completed requests only", i, recs[i].RequestID, recs[i].Complete)
			}
		}
	})
	t.Run("history counts the load", func(t *testing.T) {
		var h struct{ Samples []dashboard.Sample }
		getJSON(t, d.URL+"/ui/api/history", &h)
		n := 0
		for _, s := range h.Samples {
			n += s.Shed.Requests
			if len(s.Clusters) != len(d.Stack.Config.Clusters) {
				t.Fatalf("sample has %d clusters, want %d", len(s.Clusters), len(d.Stack.Config.Clusters))
			}
		}
		if n == 0 {
			t.Errorf("no requests counted in %d samples", len(h.Samples))
		}
	})
}

// checkHeatmap checks that every cell of h has the weight of w, and that
// every target of w is in h.
func checkHeatmap(t *testing.T, h dashboard.Heatmap, w *weights.Weights) {
	t.Helper()
	seen := 0
	for _, m := range h.Models {
		for _, r := range m.Rows {
			cell, ok := w.Cell(r.Source, m.Model)
			if !ok {
				t.Errorf("heatmap row (%s, %s) is not a cell of the weights", r.Source, m.Model)
				continue
			}
			for _, c := range r.Cells {
				var want uint32
				for _, tg := range cell.Targets {
					if tg.Cluster == c.Cluster {
						want = tg.Weight
						seen++
					}
				}
				if c.Weight != want || c.Share != float64(want)/weights.Total {
					t.Errorf("(%s, %s, %s): weight %d share %v, want %d", r.Source, m.Model, c.Cluster, c.Weight, c.Share, want)
				}
			}
		}
	}
	targets := 0
	for _, c := range w.Cells() {
		targets += len(c.Targets)
	}
	if seen != targets {
		t.Errorf("heatmap shows %d of the %d targets", seen, targets)
	}
}

func contains(subs ...string) func(t *testing.T, body []byte) {
	return func(t *testing.T, body []byte) {
		t.Helper()
		for _, s := range subs {
			if !strings.Contains(string(body), s) {
				t.Errorf("answer lacks %q: %.300s", s, body)
			}
		}
	}
}
