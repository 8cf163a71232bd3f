package tenant

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/route"
	"github.com/ilbproject/ilb/weights"
)

// Table is the tenants' demand of one cell (a source and a model) per
// priority, and how the cell's planned shed fraction of a priority is
// spread over them: the weighted max-min fair split (water-filling).
// Safe for concurrent use; each call takes a short lock.
//
// Demand is the estimated token cost of every request the cell saw, shed
// ones included (what the tenant asks for, not what it got), decayed with
// a half-life: the controller's tick, the time a plan stands. The plan
// says how much of a priority to shed, from demand smoothed over the
// controller's demand_half_life; the table says whom, from who asks for
// more now. Decayed over the demand half-life (30 s) as well, the table
// still saw a flood's tenant near an equal share 10 s after it tripled
// its demand, so the plan's first sheds of the flood fell on every tenant
// alike: end to end (make bench-tenants-e2e, load 1.0, 40 s of flood),
// the other tenants were refused 2–7% of their requests against 0.2–5.7%
// with the tick (5 s).
//
// The table tracks at most Tenants.MaxTracked tenants. A tenant it does
// not hold when it is full takes the slot of the lightest of 16 tracked
// tenants drawn at random (which is forgotten): a flood keeps its slot
// under any churn of light tenants, at a bounded cost per new tenant.
type Table struct {
	cfg      config.Tenants
	halfLife float64   // seconds, > 0
	epoch    time.Time // times are seconds since epoch

	mu      sync.Mutex
	entries map[string]*entry
	fair    [len(weights.Priorities)]level
	plan    [len(weights.Priorities)]planned
	// sum is every tracked tenant's demand per priority, decayed as of
	// sumAt, cnt their requests (the mean cost: sum / cnt), and wsum the
	// weights of the tracked tenants that asked for some of it.
	sum   [len(weights.Priorities)]float64
	cnt   [len(weights.Priorities)]float64 // requests of cost > 0, decayed
	wsum  [len(weights.Priorities)]float64
	sumAt float64
}

// entry is one tenant's demand, decayed as of at.
type entry struct {
	name   string
	weight float64
	at     float64
	mass   [len(weights.Priorities)]float64 // token cost, decayed
	n      [len(weights.Priorities)]float64 // requests of cost > 0, decayed
}

// noiseSE is how many standard errors of its demand estimate a tenant
// must ask above its fair level to be shed: the table's demand is a count
// of arrivals over a few seconds (a decay half-life of one tick), whose
// Poisson noise is about 1/√n of it — 18% for a tenant of 11 requests a
// second under a 2 s tick. Shed on the point estimate, a tenant asking
// its fair share lost requests whenever its count of the moment came out
// high: end to end at load 1.0 (make bench-tenants-e2e), the other
// tenants, all near the level, were refused 2–12% of their requests while
// a tenant flooded at 3×. Two standard errors, as for the capacity
// estimator's evidence that only raises an estimate: a tenant is shed
// only when its demand is above the level beyond its noise; a flood,
// many times its share, is at once. Only the tenants clearly above give
// up what that spares the others (level.heavy): the plan's total holds.
const noiseSE = 2

// lower is demand d (token cost) less noiseSE standard errors of it, at
// least 0. A tenant is judged on its demand before the request at hand:
// counted with it, its demand at its own arrivals runs a request above
// its demand at other times (Poisson arrivals see time averages; a
// request's own count does not), which at a few requests a second is a
// good part of its noise — in a Poisson model of the tenant flood at
// load 1.0 with the capacity planned 12% lower, a tenant 10% above the
// level lost 7.3% of its requests so, 4.5% judged before its request.
// It is: the noise of a steady stream of requests of the priority's
// mean cost (meanCost) counted under the table's exponential decay, whose
// variance is meanCost × d / 2. The priority's mean, not the tenant's own
// requests': a tenant cannot widen its margin with few, huge requests;
// the most a tenant is spared above the level is noiseSE standard errors
// of an honest stream at it.
func lower(d, meanCost float64) float64 {
	return max(d-noiseSE*math.Sqrt(max(meanCost*d/2, 0)), 0)
}

