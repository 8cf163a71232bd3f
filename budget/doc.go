// Package budget enforces token budgets per tenant: the prompt and output
// tokens of the requests a tenant may have admitted per UTC minute and
// per UTC day (config tenants.budgets), as Envoy AI Gateway and LiteLLM
// meter users and teams.
//
// ext_proc reserves a request's estimate at admission (its prompt, and
// max_tokens or the default output, capped by the model's limits) and
// settles it with what the engine reported when the response ends, so a
// burst of concurrent requests cannot pass a budget that each alone
// would fit. A request over a budget gets 429 with Retry-After (the
// window's end) and an OpenAI-shaped error naming the budget; it is not
// demand (it would never be served).
//
// Several ILB replicas share a budget by a documented split: each
// enforces budget / tenants.budget_split, so together they never admit
// more than the budget; an uneven spread of streams over them admits
// less.
package budget
