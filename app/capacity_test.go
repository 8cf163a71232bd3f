package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/capacity"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/signals"
)

// TestCapacityLearnedFromSignals feeds the app five minutes of signals in
// which us-east-vllm's two replicas queue while serving a third of their
// profile (12000 token-cost/s per replica), one request of 800 token-cost
// waiting on each, and checks what the operator
// sees: the estimate in /debug/signals, the gauges on /metrics, and the
// capacity the controller's cluster state is built with.
func TestCapacityLearnedFromSignals(t *testing.T) {
	a, ctx := startDemo(t, nil)
	c := a.Config

	// Far in the future: newer than anything the monitor publishes.
	t0 := time.Now().Add(time.Hour)
	const prior = 12000.0
	for i := range 301 {
		a.onSignals(ctx, &signals.Snapshot{
			At: t0.Add(time.Duration(i) * time.Second),
			Clusters: map[string]signals.Cluster{"us-east-vllm": {
				Ready: 2, LoadKnown: 2, RatesKnown: 2, TTFTKnown: 2, Waiting: 2, Running: 2,
				// 2 replicas × 4000 token-cost/s: 4000 prompt tokens/s each, half the first tokens slow.
				PromptTokensPerSecond: 8000, GenerationTokensPerSecond: 0, FirstTokensPerSecond: 10, SlowFirstTokensPerSecond: 5,
			}},
		}, nil)
	}
	// The throughput less the backlog served within the demo's 2 s tick:
	// 4000 − 800 / 2.
	est, ok := a.Capacity.PerReplica("us-east-vllm")
	if !ok || math.Abs(est-3600) > 0.05*3600 {
		t.Fatalf("learned %v (%v); want about 3600 token-cost/s per replica", est, ok)
	}
	if other, _ := a.Capacity.PerReplica("eu-west-vllm"); other != prior {
		t.Errorf("eu-west-vllm learned %v without evidence; want its prior %v", other, prior)
	}
	st := (&signals.Snapshot{Clusters: map[string]signals.Cluster{"us-east-vllm": {Ready: 2}}}).ClusterStatesWith(c, a.Capacity.Learned)
	if got := st["us-east-vllm"].Capacity; math.Abs(got-2*est) > 1e-6 {
		t.Errorf("cluster state capacity %v; want 2 replicas × %v", got, est)
	}
	// Busy at 4000 with 800 waiting per replica: 4000 − 800 / 2 s.
	if got := st["us-east-vllm"].Saturation; math.Abs(got-2*3600) > 0.05*2*3600 {
		t.Errorf("cluster state saturation %v; want 2 replicas × about 3600", got)
	}

	var view struct {
		Capacity []capacity.Estimate `json:"capacity"`
	}
	getJSON(t, "http://"+a.AdminAddr()+"/debug/signals", &view)
	found := false
	for _, e := range view.Capacity {
		if e.Cluster == "us-east-vllm" {
			found = true
			if e.Prior != prior || e.From != capacity.FromOverload || e.Confidence < 0.9 || !strings.Contains(e.Evidence, "of first tokens over the 2s TTFT target") {
				t.Errorf("/debug/signals estimate %+v", e)
			}
		}
	}
	if !found {
		t.Errorf("/debug/signals has no estimate of us-east-vllm: %+v", view.Capacity)
	}
	metrics := get(t, "http://"+a.AdminAddr()+"/metrics")
	for _, want := range []string{
		`ilb_capacity_prior_per_replica{cluster="us-east-vllm"} 12000`,
		`ilb_capacity_per_replica{cluster="eu-west-vllm"} 12000`,
		fmt.Sprintf(`ilb_capacity_per_replica{cluster="us-east-vllm"} %v`, est),
		`ilb_capacity_confidence{cluster="us-east-vllm"} 0.99`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// startDemo starts the app on the demo configuration (changed by edit
// when not nil) with ephemeral loopback ports, until the test ends.
func startDemo(t *testing.T, edit func(*config.Config)) (*App, context.Context) {
	t.Helper()
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Listen = config.Listen{XDS: "127.0.0.1:0", ExtProc: "127.0.0.1:0", Admin: "127.0.0.1:0"}
	if edit != nil {
		edit(c)
	}
	ctx, cancel := context.WithCancel(t.Context())
	a, err := Start(ctx, Options{Config: c})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = a.Wait() })
	return a, ctx
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(get(t, url)), v); err != nil {
		t.Fatal(err)
	}
}