// level is a priority's fair level, cached: a tenant of weight w is
// admitted up to w × lambda of demand (decayed as of at), computed for
// the shed fraction f on a demand of total. lambda is +Inf when nobody
// is shed.
type level struct {
	at, f, lambda, total float64
	// heavy is the level of the tenants clearly above lambda (beyond
	// their noise: noiseSE) when the others above it are served whole;
	// NaN when every tenant above lambda is shed to it.
	heavy float64
	set   bool
}

// planned is what the cell's plan serves of a priority: the demand the
// table saw when the plan's shed fraction f first reached it, less f (in
// the table's demand units). The controller plans once a tick; between
// plans the table serves the larger of that amount and 1 − f of the
// demand of the moment: shedding f of the demand of the moment alone shed
// the others when a flood stopped (the flood's demand decayed out of the
// table while the plan, a tick behind, still shed a third of the
// priority, so the level fell below the others' demand: end to end, one
// tenant lost 7-16% of its requests in the seconds after a flood), and
// holding the amount alone shed more than planned when the demand rose
// before the next plan. Either way the table sheds no more than the plan
// says.
type planned struct {
	f, serve float64
	set      bool
}

// A fair level is reused until refresh half-lives passed (demand decays
// by under 1% meanwhile: 2^-1/128) or the priority's demand moved by
// more than drift since.
const (
	refresh = 1.0 / 128
	drift   = 0.01
)

// evictSample is how many tracked tenants a new one, when the table is
// full, draws to evict the lightest of.
const evictSample = 16

// New returns an empty table for tenants cfg (valid: config.Validate),
// decaying demand with halfLife (> 0: the controller's tick), its clock
// starting at epoch.
func New(cfg config.Tenants, halfLife time.Duration, epoch time.Time) *Table {
	return &Table{
		cfg: cfg, halfLife: max(halfLife.Seconds(), 1e-3), epoch: epoch,
		entries: make(map[string]*entry, min(cfg.MaxTracked, 64)),
	}
}

// Share is what Shed says of one request.
type Share struct {
	// Fraction is the share of the tenant's requests of this priority to
	// shed, in [0, 1]: 0 while the tenant asks for no more than its fair
	// share of what the cell serves.
	Fraction float64
	// Demand is the tenant's part of the priority's demand in the cell,
	// and Fair its fair share (of the demand: what the water-filling
	// gives it ÷ the priority's demand), both in [0, 1]; Fair is 1 when
	// nothing is shed.
	Demand, Fair float64
	// Heavy: the tenant asks for at least an equal share, by weight, of
	// the priority's demand (every tenant does when there is one, or
	// when all ask alike). Measured overload, whose size no plan gave
	// yet, refuses the heavy tenants' sheddable requests first
	// (route.Request.Heavy).
	Heavy bool
	// Over is the part of the tenant's requests above an equal share, by
	// weight, of the priority's demand, in [0, 1): what measured overload
	// refuses of it (route.Request.OverShare); 0 at or below that share,
	// and within the noise of the tenant's demand estimate (noiseSE).
	Over float64
}

