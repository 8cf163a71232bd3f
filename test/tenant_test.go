package test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/internal/promtest"
	"github.com/ilbproject/ilb/sim/engine"
	"github.com/ilbproject/ilb/sim/loadgen"
)

// TestTenantFloodShedsTheFloodFirst: through envoysim and ILB, one
// tenant's sheddable flood (16 clients on two single-slot replicas)
// saturates edge-eu's only cluster. The flood's sheddable requests are
// refused (429); another tenant's sheddable request, asking for far less
// than an equal share, is served, and the metrics name its tenant. Without
// tenants, saturation refuses every sheddable request
// (TestOverloadShedsSheddable).
func TestTenantFloodShedsTheFloodFirst(t *testing.T) {
	timing := engine.DefaultFixedTiming()
	timing.MaxRunning = 1
	timing.InterTokenLatency = 20 * time.Millisecond
	s := startWorld(t, &timing, func(c *config.Config) {
		c.Sources[1].TrustPriorityHeader = true
		c.Sources[1].TrustTenantHeader = true
		c.Tenants.Weights = []config.TenantWeight{{Name: "team-a", Weight: 1}}
	})
	eu, _ := s.Envoy("edge-eu")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = loadgen.Run(ctx, loadgen.Options{
			Targets: []loadgen.Target{{Source: "edge-eu", URL: eu.URL}}, Models: []string{"llama-3.1-8b-instruct"},
			Concurrency: 16, MaxTokens: 40, Duration: time.Minute, Priority: "sheddable", Tenant: "flood",
		})
	})
	defer wg.Wait()
	waitUntil(t, "eu-west-vllm saturated", 20*time.Second, func() bool {
		return s.App.Signals.Snapshot().Clusters["eu-west-vllm"].Saturated
	})
	flood := map[string]string{header.Priority: "sheddable", header.Tenant: "flood"}
	var resp reply
	var body []byte
	waitUntil(t, "a sheddable request of the flood refused", time.Minute, func() bool {
		resp, body = chat(t, eu.URL, "llama3-8b", flood)
		return resp.StatusCode == http.StatusTooManyRequests
	})
	var e apiError
	_ = json.Unmarshal(body, &e)
	if e.Error.Code != "overloaded" && e.Error.Code != "shed" {
		t.Errorf("the flood: %d %s; want 429 overloaded or shed", resp.StatusCode, body)
	}
	// The other tenant waits its turn in the engines' FIFO queues behind
	// the flood's requests already admitted: what counts is that it is
	// served, not refused.
	resp, body = doWithin(t, time.Minute, http.MethodPost, eu.URL+"/v1/chat/completions",
		`{"model":"llama3-8b","messages":[{"role":"user","content":"hello"}],"max_tokens":4}`,
		map[string]string{header.Priority: "sheddable", header.Tenant: "team-a"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("another tenant's sheddable request: %d %s; want it served", resp.StatusCode, body)
	}
	// Its decision, by ILB's metrics (the flood's refusals quickly push
	// its record out of the decision log): routed, as team-a (listed, so
	// named), never refused.
	promtest.Check(t, s.App.Registry, "ilb_extproc_tenant_decisions_total",
		map[string]string{"source": "edge-eu", "tenant": "team-a", "priority": "sheddable", "outcome": "routed"}, 1)
	cancel()
}
