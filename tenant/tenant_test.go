package tenant_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/tenant"
	"github.com/ilbproject/ilb/weights"
)

var t0 = time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)

// demand books each tenant's demand (token cost) of priority p at t0 as
// a stream of 1000 requests (evidence well beyond its noise: see
// TestShedSparesTheNoise), with nothing planned, and returns the table.
func demand(cfg config.Tenants, p weights.Priority, d map[string]float64) *tenant.Table {
	tb := tenant.New(cfg, 30*time.Second, t0)
	for name, cost := range d {
		for range 1000 {
			tb.Shed(t0, name, p, cost/1000, 0)
		}
	}
	return tb
}

func TestShedIsFair(t *testing.T) {
	weighted := config.DefaultTenants()
	weighted.Weights = []config.TenantWeight{{Name: "big", Weight: 3}}
	cases := []struct {
		name   string
		cfg    config.Tenants
		demand map[string]float64
		f      float64
		want   map[string]float64 // shed fraction per tenant
		heavy  map[string]bool
		over   map[string]float64 // part above an equal share; 0 when absent
	}{
		{
			name:   "nothing planned sheds nobody",
			cfg:    config.DefaultTenants(),
			demand: map[string]float64{"a": 1, "b": 1, "flood": 3},
			want:   map[string]float64{"a": 0, "b": 0, "flood": 0},
			heavy:  map[string]bool{"a": false, "b": false, "flood": true},
			// An equal share is 5/3: the flood's part above it is 4/9.
			over: map[string]float64{"flood": 4.0 / 9},
		},
		{
			name:   "equal tenants share the plan's fraction",
			cfg:    config.DefaultTenants(),
			demand: map[string]float64{"a": 2, "b": 2, "c": 2},
			f:      0.3,
			want:   map[string]float64{"a": 0.3, "b": 0.3, "c": 0.3},
			heavy:  map[string]bool{"a": true, "b": true, "c": true},
		},
		{
			name: "a flood at 3x its share is shed down to the fair level, the others not at all",
			cfg:  config.DefaultTenants(),
			// 6 asked, 4 served: the level is 1, the flood keeps 1 of 3.
			demand: map[string]float64{"a": 1, "b": 1, "c": 1, "flood": 3},
			f:      1.0 / 3,
			want:   map[string]float64{"a": 0, "b": 0, "c": 0, "flood": 2.0 / 3},
			heavy:  map[string]bool{"a": false, "b": false, "c": false, "flood": true},
			over:   map[string]float64{"flood": 0.5},
		},
		{
			name: "past what the flood alone can give, everyone above the level is shed to it",
			cfg:  config.DefaultTenants(),
			// 10 asked, 3 served: a keeps 0.5 of... the level is 1: a
			// (0.5) whole, b and flood down to 1 each... 0.5+1+1 = 2.5:
			// the level is 1.25.
			demand: map[string]float64{"a": 0.5, "b": 2, "flood": 7.5},
			f:      0.7,
			want:   map[string]float64{"a": 0, "b": 1 - 1.25/2, "flood": 1 - 1.25/7.5},
			heavy:  map[string]bool{"a": false, "b": false, "flood": true},
			over:   map[string]float64{"flood": 1 - (10.0/3)/7.5},
		},
		{
			name: "a weight of 3 makes 3x the demand a fair share",
			cfg:  weighted,
			// Demand per weight is 1 for all: shed alike.
			demand: map[string]float64{"a": 1, "b": 1, "c": 1, "big": 3},
			f:      1.0 / 3,
			want:   map[string]float64{"a": 1.0 / 3, "b": 1.0 / 3, "c": 1.0 / 3, "big": 1.0 / 3},
			heavy:  map[string]bool{"a": true, "b": true, "c": true, "big": true},
		},
		{
			name:   "one tenant (no header: the tenant \"\") takes the plan whole",
			cfg:    config.DefaultTenants(),
			demand: map[string]float64{"": 5},
			f:      0.4,
			want:   map[string]float64{"": 0.4},
			heavy:  map[string]bool{"": true},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tb := demand(tc.cfg, weights.Standard, tc.demand)
			var shed, total float64
			for name, want := range tc.want {
				s := tb.Shed(t0, name, weights.Standard, 0, tc.f)
				if math.Abs(s.Fraction-want) > 1e-9 {
					t.Errorf("tenant %q: shed %.4f, want %.4f (share %+v)", name, s.Fraction, want, s)
				}
				if s.Heavy != tc.heavy[name] {
					t.Errorf("tenant %q: heavy %v, want %v", name, s.Heavy, tc.heavy[name])
				}
				if math.Abs(s.Over-tc.over[name]) > 1e-9 {
					t.Errorf("tenant %q: over an equal share %.4f, want %.4f", name, s.Over, tc.over[name])
				}
				shed += s.Fraction * tc.demand[name]
				total += tc.demand[name]
			}
			if math.Abs(shed-tc.f*total) > 1e-9*total {
				t.Errorf("shed %.4f of %.4f: want the plan's %.4f", shed, total, tc.f*total)
			}
		})
	}
}

