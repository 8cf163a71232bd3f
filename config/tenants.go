package config

import (
	"fmt"
	"math"
)

// Tenants configures fair shedding between the tenants of a source
// (docs/architecture.md, "Tenants"): when the controller plans to shed
// part of a priority's traffic and the engines confirm the overload, the
// tenants above their weighted fair share of what is served are shed
// first, so that one tenant's burst does not take the others of its
// priority down with it.
//
// A request's tenant is the x-ilb-tenant header, honoured only from
// sources with trust_tenant_header (Envoy sets it from a JWT claim or the
// client certificate's identity, the client's own header removed first);
// elsewhere, and without the header, requests belong to the tenant "".
type Tenants struct {
	// Weights are the tenants with a weight other than DefaultWeight: a
	// tenant's fair share is proportional to its weight. Listed tenants
	// are also the only ones named in metrics; the others count as
	// "other" (bounded cardinality).
	Weights []TenantWeight `yaml:"weights,omitempty" json:"weights,omitempty"`
	// DefaultWeight is the weight of a tenant not listed; default 1, > 0.
	DefaultWeight float64 `yaml:"default_weight" json:"default_weight"`
	// MaxTracked bounds the tenants ext_proc tracks one by one per source
	// and model (the heaviest, by the space-saving algorithm: every
	// tenant with more than 1/MaxTracked of the traffic is tracked);
	// default 256, in [1, MaxTenantsTracked].
	MaxTracked int `yaml:"max_tracked" json:"max_tracked"`
	// Budgets are token budgets per tenant: a request that would take a
	// tenant past one gets 429 with Retry-After (the budget's window
	// end). Counted across the sources that trust the tenant header and
	// their models.
	Budgets []TenantBudget `yaml:"budgets,omitempty" json:"budgets,omitempty"`
	// BudgetSplit is how many ILB replicas share each budget: each
	// enforces 1/BudgetSplit of it (Envoy spreads ext_proc streams over
	// the replicas evenly; uneven spreading admits less, never more).
	// Default 1, in [1, 64].
	BudgetSplit int `yaml:"budget_split" json:"budget_split"`
}

// TenantBudget is one tenant's token budget: prompt and output tokens
// (the engines' counts when ILB follows the response, else its estimate)
// of the requests admitted in each UTC minute and each UTC day.
type TenantBudget struct {
	// Name is the tenant, as the x-ilb-tenant header names it.
	Name string `yaml:"name" json:"name"`
	// TokensPerMinute and TokensPerDay bound the tokens; 0: no bound,
	// at least one set; at most MaxBudgetTokens.
	TokensPerMinute float64 `yaml:"tokens_per_minute,omitempty" json:"tokens_per_minute,omitempty"`
	TokensPerDay    float64 `yaml:"tokens_per_day,omitempty" json:"tokens_per_day,omitempty"`
}

// TenantWeight is one tenant's weight.
type TenantWeight struct {
	// Name is the tenant, as the x-ilb-tenant header names it.
	Name string `yaml:"name" json:"name"`
	// Weight is its fair share relative to the others', > 0 and at most
	// MaxTenantWeight.
	Weight float64 `yaml:"weight" json:"weight"`
}

// Tenant bounds.
const (
	// MaxTenantsTracked bounds tenants.max_tracked.
	MaxTenantsTracked = 4096
	// MaxTenantWeight bounds a tenant's weight (and the default weight).
	MaxTenantWeight = 1e6
	// MaxTenantWeights bounds the tenants listed with a weight: they
	// become metric labels.
	MaxTenantWeights = 256
	// MaxTenantBudgets bounds the tenants listed with a budget.
	MaxTenantBudgets = 4096
	// MaxBudgetTokens bounds a budget.
	MaxBudgetTokens = 1e15
	// MaxBudgetSplit bounds tenants.budget_split.
	MaxBudgetSplit = 64
)

// DefaultTenants is the tenants section a file omits.
func DefaultTenants() Tenants { return Tenants{DefaultWeight: 1, MaxTracked: 256, BudgetSplit: 1} }

// Weight is tenant's weight: its listed one, or DefaultWeight.
func (t Tenants) Weight(tenant string) float64 {
	for _, w := range t.Weights {
		if w.Name == tenant {
			return w.Weight
		}
	}
	return t.DefaultWeight
}

// Listed reports whether tenant has a weight of its own (and so its own
// metric label).
func (t Tenants) Listed(tenant string) bool {
	for _, w := range t.Weights {
		if w.Name == tenant {
			return true
		}
	}
	return false
}

func (c *Config) validateTenants(p *problems) {
	t := c.Tenants
	if !(t.DefaultWeight > 0 && t.DefaultWeight <= MaxTenantWeight) {
		p.addf("tenants.default_weight", "is %v: want a number in (0, %g]", t.DefaultWeight, float64(MaxTenantWeight))
	}
	if t.MaxTracked < 1 || t.MaxTracked > MaxTenantsTracked {
		p.addf("tenants.max_tracked", "is %d: want 1 to %d", t.MaxTracked, MaxTenantsTracked)
	}
	if len(t.Weights) > MaxTenantWeights {
		p.addf("tenants.weights", "lists %d tenants: want at most %d (each is a metric label)", len(t.Weights), MaxTenantWeights)
	}
	seen := map[string]bool{}
	for i, w := range t.Weights {
		path := fmt.Sprintf("tenants.weights[%d]", i)
		checkName(p, path+".name", "tenant", w.Name, seen)
		if w.Name == TenantOther || w.Name == TenantNone {
			p.addf(path+".name", "%q is the metric label of the tenants not listed (%q) or of requests without one (%q): choose another name", w.Name, TenantOther, TenantNone)
		}
		if !(w.Weight > 0 && w.Weight <= MaxTenantWeight) || math.IsNaN(w.Weight) {
			p.addf(path+".weight", "is %v: want a number in (0, %g]", w.Weight, float64(MaxTenantWeight))
		}
	}
	if t.BudgetSplit < 1 || t.BudgetSplit > MaxBudgetSplit {
		p.addf("tenants.budget_split", "is %d: want 1 to %d (the ILB replicas sharing each budget)", t.BudgetSplit, MaxBudgetSplit)
	}
	if len(t.Budgets) > MaxTenantBudgets {
		p.addf("tenants.budgets", "lists %d tenants: want at most %d", len(t.Budgets), MaxTenantBudgets)
	}
	seen = map[string]bool{}
	for i, b := range t.Budgets {
		path := fmt.Sprintf("tenants.budgets[%d]", i)
		switch {
		case b.Name == "":
			p.addf(path+".name", "is empty: want the tenant x-ilb-tenant names")
		case len(b.Name) > 256:
			p.addf(path+".name", "is %d bytes: want at most 256", len(b.Name))
		case seen[b.Name]:
			p.addf(path+".name", "duplicate tenant %q", b.Name)
		}
		seen[b.Name] = true
		for _, f := range []struct {
			field string
			v     float64
		}{{"tokens_per_minute", b.TokensPerMinute}, {"tokens_per_day", b.TokensPerDay}} {
			if !(f.v >= 0 && f.v <= MaxBudgetTokens) {
				p.addf(path+"."+f.field, "is %v: want 0 (none) to %g tokens", f.v, float64(MaxBudgetTokens))
			}
		}
		if b.TokensPerMinute == 0 && b.TokensPerDay == 0 {
			p.addf(path, "sets no budget: want tokens_per_minute or tokens_per_day")
		}
	}
}

// Metric labels of the tenants not listed in tenants.weights, and of
// requests without a tenant.
const (
	TenantOther = "other"
	TenantNone  = "none"
)
