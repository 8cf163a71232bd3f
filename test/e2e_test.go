package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/header"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/sim/engine"
	"github.com/ilbproject/ilb/sim/loadgen"
	"github.com/ilbproject/ilb/sim/stack"
	"github.com/ilbproject/ilb/weights"
)

// startStack runs the demo world on loopback for one test, with static
// proportional weights: these tests check the routing contract, so the
// weights must not move under them.
func startStack(t *testing.T, timing *engine.FixedTiming) *stack.Stack {
	t.Helper()
	return startWorld(t, timing, func(c *config.Config) { c.Controller.Policy = config.PolicyProportional })
}

func envoyURL(t *testing.T, s *stack.Stack, source string) string {
	t.Helper()
	e, ok := s.Envoy(source)
	if !ok {
		t.Fatalf("no envoy for %s", source)
	}
	return e.URL
}

// reply is a response with its body read.
type reply struct {
	StatusCode int
	Header     http.Header
}

// servedBy is the cluster of the engine that answered, as a client sees
// it (loadgen.Served).
func servedBy(r reply, body []byte) string {
	c, _ := loadgen.Served(r.Header, body)
	return c
}

// chat posts a chat request and returns the response with its body read.
func chat(t *testing.T, url, model string, hdr map[string]string) (reply, []byte) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hello"}],"max_tokens":4}`, model)
	return do(t, http.MethodPost, url+"/v1/chat/completions", body, hdr)
}

func do(t *testing.T, method, url, body string, hdr map[string]string) (reply, []byte) {
	t.Helper()
	return doWithin(t, 10*time.Second, method, url, body, hdr)
}

// doWithin is do with its own bound on the whole exchange.
func doWithin(t *testing.T, within time.Duration, method, url, body string, hdr map[string]string) (reply, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{StatusCode: resp.StatusCode, Header: resp.Header}, b
}

