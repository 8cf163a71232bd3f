package extproc

import (
	"errors"

	"github.com/ilbproject/ilb/budget"
)

// budgetError is the 429 of a request over its tenant's token budget: an
// OpenAI rate-limit error naming the budget, with Retry-After at the end
// of its window.
func budgetError(err error) error {
	var ex *budget.ExceededError
	if !errors.As(err, &ex) {
		return err
	}
	return &RequestError{
		Status: 429, Type: "rate_limit_error", Code: codeBudget, RetryAfter: ex.RetryAfter,
		Msg: ex.Error() + " (tenants.budgets)",
	}
}

// settleBudget gives x's tenant budget what its request took, once its
// stream ends: nothing if no engine answered 2xx (refused, by ILB or
// upstream, or the client went away first); the engine's usage (else
// ILB's prompt estimate and the tokens it saw) when ILB followed the
// response to its end; the estimate it held otherwise (not followed, or
// followed until the whole estimate was generated).
func (s *Server) settleBudget(x *exchange) {
	h := x.budget
	if h == nil {
		return
	}
	x.budget = nil
	r := x.rec
	switch {
	case r == nil || r.Status < 200 || r.Status > 299:
		h.Settle(0)
	case r.Generated == nil || r.Generated.Outcome == followConfirmed || r.Generated.Outcome == followUnfollowed:
		h.Settle(h.Tokens())
	default:
		prompt := x.prompt
		if r.Generated.PromptTokens > 0 {
			prompt = float64(r.Generated.PromptTokens)
		}
		h.Settle(prompt + float64(r.Generated.Tokens))
	}
}