// TestShedKeepsThePlan checks, on random demands and weights, that the
// tenants' fractions shed exactly the plan's share of the demand, that
// nobody below the fair level is shed, and that a tenant asking more per
// weight is never shed a smaller part.
func TestShedKeepsThePlan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		cfg := config.DefaultTenants()
		n := 1 + rng.IntN(12)
		d := map[string]float64{}
		for i := range n {
			name := fmt.Sprintf("t%d", i)
			d[name] = rng.ExpFloat64()
			if rng.IntN(3) == 0 {
				cfg.Weights = append(cfg.Weights, config.TenantWeight{Name: name, Weight: 0.5 + 4*rng.Float64()})
			}
		}
		f := rng.Float64()
		tb := demand(cfg, weights.Sheddable, d)
		var shed, total float64
		type got struct{ perWeight, frac float64 }
		var all []got
		for name, dn := range d {
			s := tb.Shed(t0, name, weights.Sheddable, 0, f)
			if s.Fraction < 0 || s.Fraction > 1 {
				t.Fatalf("round %d: tenant %s shed %v", round, name, s.Fraction)
			}
			shed += s.Fraction * dn
			total += dn
			all = append(all, got{dn / cfg.Weight(name), s.Fraction})
		}
		if math.Abs(shed-f*total) > 1e-9*total {
			t.Fatalf("round %d: shed %.6f of %.6f, want %.6f", round, shed, total, f*total)
		}
		for _, a := range all {
			for _, b := range all {
				if a.perWeight < b.perWeight && a.frac > b.frac+1e-12 {
					t.Fatalf("round %d: a tenant asking %.3f per weight is shed %.3f, one asking %.3f only %.3f", round, a.perWeight, a.frac, b.perWeight, b.frac)
				}
			}
		}
	}
}

func TestShedDecays(t *testing.T) {
	tb := demand(config.DefaultTenants(), weights.Standard, map[string]float64{"a": 1, "flood": 9})
	// A minute later (two half-lives), a asks as much again as it did
	// then, the flood nothing: the flood's old demand is a quarter left
	// (2.25) against a's 1.25.
	later := t0.Add(time.Minute)
	tb.Shed(later, "a", weights.Standard, 1, 0)
	s := tb.Shed(later, "flood", weights.Standard, 0, 0.5)
	a := tb.Shed(later, "a", weights.Standard, 0, 0.5)
	if math.Abs(s.Demand-2.25/3.5) > 1e-9 || math.Abs(a.Demand-1.25/3.5) > 1e-9 {
		t.Fatalf("demand shares flood %.4f a %.4f, want %.4f and %.4f", s.Demand, a.Demand, 2.25/3.5, 1.25/3.5)
	}
	// Half of 3.5 served: more than a asks alone, so both are shed down
	// to the level 0.875.
	if math.Abs(a.Fraction-(1-0.875/1.25)) > 1e-9 || math.Abs(s.Fraction-(1-0.875/2.25)) > 1e-9 {
		t.Fatalf("shed flood %.4f a %.4f, want %.4f and %.4f", s.Fraction, a.Fraction, 1-0.875/2.25, 1-0.875/1.25)
	}
}

// TestShedHoldsThePlannedAmount: the plan serves an amount, set when its
// fraction arrives; when a flood stops before the next plan, the others
// keep being served whole rather than shed with the flood's share.
func TestShedHoldsThePlannedAmount(t *testing.T) {
	others := []string{"a", "b", "c"}
	tb := demand(config.DefaultTenants(), weights.Standard, map[string]float64{"a": 1, "b": 1, "c": 1, "flood": 3})
	// The plan serves two thirds of 6: 4, a level of 1.
	if s := tb.Shed(t0, "a", weights.Standard, 0, 1.0/3); s.Fraction != 0 {
		t.Fatalf("before: a shed %.4f, want 0", s.Fraction)
	}
	// A half-life later the flood has stopped (its demand halved to 1.5)
	// while the others asked as much again (1 each); the plan, a tick
	// behind, still sheds a third.
	later := t0.Add(30 * time.Second)
	for _, name := range others {
		tb.Shed(later, name, weights.Standard, 0.5, 1.0/3)
	}
	tests := []struct {
		name      string
		f         float64
		other, fl float64
	}{
		{"the same plan: 4 still served, the others whole, the flood to the level 1", 1.0 / 3, 0, 1 - 1/1.5},
		{"a new plan: half of 4.5 served, a level of 0.5625 for all", 0.5, 1 - 0.5625, 1 - 0.5625/1.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, name := range others {
				if s := tb.Shed(later, name, weights.Standard, 0, tt.f); math.Abs(s.Fraction-tt.other) > 1e-9 {
					t.Errorf("%s shed %.4f, want %.4f", name, s.Fraction, tt.other)
				}
			}
			if s := tb.Shed(later, "flood", weights.Standard, 0, tt.f); math.Abs(s.Fraction-tt.fl) > 1e-9 {
				t.Errorf("flood shed %.4f, want %.4f", s.Fraction, tt.fl)
			}
		})
	}
}

