package budget

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/ilbproject/ilb/config"
)

// Window is a budget's period.
type Window uint8

// Windows, shortest first.
const (
	Minute Window = iota
	Day
	numWindows
)

func (w Window) String() string {
	if w == Minute {
		return "minute"
	}
	return "day"
}

// seconds is w's length.
func (w Window) seconds() int64 {
	if w == Minute {
		return 60
	}
	return 86400
}

// Ledger counts the tokens of the tenants with a budget, per UTC minute
// and UTC day, and refuses a request that would take a tenant past one.
// A request's tokens belong to the window it was admitted in: its
// estimate is held there at admission (Reserve) and replaced by what it
// really took when it ends (Hold.Settle), so the requests admitted in a
// window take at most its budget, give or take what the estimates
// missed. Each budget is divided by config.Tenants.BudgetSplit (the ILB
// replicas sharing it). Safe for concurrent use.
type Ledger struct {
	limits map[string][numWindows]float64 // tokens per window, after the split; 0: none

	mu       sync.Mutex
	accounts map[string]*account
}

// account is one tenant's use of its current windows.
type account struct {
	w [numWindows]window
}

// window is one window's use: tokens of settled requests and tokens held
// for requests in flight, since start (Unix seconds).
type window struct {
	start          int64
	used, reserved float64
}

// New returns the ledger of cfg's budgets (valid: config.Validate); nil
// when cfg sets none.
func New(cfg config.Tenants) *Ledger {
	if len(cfg.Budgets) == 0 {
		return nil
	}
	split := float64(max(cfg.BudgetSplit, 1))
	l := &Ledger{limits: map[string][numWindows]float64{}, accounts: map[string]*account{}}
	for _, b := range cfg.Budgets {
		l.limits[b.Name] = [numWindows]float64{b.TokensPerMinute / split, b.TokensPerDay / split}
	}
	return l
}

// ExceededError is the refusal of a request that would take its tenant past a
// budget.
type ExceededError struct {
	Tenant string
	Window Window
	// Limit is the budget this replica enforces, Used what the window's
	// admitted requests took or hold, Asked the request's estimate
	// (tokens).
	Limit, Used, Asked float64
	// RetryAfter is when the window ends (whole seconds, ≥ 1).
	RetryAfter int
}

func (e *ExceededError) Error() string {
	return fmt.Sprintf("tenant %q has used %.0f of its %.0f tokens per %s; this request needs about %.0f more: retry in %d s",
		e.Tenant, e.Used, e.Limit, e.Window, e.Asked, e.RetryAfter)
}

// Hold is the tokens one admitted request holds against its tenant's
// budgets until it ends.
type Hold struct {
	l      *Ledger
	tenant string
	tokens float64
	starts [numWindows]int64
	done   bool
}

// Reserve admits a request of tenant asking for tokens (its estimate,
// ≥ 0) at now and holds them, or returns *ExceededError. A tenant without a
// budget gets a nil Hold and no error.
func (l *Ledger) Reserve(now time.Time, tenant string, tokens float64) (*Hold, error) {
	if l == nil {
		return nil, nil
	}
	limits, ok := l.limits[tenant]
	if !ok {
		return nil, nil
	}
	if !(tokens >= 0) || math.IsInf(tokens, 1) {
		tokens = 0
	}
	sec := now.Unix()
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.accounts[tenant]
	if a == nil {
		a = &account{}
		l.accounts[tenant] = a
	}
	h := &Hold{l: l, tenant: tenant, tokens: tokens}
	for w := range numWindows {
		cur := a.roll(w, sec)
		h.starts[w] = cur.start
		if limit := limits[w]; limit > 0 && cur.used+cur.reserved+tokens > limit {
			return nil, &ExceededError{
				Tenant: tenant, Window: w, Limit: limit, Used: cur.used + cur.reserved, Asked: tokens,
				RetryAfter: int(max(cur.start+w.seconds()-sec, 1)),
			}
		}
	}
	for w := range numWindows {
		a.w[w].reserved += tokens
	}
	return h, nil
}

// roll returns a's window w as of sec (Unix seconds), starting it afresh
// when sec is past its end.
func (a *account) roll(w Window, sec int64) *window {
	start := sec - sec%w.seconds()
	if c := &a.w[w]; c.start != start {
		*c = window{start: start}
	}
	return &a.w[w]
}

// Settle replaces h's hold by the tokens its request took (≥ 0), in the
// windows it was admitted in (a window already over is left alone). It
// runs once; later calls and a nil Hold do nothing.
func (h *Hold) Settle(took float64) {
	if h == nil || h.done {
		return
	}
	h.done = true
	if !(took >= 0) || math.IsInf(took, 1) {
		took = h.tokens
	}
	l := h.l
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.accounts[h.tenant]
	for w := range numWindows {
		if c := &a.w[w]; c.start == h.starts[w] {
			c.reserved = max(c.reserved-h.tokens, 0)
			c.used += took
		}
	}
}

// Tokens is what h holds: the request's estimate.
func (h *Hold) Tokens() float64 {
	if h == nil {
		return 0
	}
	return h.tokens
}
