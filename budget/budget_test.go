package budget_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ilbproject/ilb/budget"
	"github.com/ilbproject/ilb/config"
)

// t0 is 10 s into a UTC minute.
var t0 = time.Date(2026, 12, 6, 12, 30, 10, 0, time.UTC)

func ledger(split int, b ...config.TenantBudget) *budget.Ledger {
	cfg := config.DefaultTenants()
	cfg.Budgets, cfg.BudgetSplit = b, split
	return budget.New(cfg)
}

func TestReserve(t *testing.T) {
	perMinute := config.TenantBudget{Name: "acme", TokensPerMinute: 1000}
	type step struct {
		at      time.Duration // after t0
		tenant  string
		asks    float64
		settle  float64 // < 0: keep the hold open
		refused *budget.ExceededError
	}
	cases := []struct {
		name   string
		split  int
		budget config.TenantBudget
		steps  []step
	}{
		{
			name: "holds count: concurrent requests cannot pass a budget each alone fits", split: 1, budget: perMinute,
			steps: []step{
				{asks: 600, settle: -1},
				{asks: 600, settle: -1, refused: &budget.ExceededError{Tenant: "acme", Window: budget.Minute, Limit: 1000, Used: 600, Asked: 600, RetryAfter: 50}},
				{asks: 400, settle: -1},
			},
		},
		{
			name: "a request that took less than it held gives the rest back", split: 1, budget: perMinute,
			steps: []step{
				{asks: 900, settle: 100},
				{asks: 900, settle: -1},
			},
		},
		{
			name: "a request that took more than it held counts what it took", split: 1, budget: perMinute,
			steps: []step{
				{asks: 100, settle: 950},
				{asks: 100, settle: -1, refused: &budget.ExceededError{Tenant: "acme", Window: budget.Minute, Limit: 1000, Used: 950, Asked: 100, RetryAfter: 50}},
			},
		},
		{
			name: "a new minute starts afresh", split: 1, budget: perMinute,
			steps: []step{
				{asks: 1000, settle: 1000},
				{at: 49 * time.Second, asks: 1, settle: -1, refused: &budget.ExceededError{Tenant: "acme", Window: budget.Minute, Limit: 1000, Used: 1000, Asked: 1, RetryAfter: 1}},
				{at: 50 * time.Second, asks: 1000, settle: -1},
			},
		},
		{
			name: "the day's budget outlasts the minutes", split: 1, budget: config.TenantBudget{Name: "acme", TokensPerMinute: 1000, TokensPerDay: 1500},
			steps: []step{
				{asks: 1000, settle: 1000},
				{at: time.Minute, asks: 600, settle: -1, refused: &budget.ExceededError{Tenant: "acme", Window: budget.Day, Limit: 1500, Used: 1000, Asked: 600, RetryAfter: 41330}},
				{at: time.Minute, asks: 500, settle: -1},
			},
		},
		{
			name: "two replicas each enforce half", split: 2, budget: perMinute,
			steps: []step{
				{asks: 500, settle: -1},
				{asks: 1, settle: -1, refused: &budget.ExceededError{Tenant: "acme", Window: budget.Minute, Limit: 500, Used: 500, Asked: 1, RetryAfter: 50}},
			},
		},
		{
			name: "a tenant without a budget is not counted", split: 1, budget: perMinute,
			steps: []step{{tenant: "other", asks: 1e12, settle: -1}, {tenant: "", asks: 1e12, settle: -1}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := ledger(tc.split, tc.budget)
			for i, s := range tc.steps {
				tenant := s.tenant
				if tenant == "" && tc.name != "a tenant without a budget is not counted" {
					tenant = "acme"
				}
				h, err := l.Reserve(t0.Add(s.at), tenant, s.asks)
				var ex *budget.ExceededError
				switch {
				case s.refused == nil && err != nil:
					t.Fatalf("step %d: %v; want admitted", i, err)
				case s.refused != nil && !errors.As(err, &ex):
					t.Fatalf("step %d: admitted (%v); want %+v", i, err, *s.refused)
				case s.refused != nil && *ex != *s.refused:
					t.Fatalf("step %d: %+v; want %+v", i, *ex, *s.refused)
				}
				if s.settle >= 0 {
					h.Settle(s.settle)
					h.Settle(s.settle) // once only
				}
			}
		})
	}
}

// TestSettleAfterTheWindow: a request admitted in one minute that ends in
// the next changes nothing in the new minute.
func TestSettleAfterTheWindow(t *testing.T) {
	l := ledger(1, config.TenantBudget{Name: "acme", TokensPerMinute: 1000})
	h, err := l.Reserve(t0, "acme", 800)
	if err != nil {
		t.Fatal(err)
	}
	next := t0.Add(time.Minute)
	h2, err := l.Reserve(next, "acme", 1000)
	if err != nil {
		t.Fatalf("a new minute: %v; want the whole budget", err)
	}
	h.Settle(5000)
	h2.Settle(0)
	if _, err := l.Reserve(next, "acme", 1000); err != nil {
		t.Errorf("after the old minute's request ended: %v; want the whole budget still", err)
	}
}

func TestNoBudgetsNoLedger(t *testing.T) {
	l := budget.New(config.DefaultTenants())
	if l != nil {
		t.Fatal("a ledger without budgets")
	}
	if h, err := l.Reserve(t0, "acme", 1e9); h != nil || err != nil {
		t.Fatalf("nil ledger: %v, %v; want nothing", h, err)
	}
}