// TestShedFollowsARisingDemand: when the demand rises after the plan's
// fraction came, the plan's fraction of it is shed, not more.
func TestShedFollowsARisingDemand(t *testing.T) {
	d := map[string]float64{"a": 1, "b": 1, "c": 1, "flood": 3}
	tb := demand(config.DefaultTenants(), weights.Standard, d)
	tb.Shed(t0, "a", weights.Standard, 0, 1.0/3) // 4 of 6 served
	for name := range d {                        // everyone asks as much again
		tb.Shed(t0, name, weights.Standard, d[name], 1.0/3)
	}
	var shed float64
	for name, dn := range d {
		shed += tb.Shed(t0, name, weights.Standard, 0, 1.0/3).Fraction * 2 * dn
	}
	if math.Abs(shed-4) > 1e-9 {
		t.Errorf("shed %.4f of 12; want the plan's third, 4", shed)
	}
}

func TestShedTracksTheHeaviest(t *testing.T) {
	cfg := config.DefaultTenants()
	cfg.MaxTracked = 4
	tb := tenant.New(cfg, 30*time.Second, t0)
	tb.Shed(t0, "flood", weights.Standard, 100, 0)
	// A churn of light tenants, ten times the table: each takes the slot
	// of the lightest, never the flood's.
	for i := range 40 {
		tb.Shed(t0, fmt.Sprintf("light-%d", i), weights.Standard, 1, 0)
	}
	if n := tb.Tracked(); n != cfg.MaxTracked {
		t.Fatalf("tracked %d tenants, want the bound %d", n, cfg.MaxTracked)
	}
	s := tb.Shed(t0, "flood", weights.Standard, 0, 0.5)
	if s.Fraction <= 0.5 || s.Demand < 0.9 {
		t.Fatalf("the flood after the churn: %+v; want it still tracked (demand ≥ 0.9) and shed more than the plan's 0.5", s)
	}
}

// BenchmarkShed is the request path's cost of fair shedding: one call per
// request, among 200 tenants (one flooding), while the plan sheds; and
// with a new tenant on every call in a full table.
func BenchmarkShed(b *testing.B) {
	cfg := config.DefaultTenants()
	names := make([]string, 200)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%d", i)
	}
	b.Run("tenants=200", func(b *testing.B) {
		tb := tenant.New(cfg, 30*time.Second, t0)
		i := 0
		for b.Loop() {
			name := names[i%len(names)]
			if i%4 == 0 {
				name = "flood"
			}
			tb.Shed(t0.Add(time.Duration(i)*time.Millisecond), name, weights.Standard, 500, 0.2)
			i++
		}
	})
	b.Run("new tenant each call, table full", func(b *testing.B) {
		cfg.MaxTracked = config.MaxTenantsTracked
		tb := tenant.New(cfg, 30*time.Second, t0)
		i := 0
		for b.Loop() {
			tb.Shed(t0.Add(time.Duration(i)*time.Millisecond), strconv.Itoa(i), weights.Standard, 500, 0.2)
			i++
		}
	})
}