// Shed books a request of tenant at priority p and estimated cost (token
// cost, ≥ 0) at now, and returns the part of the tenant's requests of p
// to shed when the cell's planned shed fraction of p is f (in [0, 1]).
// The cell serves 1 − f of the priority's demand, or, when that demand
// fell since f first came, 1 − f of the demand then (planned); spread over
// the tenants in proportion to their demand, the fractions shed what
// exceeds it, none of it from a tenant asking for less than its weighted
// fair share, nor, while others ask above it beyond their noise, from one
// above it within its own (noiseSE).
func (t *Table) Shed(now time.Time, tenant string, p weights.Priority, cost, f float64) Share {
	if int(p) >= len(weights.Priorities) {
		return Share{Fraction: f, Demand: 1, Fair: 1}
	}
	at := now.Sub(t.epoch).Seconds()
	cost = max(cost, 0)
	if math.IsNaN(cost) || math.IsInf(cost, 0) {
		cost = 0
	}
	if !(f > 0) { // NaN too
		f = 0
	}
	f = min(f, 1)
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entry(tenant, at)
	t.decay(e, at)
	t.decaySum(at)
	if e.mass[p] <= 0 && cost > 0 {
		t.wsum[p] += e.weight
	}
	e.mass[p] += cost
	t.sum[p] += cost
	if cost > 0 {
		e.n[p]++
		t.cnt[p]++
	}
	total := t.sum[p]
	if total <= 0 || e.mass[p] <= 0 || t.wsum[p] <= 0 {
		return Share{Fair: 1, Heavy: true}
	}
	equal := total / t.wsum[p] * e.weight // an equal share's demand
	s := Share{Demand: e.mass[p] / total, Fair: 1, Heavy: e.mass[p] >= (1-1e-9)*equal}
	if lower(e.mass[p]-cost, t.meanCost(p)) > equal*(1+1e-9) { // beyond its noise (noiseSE)
		s.Over = 1 - equal/e.mass[p]
	}
	pl := &t.plan[p]
	if f <= 0 {
		pl.set = false
		return s
	}
	if !pl.set || pl.f != f {
		*pl = planned{f: f, serve: (1 - f) * total, set: true}
	}
	lv := &t.fair[p]
	g := t.decayFactor(at - lv.at)
	if !lv.set || lv.f != f || at-lv.at >= refresh*t.halfLife || at < lv.at || math.Abs(total-lv.total*g) > drift*total {
		*lv = t.level(p, max((1-f)*total, pl.serve), at, e, cost)
		lv.f = f
		g = 1
	}
	if math.IsInf(lv.lambda, 1) {
		return s
	}
	admit := e.weight * lv.lambda * g
	if !math.IsNaN(lv.heavy) {
		if lower(e.mass[p]-cost, t.meanCost(p)) <= admit {
			// Within its noise of the level: served whole (noiseSE).
			s.Fair = min(max(admit, e.mass[p])/total, 1)
			return s
		}
		admit = e.weight * lv.heavy * g
	}
	s.Fraction = min(max(1-admit/e.mass[p], 0), 1)
	s.Fair = min(admit/total, 1)
	return s
}

// entry returns tenant's entry, making room for it when the table is
// full. Called with t.mu held.
func (t *Table) entry(tenant string, at float64) *entry {
	if e, ok := t.entries[tenant]; ok {
		return e
	}
	if len(t.entries) >= t.cfg.MaxTracked {
		// The lightest of evictSample tenants drawn at random (Go's
		// map order): bounded work per new tenant however many are
		// tracked, and a tenant heavier than most is all but never the
		// lightest of its sample.
		var least *entry
		var leastMass float64
		n := 0
		for _, e := range t.entries {
			if m := t.demandOf(e, at); least == nil || m < leastMass {
				least, leastMass = e, m
			}
			if n++; n == evictSample {
				break
			}
		}
		delete(t.entries, least.name)
		t.decaySum(at)
		g := t.decayFactor(at - least.at)
		for i, m := range least.mass {
			t.sum[i] = max(t.sum[i]-m*g, 0)
			t.cnt[i] = max(t.cnt[i]-least.n[i]*g, 0)
			if m > 0 {
				t.wsum[i] = max(t.wsum[i]-least.weight, 0)
			}
		}
	}
	e := &entry{name: tenant, weight: t.cfg.Weight(tenant), at: at}
	t.entries[tenant] = e
	return e
}

// decayFactor is how much demand decays over dt seconds.
func (t *Table) decayFactor(dt float64) float64 {
	if dt <= 0 {
		return 1
	}
	return math.Exp2(-dt / t.halfLife)
}

// decay brings e's demand and request count to at.
func (t *Table) decay(e *entry, at float64) {
	since := e.at
	t.decayTo(&e.n, &since, at)
	t.decayTo(&e.mass, &e.at, at)
}

// decayTo brings demand m, decayed as of *since, to at.
func (t *Table) decayTo(m *[len(weights.Priorities)]float64, since *float64, at float64) {
	if at <= *since {
		return
	}
	g := t.decayFactor(at - *since)
	for i := range m {
		m[i] *= g
	}
	*since = at
}

