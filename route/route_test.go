package route_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/ilbproject/ilb/route"
	"github.com/ilbproject/ilb/weights"
)

var (
	ok  = route.Signal{PressureKnown: true}
	out = route.Signal{Excluded: true}
	// full is saturated: a queue of three per running request.
	full = route.Signal{Saturated: true, Pressure: 3, PressureKnown: true}
	// late misses its TTFT target with a short queue: overloaded in the
	// SLO's terms, not saturated.
	late = route.Signal{Overloaded: true, Pressure: 0.1, PressureKnown: true}
)

// targets are targets of these weights, all at the same round trip.
func targets(ws ...uint64) []route.Target {
	out := make([]route.Target, len(ws))
	for i, w := range ws {
		out[i] = route.Target{Weight: w, RTT: 0.001}
	}
	return out
}

func shed(crit, std, shd float64) weights.ShedFractions {
	var f weights.ShedFractions
	f[weights.Critical], f[weights.Standard], f[weights.Sheddable] = crit, std, shd
	return f
}

// TestDecideOrder pins the order of the checks: 503 before any 429, a
// planned shed only on confirmed overload, the fast loop's sheddable 429
// after it, then the draw, the redraw and the steering.
func TestDecideOrder(t *testing.T) {
	w := []uint64{600, 400} // slots [0, 600) → target 0, [600, 1000) → 1
	tests := []struct {
		name string
		ws   []uint64
		shed weights.ShedFractions
		live []route.Signal
		req  route.Request
		want route.Decision
	}{
		{
			name: "no target at all is 503 even for critical",
			ws:   nil, req: route.Request{Priority: weights.Critical},
			want: route.Decision{Outcome: route.NoCapacity, Drawn: -1, Chosen: -1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "every target excluded is 503, not the planned 429",
			ws:   w, shed: shed(0, 1, 1), live: []route.Signal{out, {Excluded: true, Saturated: true}},
			req:  route.Request{Priority: weights.Sheddable, Uniform: 0},
			want: route.Decision{Outcome: route.NoCapacity, Drawn: -1, Chosen: -1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "planned shed confirmed by every remaining target saturated is 429 shed",
			ws:   w, shed: shed(0, 0.5, 0.5), live: []route.Signal{full, {Excluded: true}},
			req:  route.Request{Priority: weights.Standard, Uniform: 0.49},
			want: route.Decision{Outcome: route.Shed, Remaining: 1, Drawn: -1, Chosen: -1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "planned shed confirmed by every remaining target missing its TTFT target is 429 shed",
			ws:   w, shed: shed(0, 0.5, 0.5), live: []route.Signal{late, late},
			req:  route.Request{Priority: weights.Standard, Uniform: 0.49},
			want: route.Decision{Outcome: route.Shed, Remaining: 2, Drawn: -1, Chosen: -1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "planned shed while one target meets its TTFT target is waived",
			ws:   w, shed: shed(0, 0.5, 0.5), live: []route.Signal{late, ok},
			req:  route.Request{Priority: weights.Standard, Draw: 700, Uniform: 0.2},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 1, Slot: 700, Chosen: 1, SteeredFrom: -1, Keep: 1, Waived: 0.5},
		},
		{
			name: "missing the TTFT target without a plan refuses nothing: only saturation does",
			ws:   w, live: []route.Signal{late, late},
			req:  route.Request{Priority: weights.Sheddable, Draw: 700, Uniform: 0},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 1, Slot: 700, Chosen: 1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "planned shed while a target has headroom: a draw that stays on the saturated one is shed",
			ws:   w, shed: shed(0, 0.5, 0.5), live: []route.Signal{full, ok},
			// Graded steering keeps this draw on the saturated target with
			// probability (1+0)/(1+3) = 0.25, and this one stays: it would
			// queue there.
			req:  route.Request{Priority: weights.Standard, Draw: 100, Uniform: 0.2},
			want: route.Decision{Outcome: route.Shed, Remaining: 2, Drawn: -1, Chosen: -1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "planned shed while a target has headroom: a draw landing there is waived and routed",
			ws:   w, shed: shed(0, 0.5, 0.5), live: []route.Signal{full, ok},
			req:  route.Request{Priority: weights.Standard, Draw: 700, Uniform: 0.2},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 1, Slot: 700, Chosen: 1, SteeredFrom: -1, Keep: 1, Waived: 0.5},
		},
		{
			name: "a sheddable draw landing on a target meeting its TTFT target is not waived while standard is shed",
			ws:   w, shed: shed(0, 0.5, 1), live: []route.Signal{late, ok},
			req:  route.Request{Priority: weights.Sheddable, Draw: 700, Uniform: 0.2},
			want: route.Decision{Outcome: route.Shed, Remaining: 2, Drawn: -1, Chosen: -1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "a standard draw landing there is waived: the room goes to the more important priority",
			ws:   w, shed: shed(0, 0.5, 1), live: []route.Signal{late, ok},
			req:  route.Request{Priority: weights.Standard, Draw: 700, Uniform: 0.2},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 1, Slot: 700, Chosen: 1, SteeredFrom: -1, Keep: 1, Waived: 0.5},
		},
		{
			name: "a sheddable draw is waived when only sheddable is planned to be shed",
			ws:   w, shed: shed(0, 0, 1), live: []route.Signal{late, ok},
			req:  route.Request{Priority: weights.Sheddable, Draw: 700, Uniform: 0.2},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 1, Slot: 700, Chosen: 1, SteeredFrom: -1, Keep: 1, Waived: 1},
		},
		{
			name: "a sheddable draw is waived while standard is shed if no target is overloaded",
			ws:   w, shed: shed(0, 0.5, 1), live: []route.Signal{ok, ok},
			req:  route.Request{Priority: weights.Sheddable, Draw: 700, Uniform: 0.2},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 1, Slot: 700, Chosen: 1, SteeredFrom: -1, Keep: 1, Waived: 1},
		},
		{
			name: "planned shed without live state is waived: no evidence of overload",
			ws:   w, shed: shed(0, 0.9, 0.9),
			req:  route.Request{Priority: weights.Sheddable, Draw: 700, Uniform: 0.1},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 1, Slot: 700, Chosen: 1, Waived: 0.9, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "a draw past the planned fraction is not shed",
			ws:   w, shed: shed(0, 0.3, 0.3), live: []route.Signal{full, full},
			req:  route.Request{Priority: weights.Standard, Draw: 5, Uniform: 0.3},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 0, Slot: 5, Chosen: 0, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "sheddable with every target saturated is 429 overloaded without a plan",
			ws:   w, live: []route.Signal{full, full},
			req:  route.Request{Priority: weights.Sheddable, Uniform: 0.99},
			want: route.Decision{Outcome: route.Overloaded, Remaining: 2, Drawn: 0 - 1, Chosen: -1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "standard with every target saturated passes: measured overload sheds sheddable first",
			ws:   w, live: []route.Signal{full, full},
			req:  route.Request{Priority: weights.Standard, Draw: 999},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 1, Slot: 999, Chosen: 1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "the planned fraction is monotone: a sheddable plan of 0 under a standard plan sheds",
			ws:   w, shed: shed(0, 0.5, 0), live: []route.Signal{full, full},
			req:  route.Request{Priority: weights.Sheddable, Uniform: 0.4},
			want: route.Decision{Outcome: route.Shed, Remaining: 2, Drawn: -1, Chosen: -1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "critical is never shed unless planned",
			ws:   w, shed: shed(0, 1, 1), live: []route.Signal{full, full},
			req:  route.Request{Priority: weights.Critical, Draw: 1},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 0, Slot: 1, Chosen: 0, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "an excluded drawn target is drawn again among the rest",
			ws:   []uint64{600, 300, 100}, live: []route.Signal{out, ok, ok},
			req:  route.Request{Priority: weights.Standard, Draw: 550},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 0, Slot: 550, Chosen: 1, Redrawn: true, RedrawSlot: 150, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "redrawn then steered (graded) off a saturated target",
			ws:   []uint64{600, 300, 100}, live: []route.Signal{out, full, ok},
			req:  route.Request{Priority: weights.Standard, Draw: 550},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 0, Slot: 550, Chosen: 2, Redrawn: true, RedrawSlot: 150, Steered: true, Keep: 0.25, SteeredFrom: 1, SteerAmong: 1, SteerSlot: 50},
		},
		{
			name: "graded: equal pressure moves nothing",
			ws:   w, live: []route.Signal{{Pressure: 2, PressureKnown: true}, {Pressure: 2, PressureKnown: true}},
			req:  route.Request{Priority: weights.Standard, Draw: 100},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 0, Slot: 100, Chosen: 0, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "graded: unknown pressure elsewhere moves nothing",
			ws:   w, live: []route.Signal{{Pressure: 3, PressureKnown: true}, {}},
			req:  route.Request{Priority: weights.Standard, Draw: 100},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 0, Slot: 100, Chosen: 0, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "no steering: the draw stands on a saturated target",
			ws:   w, live: []route.Signal{full, ok},
			req:  route.Request{Priority: weights.Standard, Draw: 100, NoSteer: true},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 0, Slot: 100, Chosen: 0, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "a weight-0 target is never chosen",
			ws:   []uint64{0, 10}, live: []route.Signal{ok, ok},
			req:  route.Request{Priority: weights.Standard, Draw: 3},
			want: route.Decision{Outcome: route.Routed, Remaining: 1, Drawn: 1, Slot: 3, Chosen: 1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "every weighted target out: a spill target takes the request, not a 503",
			ws:   []uint64{0, 10}, live: []route.Signal{ok, out},
			req:  route.Request{Priority: weights.Critical, Draw: 7},
			want: route.Decision{Outcome: route.Routed, Remaining: 1, Drawn: 1, Slot: 7, Chosen: 0, Redrawn: true, Spill: true, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "spill targets are drawn among with equal odds",
			ws:   []uint64{0, 10, 0, 0}, live: []route.Signal{ok, out, out, ok},
			req:  route.Request{Priority: weights.Standard, Draw: 5},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 1, Slot: 5, Chosen: 3, Redrawn: true, RedrawSlot: 1, Spill: true, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "every target out, spill targets included, is 503",
			ws:   []uint64{0, 10}, live: []route.Signal{out, out},
			req:  route.Request{Priority: weights.Critical},
			want: route.Decision{Outcome: route.NoCapacity, Drawn: -1, Chosen: -1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "a cell the weights give nothing is 503 whatever its spill targets",
			ws:   []uint64{0, 0}, live: []route.Signal{ok, ok},
			req:  route.Request{Priority: weights.Critical},
			want: route.Decision{Outcome: route.NoCapacity, Drawn: -1, Chosen: -1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "a tenant's fraction replaces the cell's: under it, routed though the cell's would shed",
			ws:   w, shed: shed(0, 0.5, 0.5), live: []route.Signal{late, late},
			req:  route.Request{Priority: weights.Standard, Draw: 700, Uniform: 0.2, Tenanted: true, ShedFraction: 0},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 1, Slot: 700, Chosen: 1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "a flooding tenant's fraction sheds past the cell's",
			ws:   w, shed: shed(0, 0.2, 0.2), live: []route.Signal{late, late},
			req:  route.Request{Priority: weights.Standard, Uniform: 0.5, Tenanted: true, ShedFraction: 0.6},
			want: route.Decision{Outcome: route.Shed, Remaining: 2, Drawn: -1, Chosen: -1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "measured overload without a plan refuses a tenant's part above an equal share",
			ws:   w, live: []route.Signal{late, late},
			req:  route.Request{Priority: weights.Standard, Uniform: 0.3, Tenanted: true, OverShare: 0.4},
			want: route.Decision{Outcome: route.Overloaded, OverShare: true, Remaining: 2, Drawn: -1, Chosen: -1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "a tenant's part above an equal share passes on a target meeting its TTFT target",
			ws:   w, live: []route.Signal{late, ok},
			req:  route.Request{Priority: weights.Standard, Draw: 700, Uniform: 0.3, Tenanted: true, OverShare: 0.4},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 1, Slot: 700, Chosen: 1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "a tenant's part above an equal share is refused on a target missing its TTFT target",
			ws:   w, live: []route.Signal{late, ok},
			req:  route.Request{Priority: weights.Standard, Draw: 100, Uniform: 0.3, Tenanted: true, OverShare: 0.4},
			want: route.Decision{Outcome: route.Overloaded, OverShare: true, Remaining: 2, Drawn: -1, Chosen: -1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "a critical tenant's part above an equal share passes measured overload",
			ws:   w, live: []route.Signal{late, late},
			req:  route.Request{Priority: weights.Critical, Draw: 700, Uniform: 0.3, Tenanted: true, OverShare: 0.4},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 1, Slot: 700, Chosen: 1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "every target saturated refuses a light tenant's sheddable request no more",
			ws:   w, live: []route.Signal{full, full},
			req:  route.Request{Priority: weights.Sheddable, Draw: 700, Uniform: 0.99, Tenanted: true},
			want: route.Decision{Outcome: route.Routed, Remaining: 2, Drawn: 1, Slot: 700, Chosen: 1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "every target saturated refuses a heavy tenant's sheddable request",
			ws:   w, live: []route.Signal{full, full},
			req:  route.Request{Priority: weights.Sheddable, Uniform: 0.99, Tenanted: true, Heavy: true},
			want: route.Decision{Outcome: route.Overloaded, Remaining: 2, Drawn: -1, Chosen: -1, SteeredFrom: -1, Keep: 1},
		},
		{
			name: "planned shed confirmed by the spill targets saturated",
			ws:   []uint64{0, 10}, shed: shed(0, 0.5, 0.5), live: []route.Signal{full, out},
			req:  route.Request{Priority: weights.Standard, Uniform: 0.1},
			want: route.Decision{Outcome: route.Shed, Remaining: 1, Spill: true, Drawn: -1, Chosen: -1, SteeredFrom: -1, Keep: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := route.Decide(route.NewCell(targets(tt.ws...), tt.shed), tt.live, tt.req)
			if got != tt.want {
				t.Errorf("Decide:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestDecideIsEnvoysDraw checks the draw against Envoy's rule over every
// slot: slot = draw % total, the first target whose cumulative weight
// passes the slot.
func TestDecideIsEnvoysDraw(t *testing.T) {
	ws := []uint64{3, 0, 5, 2}
	c := route.NewCell(targets(ws...), weights.ShedFractions{})
	for draw := range uint64(40) {
		slot, want := draw%10, -1
		var end uint64
		for i, w := range ws {
			end += w
			if slot < end {
				want = i
				break
			}
		}
		if d := route.Decide(c, nil, route.Request{Draw: draw}); d.Chosen != want || d.Slot != slot {
			t.Errorf("draw %d: chose %d at slot %d; want %d at %d", draw, d.Chosen, d.Slot, want, slot)
		}
	}
}

// TestGradedSteering checks the share graded steering moves over many
// draws: 1 − (1 + p_min) / (1 + p) of the chosen target's draws, to the
// targets with less pressure, by weight; none from the least pressed.
func TestGradedSteering(t *testing.T) {
	tests := []struct {
		name      string
		pressures []float64
		wantShare []float64 // of all requests, per target
	}{
		// Weights 1:1:2. Target 0 keeps 1/3 of its quarter; the moved
		// 2/3 × 1/4 go to 1 and 2 by weight (1:2), target 1 (p=1) keeps
		// (1+0)/(1+1) = 1/2 of its quarter and gives the rest to 2.
		{"three pressures", []float64{2, 1, 0}, []float64{1.0 / 12, 1.0/4*0.5 + 2.0/3/4/3, 0.5 + 2.0/3/4*2/3 + 1.0/8}},
		{"none queued", []float64{0, 0, 0}, []float64{0.25, 0.25, 0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := route.NewCell(targets(100, 100, 200), weights.ShedFractions{})
			live := make([]route.Signal, len(tt.pressures))
			for i, p := range tt.pressures {
				live[i] = route.Signal{Pressure: p, PressureKnown: true}
			}
			const n = 400000
			got := make([]float64, len(live))
			for i := range n {
				d := route.Decide(c, live, route.Request{Priority: weights.Standard, Draw: uint64(i) * 0x9e3779b97f4a7c15})
				got[d.Chosen]++
			}
			for i := range got {
				if got[i] /= n; got[i] < tt.wantShare[i]-0.01 || got[i] > tt.wantShare[i]+0.01 {
					t.Errorf("target %d got %.3f of the requests; want %.3f", i, got[i], tt.wantShare[i])
				}
			}
		})
	}
}

func BenchmarkDecide(b *testing.B) {
	c := route.NewCell(targets(500, 300, 200), shed(0, 0.1, 0.2))
	live := []route.Signal{full, ok, ok}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		route.Decide(c, live, route.Request{Priority: weights.Standard, Draw: uint64(i) * 2654435761, Uniform: 0.5})
	}
}

// TestPlannedRemoteTargetStays: the plan sends a cell to a remote cluster
// (for capacity); a closer cluster whose engines are no faster does not
// take its requests back.
func TestPlannedRemoteTargetStays(t *testing.T) {
	c := route.NewCell([]route.Target{{Weight: 10000, RTT: 0.08, Capacity: 1000}, {Weight: 0, RTT: 0.001, Capacity: 1000}}, weights.ShedFractions{})
	idle := route.Signal{TTFT: 0.05, TTFTKnown: true, Serving: 2}
	live := []route.Signal{idle, idle}
	for i := range uint64(1000) {
		if d := route.Decide(c, live, route.Request{Priority: weights.Standard, Draw: i * 0x9e3779b97f4a7c15}); d.Chosen != 0 || d.Steered || d.Balanced {
			t.Fatalf("draw %d: chose %d (steered %v, balanced %v); want the planned remote target", i, d.Chosen, d.Steered, d.Balanced)
		}
	}
}

func TestPredictTTFT(t *testing.T) {
	tests := []struct {
		name     string
		engine   float64
		awaiting int64
		rate     float64
		serving  int
		want     float64
	}{
		{"nothing awaiting: the engines' figure", 0.2, 0, 10, 4, 0.2},
		{"few awaiting: the engines' figure explains them", 0.5, 2, 10, 4, 0.5},
		{"a burst awaiting: Little's law", 0.2, 30, 10, 4, 3},
		{"no first token last interval: the replicas' rate at the engines' TTFT", 0.5, 12, 0, 2, 3},
		{"no first token, fewer awaiting than replicas: the engines' figure", 0.5, 1, 0, 2, 0.5},
		{"no first token and no replica: the engines' figure", 0.2, 30, 0, 0, 0.2},
		{"no first token and no TTFT: nothing to scale", 0, 30, 0, 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := route.PredictTTFT(tt.engine, tt.awaiting, tt.rate, tt.serving); math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("PredictTTFT(%v, %d, %v, %d) = %v; want %v", tt.engine, tt.awaiting, tt.rate, tt.serving, got, tt.want)
			}
		})
	}
}

// TestBalance: join the shortest queue. Every target not excluded or
// saturated is compared with the chosen one by when it would begin the
// request (the larger of this router's work ahead there and the engines'
// reported queue); the soonest, round trip included, takes the request
// when it is sooner. Equal loads move nothing, so the weights' shares
// stand.
func TestBalance(t *testing.T) {
	at := func(w uint64, rtt float64) route.Target { return route.Target{Weight: w, RTT: rtt, Capacity: 1000} }
	idle := route.Signal{PressureKnown: true, Serving: 2}
	busy := idle
	busy.Work, busy.Awaiting = 8000, 4 // 4 s of work over its two replicas
	half := idle
	half.Work, half.Awaiting = 4000, 2 // 2 s
	engineQueue := idle                // the engines queue 3 s of other routers' requests
	engineQueue.QueueWait = 3
	tests := []struct {
		name      string
		ts        []route.Target
		live      []route.Signal
		balanced  bool    // some draw moves
		compared  bool    // some draw compares two targets
		wantWaits string  // the waits compared when the first draw is target 0
		share0    float64 // the share of the draws target 0 keeps
	}{
		{"equal loads move nothing", []route.Target{at(500, 0.001), at(500, 0.001)}, []route.Signal{idle, idle}, false, false, "", 0.5},
		{"a burst on one cluster moves its draws to the other", []route.Target{at(500, 0.001), at(500, 0.001)}, []route.Signal{busy, idle}, true, true, "4.000 0.000", 0},
		{"the soonest of several takes it", []route.Target{at(400, 0.001), at(300, 0.001), at(300, 0.001)}, []route.Signal{busy, half, idle}, true, true, "4.000 0.000", 0},
		{"fewer of ours than replicas: one is free, nothing ahead", []route.Target{at(500, 0.001), at(500, 0.001)}, []route.Signal{{PressureKnown: true, Serving: 2, Awaiting: 1, Work: 8000}, idle}, false, false, "", 0.5},
		{"the engines' queue counts where this router sent nothing", []route.Target{at(500, 0.001), at(500, 0.001)}, []route.Signal{engineQueue, idle}, true, true, "3.000 0.000", 0},
		// Target 1 looks empty to this router, but its engines queue 5 s:
		// target 0's draws stay, and target 1's move to target 0 (4 s).
		{"the engines' queue keeps a burst off a cluster that looks empty to this router", []route.Target{at(500, 0.001), at(500, 0.001)}, []route.Signal{busy, {PressureKnown: true, Serving: 2, QueueWait: 5}}, true, true, "", 1},
		{"not farther away than the time it saves", []route.Target{at(500, 0.001), at(500, 5)}, []route.Signal{busy, idle}, false, false, "", 0.5},
		{"farther away, when it saves more than the round trip", []route.Target{at(500, 0.001), at(500, 1)}, []route.Signal{busy, idle}, true, true, "4.000 0.000", 0},
		// The weights give target 1 nothing: every draw is target 0's, and
		// all of them move.
		{"a spill target takes a burst when it is sooner", []route.Target{at(1000, 0.001), at(0, 0.001)}, []route.Signal{busy, idle}, true, true, "4.000 0.000", 0},
		// The request's own work is left out: a faster engine with nothing
		// ahead takes nothing from an idle slower one.
		{"an idle faster engine takes nothing from an idle slower one", []route.Target{at(500, 0.001), {Weight: 500, RTT: 0.001, Capacity: 2000}}, []route.Signal{idle, idle}, false, false, "", 0.5},
		{"never to a saturated cluster", []route.Target{at(500, 0.001), at(500, 0.001)}, []route.Signal{busy, {Saturated: true, PressureKnown: true, Serving: 2}}, false, false, "", 0.5},
		{"never without a capacity", []route.Target{at(500, 0.001), {Weight: 500, RTT: 0.001}}, []route.Signal{busy, idle}, false, false, "", 0.5},
		{"never without a serving replica", []route.Target{at(500, 0.001), at(500, 0.001)}, []route.Signal{busy, {PressureKnown: true}}, false, false, "", 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := route.NewCell(tt.ts, weights.ShedFractions{})
			var balanced, compared bool
			waits := ""
			counts := make([]int, len(tt.ts))
			const n = 4000
			for draw := range uint64(n) {
				d := route.Decide(c, tt.live, route.Request{Priority: weights.Standard, Draw: draw * 0x9e3779b97f4a7c15, Cost: 1000})
				if d.Outcome != route.Routed {
					t.Fatalf("draw %d: %v", draw, d.Outcome)
				}
				counts[d.Chosen]++
				balanced = balanced || d.Balanced
				compared = compared || d.Compared
				if d.Compared && d.Drawn == 0 && waits == "" {
					waits = fmt.Sprintf("%.3f %.3f", d.WaitFirst, d.WaitAlternative)
				}
				if d.Balanced && (d.Chosen != d.Alternative || d.Chosen == d.Drawn || d.BalancedFrom != d.Drawn) {
					t.Fatalf("draw %d: balanced from %d to %d, alternative %d, drawn %d", draw, d.BalancedFrom, d.Chosen, d.Alternative, d.Drawn)
				}
			}
			if balanced != tt.balanced || compared != tt.compared || waits != tt.wantWaits {
				t.Errorf("balanced %v compared %v waits %q; want %v %v %q", balanced, compared, waits, tt.balanced, tt.compared, tt.wantWaits)
			}
			if share := float64(counts[0]) / n; math.Abs(share-tt.share0) > 0.05 {
				t.Errorf("target 0 took %.3f of the draws; want about %.2f", share, tt.share0)
			}
		})
	}
}

// TestBalancePrefill: balancing does not move a request to a cluster
// whose prefill of its prompt (Signal.PrefillPerToken) loses more than
// the queue it saves, and never moves one for its prefill alone.
func TestBalancePrefill(t *testing.T) {
	ts := []route.Target{{Weight: 1000, RTT: 0.001, Capacity: 1000}, {Weight: 0, RTT: 0.001, Capacity: 1000}}
	fast := route.Signal{PressureKnown: true, Serving: 2, PrefillPerToken: 1e-4}
	busyFast := fast
	busyFast.Work, busyFast.Prompt, busyFast.Awaiting = 8000, 100000, 4 // 4 s ahead (their prefill: 5 s)
	slow := route.Signal{PressureKnown: true, Serving: 2, PrefillPerToken: 5e-4}
	unknown := slow
	unknown.PrefillPerToken = 0
	busySlow := slow
	busySlow.Work, busySlow.Prompt, busySlow.Awaiting = 8000, 100000, 4
	tests := []struct {
		name   string
		live   []route.Signal
		prompt float64
		target float64 // the TTFT target, seconds (0: none)
		moves  bool
	}{
		{"a long prompt stays: 8 s more of prefill for 4 s of queue", []route.Signal{busyFast, slow}, 20000, 0, false},
		{"a short prompt moves: 0.4 s more of prefill for 4 s of queue", []route.Signal{busyFast, slow}, 1000, 0, true},
		{"just as long either way: it stays", []route.Signal{busyFast, slow}, 10000, 0, false},
		{"the slower cluster's prefill unknown: it moves by the queue", []route.Signal{busyFast, unknown}, 20000, 0, true},
		{"the prompt unknown: it moves by the queue", []route.Signal{busyFast, slow}, 0, 0, true},
		{"to a faster cluster with a shorter queue: it moves", []route.Signal{busySlow, fast}, 20000, 0, true},
		{"never for the prefill alone: no queue, it stays on the slower", []route.Signal{slow, fast}, 20000, 0, false},
		// 5,000 tokens: 0.5 s here after 4 s of queue, 2.5 s there after none.
		{"past the target by its prefill alone there, not here: it stays", []route.Signal{busyFast, slow}, 5000, 2, false},
		{"the same without a target: it moves by the queue", []route.Signal{busyFast, slow}, 5000, 0, true},
		{"past the target by its prefill on both: it moves by the queue", []route.Signal{busyFast, slow}, 5000, 0.4, true},
		{"within the target on both: it moves by the queue", []route.Signal{busyFast, slow}, 5000, 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := route.NewCell(ts, weights.ShedFractions{})
			d := route.Decide(c, tt.live, route.Request{Priority: weights.Standard, Draw: 7, Cost: 1000, Prompt: tt.prompt, Target: tt.target})
			if d.Outcome != route.Routed || d.Drawn != 0 || d.Reached {
				t.Fatalf("decision %+v; want routed, drawn to target 0, not moved within the target", d)
			}
			if d.Balanced != tt.moves || (d.Chosen == 1) != tt.moves {
				t.Errorf("balanced %v, chosen %d; want moved %v", d.Balanced, d.Chosen, tt.moves)
			}
			// Kept for its prefill: it says so, with the prefill on both.
			if wantKept := !tt.moves && tt.live[0].Awaiting > 0; d.Kept != wantKept || wantKept && (d.Alternative != 1 || !(d.PrefillAlternative > d.PrefillFirst)) {
				t.Errorf("kept %v (alternative %d, prefill %v against %v); want kept %v", d.Kept, d.Alternative, d.PrefillAlternative, d.PrefillFirst, wantKept)
			}
		})
	}
}

// TestWaitBounds: the wait balancing takes of this router's own requests
// on a cluster is the smaller of its two bounds — their cost over the
// serving replicas' capacity, and their prompts at the cluster's
// measured prefill time per token — and the engines' queue when longer.
func TestWaitBounds(t *testing.T) {
	ts := []route.Target{{Weight: 1000, RTT: 0.001, Capacity: 1000}, {Weight: 0, RTT: 0.001, Capacity: 1000}}
	// 4 requests of 8,000 token-cost in all on 2 replicas of 1,000
	// token-cost/s: 4 s by cost.
	busy := func(prompt, perToken float64) route.Signal {
		return route.Signal{PressureKnown: true, Serving: 2, Awaiting: 4, Work: 8000, Prompt: prompt, PrefillPerToken: perToken}
	}
	other := func(queue float64) route.Signal { // the engines' queue alone
		return route.Signal{PressureKnown: true, Serving: 2, QueueWait: queue}
	}
	tests := []struct {
		name  string
		live  []route.Signal
		moves bool
		wait  float64 // the chosen target's, when compared
	}{
		{"their prefill (5 s) past the cost bound: 4 s, moves to a 3 s queue", []route.Signal{busy(100000, 1e-4), other(3)}, true, 4},
		{"long prompts: their prefill, 1 s, stays off a 3 s queue", []route.Signal{busy(20000, 1e-4), other(3)}, false, 0},
		{"long prompts: their prefill, 1 s, moves to a 0.5 s queue", []route.Signal{busy(20000, 1e-4), other(0.5)}, true, 1},
		{"the prefill speed unknown: the cost bound", []route.Signal{busy(20000, 0), other(3)}, true, 4},
		{"an infinite prefill speed: the cost bound", []route.Signal{busy(20000, math.Inf(1)), other(3)}, true, 4},
		{"the engines' queue longer than both: it", []route.Signal{func() route.Signal { s := busy(20000, 1e-4); s.QueueWait = 6; return s }(), other(3)}, true, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := route.NewCell(ts, weights.ShedFractions{})
			d := route.Decide(c, tt.live, route.Request{Priority: weights.Standard, Draw: 7, Cost: 1000, Prompt: 100})
			if d.Outcome != route.Routed || d.Drawn != 0 {
				t.Fatalf("decision %+v; want routed, drawn to target 0", d)
			}
			if d.Balanced != tt.moves || (d.Chosen == 1) != tt.moves {
				t.Fatalf("balanced %v, chosen %d; want moved %v", d.Balanced, d.Chosen, tt.moves)
			}
			if tt.moves && math.Abs(d.WaitFirst-tt.wait) > 1e-9 {
				t.Errorf("wait on the chosen target %v s; want %v s", d.WaitFirst, tt.wait)
			}
		})
	}
}

// TestPlanShedsLate pins rule 2's last test: under confirmed overload the
// plan refuses only a request predicted to begin past its TTFT target
// where it goes (wait + prefill there); one predicted in time is routed,
// the plan waived with its prediction.
func TestPlanShedsLate(t *testing.T) {
	ts := []route.Target{{Weight: 1000, RTT: 0.001, Capacity: 1000}}
	// One replica, overloaded in the SLO's terms; this router's requests
	// awaiting a first token there: 2 of 1,000 token-cost (2 s by cost)
	// and 10,000 prompt tokens (1 s at 100 µs a token).
	busy := route.Signal{Overloaded: true, PressureKnown: true, Serving: 1, Awaiting: 2, Work: 2000, Prompt: 10000, PrefillPerToken: 1e-4}
	tests := []struct {
		name   string
		live   route.Signal
		prio   weights.Priority
		prompt float64
		target float64
		want   route.Outcome
		at     float64 // WaivedAt when routed
	}{
		{"in time (1 s wait + 0.5 s prefill within 2 s): routed, the plan waived", busy, weights.Sheddable, 5000, 2, route.Routed, 1.5},
		{"late (1 s wait + 1.5 s prefill past 2 s): shed", busy, weights.Sheddable, 15000, 2, route.Shed, 0},
		{"the engines' queue makes it late: shed", func() route.Signal { s := busy; s.QueueWait = 3; return s }(), weights.Sheddable, 5000, 2, route.Shed, 0},
		{"no target: the plan stands", busy, weights.Sheddable, 5000, 0, route.Shed, 0},
		{"no prompt estimate: the plan stands", busy, weights.Sheddable, 0, 2, route.Shed, 0},
		{"no prefill speed measured: the plan stands", func() route.Signal { s := busy; s.PrefillPerToken = 0; return s }(), weights.Sheddable, 5000, 2, route.Shed, 0},
		{"saturated, sheddable, in time: refused by saturation, labelled the plan's", func() route.Signal { s := busy; s.Saturated = true; return s }(), weights.Sheddable, 5000, 2, route.Shed, 0},
		{"saturated, standard, in time: routed, the plan waived", func() route.Signal { s := busy; s.Saturated = true; return s }(), weights.Standard, 5000, 2, route.Routed, 1.5},
		// The cluster's first tokens came at 0.5 of such predictions: 2.5 s
		// predicted is 1.25 s.
		{"late by the bound, in time calibrated: routed, the plan waived", func() route.Signal { s := busy; s.FirstTokenScale = 0.5; return s }(), weights.Sheddable, 15000, 2, route.Routed, 1.25},
		{"late even calibrated: shed", func() route.Signal { s := busy; s.FirstTokenScale = 0.5; return s }(), weights.Sheddable, 35000, 2, route.Shed, 0},
		{"a calibration above 1 is not taken: shed no more than the bound says", func() route.Signal { s := busy; s.FirstTokenScale = 2; return s }(), weights.Sheddable, 5000, 2, route.Routed, 1.5},
		{"a calibration below the floor is not taken: the bound stands", func() route.Signal { s := busy; s.FirstTokenScale = 0.01; return s }(), weights.Sheddable, 15000, 2, route.Shed, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := route.NewCell(ts, shed(0, 1, 1))
			d := route.Decide(c, []route.Signal{tt.live}, route.Request{Priority: tt.prio, Draw: 7, Uniform: 0.5, Prompt: tt.prompt, Target: tt.target})
			if d.Outcome != tt.want {
				t.Fatalf("outcome %v (%+v); want %v", d.Outcome, d, tt.want)
			}
			if tt.want != route.Routed {
				return
			}
			if d.Waived != 1 || math.Abs(d.WaivedAt-tt.at) > 1e-9 {
				t.Errorf("waived %v at %v s; want 1 at %v s", d.Waived, d.WaivedAt, tt.at)
			}
			// The prediction the caller calibrates is the bound, unscaled.
			if want := 1 + tt.prompt*1e-4; math.Abs(d.FirstToken-want) > 1e-9 {
				t.Errorf("first token predicted at %v s; want %v s", d.FirstToken, want)
			}
		})
	}
}