// TestShedSparesTheNoise: a tenant is shed for asking above the fair
// level only beyond the noise of its demand estimate (noiseSE standard
// errors of a steady stream of the priority's mean cost); the tenants
// clearly above give up what that spares, so the plan's total holds.
func TestShedSparesTheNoise(t *testing.T) {
	type stream struct {
		n    int
		cost float64
	}
	tests := []struct {
		name    string
		streams map[string]stream
		serve   float64            // of the demand: 1 − f
		want    map[string]float64 // shed fraction per tenant
	}{
		{
			// The level is 2600: b asks 2640, 1.5% above it, on 33
			// requests (2 standard errors are 25%); the flood, 2.8×
			// the level on 90 requests, gives up what b keeps.
			name:    "a tenant within its noise of the level is served whole, the flood gives it up",
			streams: map[string]stream{"a": {30, 80}, "b": {33, 80}, "c": {30, 80}, "flood": {90, 80}},
			serve:   10000,
			want:    map[string]float64{"a": 0, "b": 0, "c": 0, "flood": 1 - 2560.0/7200},
		},
		{
			// The same demand counted over a hundred times the
			// requests: b, 11% above the level, is so beyond its
			// noise (2.4%), and shed to the level as the flood is.
			name:    "a tenant beyond its noise is shed to the level",
			streams: map[string]stream{"a": {3000, 0.8}, "b": {3600, 0.8}, "c": {3000, 0.8}, "flood": {9000, 0.8}},
			serve:   10000,
			want:    map[string]float64{"a": 0, "b": 1 - 2600.0/2880, "c": 0, "flood": 1 - 2600.0/7200},
		},
		{
			name:    "equal tenants near the level share the shed",
			streams: map[string]stream{"a": {30, 80}, "b": {30, 80}, "c": {30, 80}, "d": {30, 80}},
			serve:   7680,
			want:    map[string]float64{"a": 0.2, "b": 0.2, "c": 0.2, "d": 0.2},
		},
		{
			// big asks 4000 in 4 requests: its own requests' spread
			// would make it all noise; an honest stream's at the
			// priority's mean cost (104) puts it clearly above the
			// level of 2600, with the flood.
			name:    "few huge requests widen no margin",
			streams: map[string]stream{"a": {30, 80}, "b": {30, 80}, "big": {4, 1000}, "flood": {90, 80}},
			serve:   10000,
			want:    map[string]float64{"a": 0, "b": 0, "big": 1 - 2600.0/4000, "flood": 1 - 2600.0/7200},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := tenant.New(config.DefaultTenants(), 2*time.Second, t0)
			var total float64
			for name, s := range tt.streams {
				for range s.n {
					tb.Shed(t0, name, weights.Standard, s.cost, 0)
				}
				total += float64(s.n) * s.cost
			}
			f := 1 - tt.serve/total
			var shed float64
			for name, s := range tt.streams {
				got := tb.Shed(t0, name, weights.Standard, 0, f).Fraction
				if math.Abs(got-tt.want[name]) > 1e-6 {
					t.Errorf("%s shed %.4f, want %.4f", name, got, tt.want[name])
				}
				shed += got * float64(s.n) * s.cost
			}
			if math.Abs(shed-f*total) > 1e-6*total {
				t.Errorf("shed %.2f of %.2f, want the plan's %.2f", shed, total, f*total)
			}
		})
	}
}

// TestOverShareBeyondNoise: under measured overload, before a plan sized
// it, a tenant is cut to an equal share only when it asks above it
// beyond the noise of its demand estimate.
func TestOverShareBeyondNoise(t *testing.T) {
	tests := []struct {
		name string
		n    int     // requests of a and c; b sends 1.2 n
		cost float64 // of each request
		want float64 // b's part above an equal share
	}{
		// Equal is 2560: b asks 2880 on 36 requests, 12.5% above, within
		// two standard errors (24%).
		{"within its noise", 30, 80, 0},
		// The same demand on 3,600 requests: beyond its noise (2.4%).
		{"beyond its noise", 3000, 0.8, 1 - 2560.0/2880},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := tenant.New(config.DefaultTenants(), 2*time.Second, t0)
			for name, n := range map[string]int{"a": tt.n, "b": tt.n * 6 / 5, "c": tt.n} {
				for range n {
					tb.Shed(t0, name, weights.Standard, tt.cost, 0)
				}
			}
			if got := tb.Shed(t0, "b", weights.Standard, 0, 0).Over; math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("b over an equal share %.4f, want %.4f", got, tt.want)
			}
		})
	}
}

// TestShedJudgesTheDemandBeforeTheRequest: a tenant's noise test at its
// own request counts its demand before that request (Poisson arrivals
// see time averages; counted with the request, a tenant at a few
// requests a second looks a request heavier at every one of its own
// arrivals). b's 42nd request takes its demand less two standard errors
// from 2,556 to 2,627 over the level of 2,600: judged before it, b is
// within its noise and served whole, and the flood gives it up.
func TestShedJudgesTheDemandBeforeTheRequest(t *testing.T) {
	tb := tenant.New(config.DefaultTenants(), 2*time.Second, t0)
	for name, n := range map[string]int{"a": 30, "c": 30, "flood": 90, "b": 41} {
		for range n {
			tb.Shed(t0, name, weights.Standard, 80, 0)
		}
	}
	f := 1 - 10000.0/(2400+2400+7200+3360) // serve 10,000 of 15,360
	if got := tb.Shed(t0, "b", weights.Standard, 80, f).Fraction; got != 0 {
		t.Errorf("b's 42nd request: shed %.4f, want 0", got)
	}
	// The flood keeps 10,000 − 2,400 − 2,400 − 3,360.
	if got, want := tb.Shed(t0, "flood", weights.Standard, 0, f).Fraction, 1-1840.0/7200; math.Abs(got-want) > 1e-6 {
		t.Errorf("flood shed %.4f, want %.4f", got, want)
	}
}