// demandOf is e's demand of every priority as of at, without changing e.
func (t *Table) demandOf(e *entry, at float64) float64 {
	var m float64
	for _, v := range e.mass {
		m += v
	}
	return m * t.decayFactor(at-e.at)
}

// decaySum brings the demand sums and counts to at.
func (t *Table) decaySum(at float64) {
	since := t.sumAt
	t.decayTo(&t.cnt, &since, at)
	t.decayTo(&t.sum, &t.sumAt, at)
}

// meanCost is priority p's mean cost of a request, as of sumAt (0 when
// none is counted).
func (t *Table) meanCost(p weights.Priority) float64 {
	if !(t.cnt[p] > 0) {
		return 0
	}
	return t.sum[p] / t.cnt[p]
}

// level water-fills priority p: it finds lambda such that Σ min(d_i, w_i
// × lambda) = serve over the tenants i (demand d_i, weight w_i); lambda
// is +Inf when serve covers the demand. Then, when some tenants ask
// above the level beyond their noise (lower, noiseSE) and the others
// above it ask within theirs, it serves the latter whole and sheds the
// former alone, down to heavy; the total served is serve either way.
func (t *Table) level(p weights.Priority, serve, at float64, self *entry, cost float64) level {
	lv := level{at: at, lambda: math.Inf(1), heavy: math.NaN(), set: true}
	type dw struct{ d, lo, w float64 }
	ts := make([]dw, 0, len(t.entries))
	var total, weight float64
	mean := t.meanCost(p)
	for _, e := range t.entries {
		if d := e.mass[p] * t.decayFactor(at-e.at); d > 0 {
			lo := lower(d, mean)
			if e == self {
				lo = lower(d-cost, mean) // as before its request (noiseSE)
			}
			ts = append(ts, dw{d, lo, e.weight})
			total += d
			weight += e.weight
		}
	}
	lv.total = total
	if total <= 0 || serve >= total*(1-1e-12) {
		return lv
	}
	// Ascending demand per weight: those asking less than the level are
	// served whole, the others up to the level.
	slices.SortFunc(ts, func(a, b dw) int {
		switch x, y := a.d/a.w, b.d/b.w; {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	left := max(serve, 0)
	for _, x := range ts {
		if lambda := left / weight; x.d <= x.w*lambda {
			left -= x.d
			weight -= x.w
			continue
		}
		lv.lambda = left / weight
		break
	}
	if math.IsInf(lv.lambda, 1) {
		return lv // serve rounds to the demand: everyone is served whole
	}
	// Those above the level: clearly (their demand less its noise still
	// above it), or within their noise, served whole if the clear ones
	// can give up what that takes.
	var within, clearW float64
	left = max(serve, 0)
	for _, x := range ts {
		if x.lo > x.w*lv.lambda {
			clearW += x.w
		} else {
			within += x.d
		}
	}
	if clearW > 0 && left-within > 0 {
		lv.heavy = (left - within) / clearW
	}
	return lv
}

// Tracked is how many tenants the table holds.
func (t *Table) Tracked() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}

// Route books a request of tenant (its demand req.Cost) on cell c at now
// and fills req's tenant fields (route.Request.Tenanted): its share of
// c's planned shed fraction of req.Priority. ext_proc and the routing
// benchmark both route tenants through it.
func (t *Table) Route(now time.Time, tenant string, c *route.Cell, req *route.Request) Share {
	var f float64
	if int(req.Priority) < len(weights.Priorities) {
		f = c.Shed()[req.Priority]
	}
	s := t.Shed(now, tenant, req.Priority, req.Cost, f)
	req.Tenanted, req.ShedFraction, req.Heavy, req.OverShare = true, s.Fraction, s.Heavy, s.Over
	return s
}

// Label is tenant's metric label: its name when cfg lists it with a
// weight, "none" for requests without a tenant, else "other" (bounded
// cardinality).
func Label(cfg config.Tenants, tenant string) string {
	switch {
	case tenant == "":
		return config.TenantNone
	case cfg.Listed(tenant):
		return tenant
	}
	return config.TenantOther
}
