package dashboard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ilbproject/ilb/dashboard"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/sim/loadgen"
	"github.com/ilbproject/ilb/sim/stack"
)

// demo is the demo world running in-process with a dashboard over it,
// served on a loopback httptest server.
type demo struct {
	Stack *stack.Stack
	Dash  *dashboard.Dashboard
	URL   string // of the httptest server; the page is at URL + "/ui/"
}

// startDemo runs the demo world (examples/demo/ilb.yaml: simulated
// engines, ILB, envoysim per source) as `ilb demo` does, a dashboard
// sampling every 100 ms, and a short load from every source so decisions
// exist. Everything stops when the test ends.
func startDemo(t *testing.T) *demo {
	t.Helper()
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := stack.Start(ctx, c, stack.Options{Seed: 7})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	a := st.App
	o := dashboard.Options{
		Config: st.Config, Weights: a.Controller, Decisions: a.ExtProc.Decisions(),
		Interval: 100 * time.Millisecond, Window: time.Minute,
	}
	if a.Signals != nil {
		o.Signals = a.Signals
	}
	d := dashboard.New(o)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(func() {
		srv.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		_ = st.Wait()
	})

	var targets []loadgen.Target
	for _, e := range st.Envoys {
		targets = append(targets, loadgen.Target{Source: e.Source, URL: e.URL})
	}
	var models []string
	for _, m := range st.Config.Models {
		models = append(models, m.Name)
	}
	res, err := loadgen.Run(ctx, loadgen.Options{
		Targets: targets, Models: models, Requests: 120, Concurrency: 4,
		SessionShare: 0.3, Sessions: 8, StreamShare: 0.3, MaxTokens: 4, Seed: 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("load: %v", r.Err)
		}
	}
	time.Sleep(300 * time.Millisecond) // a few samples after the load
	return &demo{Stack: st, Dash: d, URL: srv.URL}
}

// get GETs url and returns the status, content type and body.
func get(t *testing.T, url string) (status int, ctype string, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
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
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// getJSON GETs url, wants a 200 and decodes the JSON answer into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	status, _, b := get(t, url)
	if status != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", url, status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, b)
	}
}