// TestSplitMatchesWeights sends random-draw requests for two models from
// two sources and checks, per (source, model), that the observed share of
// each cluster is within 4 standard deviations of its weight
// (|observed − w| ≤ 4·sqrt(w(1−w)/n); a false alarm has odds below 1 in
// 15,000 per cluster, and the seeds make the run reproducible), and that
// every request was served by exactly the cluster ext_proc predicted.
func TestSplitMatchesWeights(t *testing.T) {
	// Steering (off a saturated cluster, or one whose engines are slower)
	// bends the split away from the weights by design: this test checks
	// the draw itself, with steering off.
	s := startWorld(t, nil, func(c *config.Config) {
		c.Controller.Policy = config.PolicyProportional
		c.ExtProc.Steering = false
	})
	var targets []loadgen.Target
	for _, e := range s.Envoys {
		targets = append(targets, loadgen.Target{Source: e.Source, URL: e.URL})
	}
	const perCell = 300
	results, err := loadgen.Run(context.Background(), loadgen.Options{
		Targets: targets, Models: []string{"llama-3.1-8b-instruct", "qwen2.5-7b-instruct"},
		Requests: 4 * perCell, Concurrency: 8, Seed: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	type cellKey struct{ source, model string }
	counts := map[cellKey]map[string]int{}
	n := map[cellKey]int{}
	log := s.App.ExtProc.Decisions()
	for _, r := range results {
		if r.Err != nil || r.Status != 200 {
			t.Fatalf("request %+v failed", r)
		}
		k := cellKey{r.Source, r.Model}
		if counts[k] == nil {
			counts[k] = map[string]int{}
		}
		counts[k][r.Cluster]++
		n[k]++
		rec, ok := log.Get(r.RequestID)
		if !ok {
			t.Fatalf("no decision record for %s", r.RequestID)
		}
		if rec.Chosen != r.Cluster || rec.ServedCluster != r.Cluster || rec.Mismatch {
			t.Errorf("request %s: ext_proc chose %s, Envoy reported %s, the engine was %s", r.RequestID, rec.Chosen, rec.ServedCluster, r.Cluster)
		}
	}
	w := s.App.Controller.Current()
	for k, byCluster := range counts {
		cell, _ := w.Cell(k.source, k.model)
		total := float64(n[k])
		for _, tg := range cell.Targets {
			p := float64(tg.Weight) / weights.Total
			got := float64(byCluster[tg.Cluster]) / total
			tol := 4 * math.Sqrt(p*(1-p)/total)
			if math.Abs(got-p) > tol {
				t.Errorf("(%s, %s) %s: observed %.3f of %d, weight %.3f, tolerance ±%.3f", k.source, k.model, tg.Cluster, got, n[k], p, tol)
			}
			delete(byCluster, tg.Cluster)
		}
		for cl, c := range byCluster {
			t.Errorf("(%s, %s): %d requests served by %s, which has no weight", k.source, k.model, c, cl)
		}
	}
	if len(counts) != 4 {
		t.Errorf("saw %d (source, model) cells; want 4", len(counts))
	}
}

// TestSessionsStick: a session's requests drawn by its key under one
// weights version all go to one cluster. (The controller may publish a
// new version while the test runs, which draws the session anew, and
// balancing moves a session off a queue, so only the requests ext_proc
// routed by the session's draw, grouped by version, are compared.)
func TestSessionsStick(t *testing.T) {
	s := startStack(t, nil)
	url := envoyURL(t, s, "edge-us")
	log := s.App.ExtProc.Decisions()
	drawn := 0
	for _, session := range []string{"alice", "bob", "carol", "dave"} {
		seen := map[string]map[string]bool{} // weights version → clusters
		for range 12 {
			resp, body := chat(t, url, "llama3-8b", map[string]string{"x-ilb-session": session})
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			id := resp.Header.Get(header.RequestID) // Envoy's, echoed
			rec, ok := log.Get(id)
			if !ok {
				t.Fatalf("no decision record for %s", id)
			}
			if got := servedBy(resp, body); rec.Chosen != got {
				t.Errorf("request %s: ext_proc chose %s, the engine was %s", id, rec.Chosen, got)
			}
			if rec.Reason != "session" {
				continue // moved off a queue (the record says why)
			}
			drawn++
			if seen[rec.WeightsVersion] == nil {
				seen[rec.WeightsVersion] = map[string]bool{}
			}
			seen[rec.WeightsVersion][rec.Chosen] = true
		}
		for v, clusters := range seen {
			if len(clusters) != 1 {
				t.Errorf("session %s under weights %s was served by %v; want one cluster", session, v, clusters)
			}
		}
	}
	if drawn < 24 {
		t.Errorf("%d of 48 requests routed by their session's draw; want most", drawn)
	}
}

// TestClientCannotPickRoute sends ILB's internal routing headers from the
// client: Envoy strips them before ext_proc, so routing is unaffected.
func TestClientCannotPickRoute(t *testing.T) {
	s := startStack(t, nil)
	url := envoyURL(t, s, "edge-eu")
	forged := map[string]string{
		"x-ilb-route-cluster": "us-east-vllm", // outside edge-eu's residency
		"x-ilb-route-model":   "qwen2.5-7b-instruct",
		"x-ilb-route-draw":    "9999",
	}
	for range 20 {
		resp, body := chat(t, url, "llama-3.1-8b-instruct", forged)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if got := servedBy(resp, body); got != "eu-west-vllm" {
			t.Fatalf("served by %s; a forged header must have no effect (edge-eu llama is 100%% eu-west-vllm)", got)
		}
		rec, ok := s.App.ExtProc.Decisions().Get(resp.Header.Get("x-request-id"))
		if !ok || rec.Model != "llama-3.1-8b-instruct" {
			t.Errorf("record %+v", rec)
		}
	}
}

type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

func TestBadRequestsGetJSONErrors(t *testing.T) {
	s := startStack(t, nil)
	url := envoyURL(t, s, "edge-us")
	tests := []struct {
		name, body string
		status     int
		code       string
	}{
		{"bad JSON", `{"model": "llama3-8b", "messages": [`, 400, "invalid_json"},
		{"missing model", `{"messages":[{"role":"user","content":"x"}]}`, 400, "missing_required_parameter"},
		{"unknown model", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, 404, "model_not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, http.MethodPost, url+"/v1/chat/completions", tt.body, nil)
			var e apiError
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("body %q is not JSON: %v", body, err)
			}
			if resp.StatusCode != tt.status || e.Error.Code != tt.code || e.Error.Message == "" {
				t.Errorf("got %d %+v; want %d %s", resp.StatusCode, e.Error, tt.status, tt.code)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content-type %q", ct)
			}
			if resp.Header.Get("x-ilb-reason") != tt.code {
				t.Errorf("x-ilb-reason %q", resp.Header.Get("x-ilb-reason"))
			}
			// ILB answered: nothing was served, whatever the source.
			for _, h := range []string{header.ServedCluster, header.UpstreamHost, header.WeightsVersion} {
				if v := resp.Header.Get(h); v != "" {
					t.Errorf("ILB's own answer carries %s: %q", h, v)
				}
			}
		})
	}
}

