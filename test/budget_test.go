package test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/ha/etcdtest"
	"github.com/ilbproject/ilb/sim/loadgen"
	"github.com/ilbproject/ilb/sim/stack"
)

// engineTokens is the prompt and generated tokens every engine replica of
// s has counted (its vllm:*_tokens_total counters, all series).
func engineTokens(t *testing.T, s *stack.Stack) float64 {
	t.Helper()
	var total float64
	for _, r := range s.Fleet.Replicas {
		mfs, err := r.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if n := mf.GetName(); n != "vllm:prompt_tokens_total" && n != "vllm:generation_tokens_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// withinOneMinute waits, when less than lead is left of the current UTC
// minute, for the next one: a burst of load then falls in one budget
// window.
func withinOneMinute(lead time.Duration) {
	now := time.Now()
	if left := now.Truncate(time.Minute).Add(time.Minute).Sub(now); left < lead {
		time.Sleep(left + 100*time.Millisecond)
	}
}

// budgetBurst has tenant team-a send 160 chat requests (about 1.7 times
// a 3000-token budget) over six concurrent streams to edge-eu's Envoy of
// s, within one UTC minute, and returns the requests served and refused
// for its budget and the tokens the engines counted meanwhile. The burst
// is a count, not a duration: on a loaded machine it takes longer, never
// less. Any other answer fails t, and so does a burst that did not fit in
// the minute.
func budgetBurst(t *testing.T, s *stack.Stack) (ok, refused int, took float64) {
	t.Helper()
	eu, _ := s.Envoy("edge-eu")
	before := engineTokens(t, s)
	withinOneMinute(30 * time.Second)
	window := time.Now().UTC().Truncate(time.Minute)
	results, err := loadgen.Run(context.Background(), loadgen.Options{
		Targets: []loadgen.Target{{Source: "edge-eu", URL: eu.URL}}, Models: []string{"llama-3.1-8b-instruct"},
		Concurrency: 6, MaxTokens: 20, Requests: 160, Tenant: "team-a", Seed: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	if end := time.Now().UTC().Truncate(time.Minute); !end.Equal(window) {
		t.Fatalf("the burst of 160 requests took past the end of its UTC minute (%s): its budget window changed under it", window.Format(time.TimeOnly))
	}
	for _, r := range results {
		switch {
		case r.Status == http.StatusOK:
			ok++
		case r.Status == http.StatusTooManyRequests && strings.Contains(r.Body, "budget_exceeded"):
			refused++
		default:
			t.Errorf("a request got %d %s (%v); want 200 or 429 budget_exceeded", r.Status, r.Body, r.Err)
		}
	}
	return ok, refused, engineTokens(t, s) - before
}

// TestTenantBudgetThroughEnvoy: a tenant with a budget of 3000 tokens a
// minute sends 160 chat requests over six concurrent streams through
// envoysim: the engines' own token counters show it took at most
// 1% over the budget and at least 90% of it, and the requests past it got
// 429 budget_exceeded with Retry-After.
func TestTenantBudgetThroughEnvoy(t *testing.T) {
	const budget = 3000
	s := startWorld(t, nil, func(c *config.Config) {
		c.Sources[1].TrustTenantHeader = true // edge-eu: its only cluster is eu-west-vllm
		c.Tenants.Budgets = []config.TenantBudget{{Name: "team-a", TokensPerMinute: budget}}
	})
	ok, refused, took := budgetBurst(t, s)
	t.Logf("%d requests served, %d refused; the engines counted %.0f tokens for a budget of %d", ok, refused, took, budget)
	if took > 1.01*budget || took < 0.9*budget || refused == 0 {
		t.Errorf("the engines counted %.0f tokens (%d served, %d refused) for a budget of %d a minute; want within 1%% over, at least 90%% used, and refusals past it", took, ok, refused, budget)
	}
	eu, _ := s.Envoy("edge-eu")
	resp, body := do(t, http.MethodPost, eu.URL+"/v1/chat/completions",
		`{"model":"llama3-8b","messages":[{"role":"user","content":"hello"}],"max_tokens":500}`, map[string]string{"x-ilb-tenant": "team-a"})
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("retry-after") == "" || !strings.Contains(string(body), `tenant \"team-a\"`) {
		t.Errorf("past the budget: %d %s (retry-after %q); want 429 naming the tenant, with retry-after", resp.StatusCode, body, resp.Header.Get("retry-after"))
	}
}

// TestTenantBudgetTwoReplicasThroughEnvoy: the same with two ILB replicas
// on a real etcd, each enforcing half the budget (tenants.budget_split
// 2), the Envoy spreading its ext_proc streams over both: together they
// admit at most 1% over the budget.
func TestTenantBudgetTwoReplicasThroughEnvoy(t *testing.T) {
	const budget = 3000
	etcd := etcdtest.Start(t, 1)
	h := config.DefaultHA()
	h.Endpoints = etcd.Endpoints()
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Sources[1].TrustTenantHeader = true
	c.Tenants.Budgets = []config.TenantBudget{{Name: "team-a", TokensPerMinute: budget}}
	c.Tenants.BudgetSplit = 2
	s := runStack(t, c, stack.Options{Seed: 5, HA: &h, Replicas: 2})
	ok, _, took := budgetBurst(t, s)
	t.Logf("two replicas: %d requests served; the engines counted %.0f tokens for a budget of %d", ok, took, budget)
	if took > 1.01*budget || took == 0 {
		t.Errorf("two replicas: the engines counted %.0f tokens for a budget of %d a minute; want some, and at most 1%% over", took, budget)
	}
}