// TestStreaming holds the engine after its first token: the client must
// read the first SSE event while the response is still being generated.
func TestStreaming(t *testing.T) {
	gate := make(chan struct{})
	timing := engine.DefaultFixedTiming()
	timing.Sleep = func(ctx context.Context, d time.Duration) error {
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s := startStack(t, &timing)
	url := envoyURL(t, s, "edge-us")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions",
		strings.NewReader(`{"model":"llama3-8b","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"count"}]}`))
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // the test closes it after reading the stream
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	gate <- struct{}{} // prefill: the first token comes out, the second waits
	resp := <-done
	if resp == nil {
		t.FailNow()
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content-type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	first := nextEvent(t, sc)
	if !strings.Contains(first, `"role":"assistant"`) {
		t.Errorf("first event %q", first)
	}
	close(gate) // only now may the rest be generated
	events := 1
	for {
		ev := nextEvent(t, sc)
		events++
		if ev == "[DONE]" {
			break
		}
	}
	if events < 5 {
		t.Errorf("%d events; want one per token plus the end", events)
	}
}

func nextEvent(t *testing.T, sc *bufio.Scanner) string {
	t.Helper()
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			return data
		}
	}
	t.Fatalf("stream ended: %v", sc.Err())
	return ""
}

// TestDebugAndExplain checks what clients see: internal headers only with
// debug on a source that allows it, and the request id that explains the
// request through the admin API.
func TestDebugAndExplain(t *testing.T) {
	s := startStack(t, nil)
	resp, _ := chat(t, envoyURL(t, s, "edge-us"), "llama3-8b", map[string]string{"x-ilb-debug": "1"})
	if d := resp.Header.Get("x-ilb-decision"); !strings.Contains(d, "cluster="+resp.Header.Get(engine.HeaderCluster)) {
		t.Errorf("x-ilb-decision = %q", d)
	}
	resp, _ = chat(t, envoyURL(t, s, "edge-eu"), "llama3-8b", map[string]string{"x-ilb-debug": "1"})
	for _, h := range []string{"x-ilb-decision", "x-ilb-served-cluster", "x-ilb-weights-version", "x-ilb-upstream-host", engine.HeaderCluster, engine.HeaderReplica} {
		if v := resp.Header.Get(h); v != "" {
			t.Errorf("edge-eu (debug not allowed) leaked %s: %s", h, v)
		}
	}
	id := resp.Header.Get("x-request-id")
	// The listener is an edge proxy: Envoy replaces a client's request id,
	// so no client can choose (or collide with) the key of a record.
	if resp, _ := chat(t, envoyURL(t, s, "edge-eu"), "llama3-8b", map[string]string{"x-request-id": id}); resp.Header.Get("x-request-id") == id {
		t.Errorf("a client-sent x-request-id %s was kept", id)
	}
	r, body := do(t, http.MethodGet, "http://"+s.App.AdminAddr()+"/debug/decisions/"+id, "", nil)
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("admin: %d %s", r.StatusCode, body)
	}
	if raw["source"] != "edge-eu" || raw["chosen"] != "eu-west-vllm" || raw["served_cluster"] != "eu-west-vllm" || raw["complete"] != true {
		t.Errorf("record = %v", raw)
	}
	_, metrics := do(t, http.MethodGet, "http://"+s.App.AdminAddr()+"/metrics", "", nil)
	if !strings.Contains(string(metrics), `ilb_extproc_decisions_total{cluster="eu-west-vllm",model="llama-3.1-8b-instruct",reason="weighted",source="edge-eu"} 2`) {
		t.Errorf("metrics lack the edge-eu decisions:\n%s", grep(string(metrics), "ilb_extproc_decisions_total"))
	}
}

func grep(s, substr string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestAdminAPI reads every admin endpoint of a running stack.
func TestAdminAPI(t *testing.T) {
	s := startStack(t, nil)
	chat(t, envoyURL(t, s, "edge-us"), "llama3-8b", nil)
	chat(t, envoyURL(t, s, "edge-eu"), "qwen-7b", nil)
	base := "http://" + s.App.AdminAddr()
	version := s.App.Controller.Current().Version()
	tests := []struct {
		path   string
		status int
		want   []string
	}{
		{"/healthz", 200, []string{`"status": "ok"`, `"weights_version": "` + version + `"`}},
		{"/debug/weights?explain=1&source=edge-eu", 200, []string{`"version": "` + version + `"`, `"policy": "proportional"`, `"excluded": "residency: region us-east is not in the allowed regions of source edge-eu"`}},
		{"/debug/decisions?limit=1", 200, []string{`"source": "edge-eu"`, `"model": "qwen2.5-7b-instruct"`}},
		{"/debug/decisions?limit=0", 400, []string{`limit \"0\" is not a number in 1..10000`}},
		{"/debug/decisions/no-such-id", 404, []string{`no decision record for request id \"no-such-id\"`}},
		{"/debug/config", 200, []string{`"name": "edge-eu"`, `"fail_mode": "closed"`, `"tick": "2s"`}},
		// Both envoysims are connected over ADS and acknowledged every type
		// at the versions ILB serves.
		{"/debug/xds", 200, []string{`"cluster": "edge-us"`, `"cluster": "edge-eu"`, `"listener": "`, `"route": "`, `"endpoint": "`}},
		{"/debug/xds?source=edge-eu&limit=1", 200, []string{`"cluster": "edge-eu"`}},
		{"/debug/xds?limit=10001", 400, []string{`limit \"10001\" is not a number in 1..10000`}},
		{"/metrics", 200, []string{"ilb_xds_acks_total{type=\"route\"}", "ilb_controller_ticks_total{result=\"published\"} 1", "go_goroutines"}},
		// The dashboard is mounted on the admin server.
		{"/ui/", 200, []string{"<title>ILB dashboard</title>"}},
		{"/ui/api/weights", 200, []string{version}},
		{"/debug/weights/history?limit=1", 200, []string{version}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			resp, body := do(t, http.MethodGet, base+tt.path, "", nil)
			if resp.StatusCode != tt.status {
				t.Errorf("status %d; want %d\n%s", resp.StatusCode, tt.status, body)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(body), w) {
					t.Errorf("%s lacks %q:\n%.2000s", tt.path, w, body)
				}
			}
		})
	}
	for _, e := range s.Envoys {
		snap, err := s.App.XDS.Snapshot(e.Source)
		if err != nil {
			t.Fatal(err)
		}
		versions := e.Sim.Versions()
		if len(versions) != 4 {
			t.Errorf("%s: envoysim acknowledged %d types (%v); want CDS, EDS, LDS, RDS", e.Source, len(versions), versions)
		}
		for typ, v := range versions {
			if want := snap.GetVersion(typ); v != want {
				t.Errorf("%s: envoysim runs %s version %s; ILB serves %s", e.Source, typ, v, want)
			}
		}
	}
}
