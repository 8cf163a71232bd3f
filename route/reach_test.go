package route_test

import (
	"math"
	"testing"

	"github.com/ilbproject/ilb/route"
	"github.com/ilbproject/ilb/weights"
)

// TestReach: a request the drawn cluster cannot serve within the TTFT
// target (its wait + its prompt's prefill there) moves to a cluster that
// can, and only then.
func TestReach(t *testing.T) {
	// Target 0 takes every draw; 1 and 2 have no weight (spill targets)
	// unless a case gives them some.
	at := func(w uint64) route.Target { return route.Target{Weight: w, RTT: 0.001, Capacity: 1000} }
	slow := route.Signal{PressureKnown: true, Serving: 2, PrefillPerToken: 5e-5} // an A100: 60k tokens in 3 s
	fast := route.Signal{PressureKnown: true, Serving: 2, PrefillPerToken: 2.5e-5}
	queuedFast := fast
	queuedFast.QueueWait = 1 // 1 s + 1.5 s: past the target
	slightlyQueuedFast := fast
	slightlyQueuedFast.QueueWait = 0.2 // 0.2 + 1.5 s: within it
	unknown := fast
	unknown.PrefillPerToken = 0
	saturated, overloaded, excluded := fast, fast, fast
	saturated.Saturated = true
	overloaded.Overloaded = true
	excluded.Excluded = true
	infinite := slow
	infinite.PrefillPerToken = math.Inf(1)
	nanWork := slow
	nanWork.Work, nanWork.Awaiting = math.NaN(), 2
	farQueued := fast
	farQueued.QueueWait = 0.875 // 0.875 + 1.025 s
	pressed := fast
	pressed.Pressure = 2
	tests := []struct {
		name    string
		ts      []route.Target
		live    []route.Signal
		prompt  float64
		target  float64
		want    int     // the target chosen
		firstAt float64 // when moved: the prediction on the drawn target
		reachAt float64 // and on the chosen one
	}{
		{"a long prompt leaves a slower GPU it would miss the target on", []route.Target{at(1000), at(0)}, []route.Signal{slow, fast}, 60000, 2, 1, 3, 1.5},
		{"a shorter prompt stays: within the target where it was drawn", []route.Target{at(1000), at(0)}, []route.Signal{slow, fast}, 30000, 2, 0, 0, 0},
		{"a prompt no cluster can serve within the target stays", []route.Target{at(1000), at(0)}, []route.Signal{slow, fast}, 100000, 2, 0, 0, 0},
		{"no target: nothing moves", []route.Target{at(1000), at(0)}, []route.Signal{slow, fast}, 60000, 0, 0, 0, 0},
		{"a prompt of unknown size stays", []route.Target{at(1000), at(0)}, []route.Signal{slow, fast}, 0, 2, 0, 0, 0},
		{"the faster cluster's queue counts: past the target there too, it stays", []route.Target{at(1000), at(0)}, []route.Signal{slow, queuedFast}, 60000, 2, 0, 0, 0},
		{"a queue short enough leaves it within the target: it moves", []route.Target{at(1000), at(0)}, []route.Signal{slow, slightlyQueuedFast}, 60000, 2, 1, 3, 1.7},
		{"never to a saturated cluster", []route.Target{at(1000), at(0)}, []route.Signal{slow, saturated}, 60000, 2, 0, 0, 0},
		{"never to an overloaded cluster", []route.Target{at(1000), at(0)}, []route.Signal{slow, overloaded}, 60000, 2, 0, 0, 0},
		{"never to an excluded cluster", []route.Target{at(1000), at(0)}, []route.Signal{slow, excluded}, 60000, 2, 0, 0, 0},
		{"never on an unknown prefill speed", []route.Target{at(1000), at(0)}, []route.Signal{slow, unknown}, 60000, 2, 0, 0, 0},
		{"never on an infinite prefill speed", []route.Target{at(1000), at(0)}, []route.Signal{infinite, fast}, 60000, 2, 0, 0, 0},
		{"never without a capacity to tell the wait", []route.Target{at(1000), {Weight: 0, RTT: 0.001}}, []route.Signal{slow, fast}, 60000, 2, 0, 0, 0},
		// Of two that can, the one with weight takes it (drawn by weight).
		{"drawn by weight among those within the target", []route.Target{at(1000), at(0), at(500)}, []route.Signal{slow, fast, fast}, 60000, 2, 2, 3, 1.5},
		{"an unknown wait (NaN work) moves nothing", []route.Target{at(1000), at(0)}, []route.Signal{nanWork, fast}, 60000, 2, 0, 0, 0},
		// 2.05 s here, 1.9 s at a cluster 300 ms away: within the target
		// there, but later for the client.
		{"not farther away for a later first token", []route.Target{at(1000), {Weight: 0, RTT: 0.3, Capacity: 1000}}, []route.Signal{slow, farQueued}, 41000, 2, 0, 0, 0},
		{"farther away when sooner, round trip included", []route.Target{at(1000), {Weight: 0, RTT: 0.3, Capacity: 1000}}, []route.Signal{slow, fast}, 41000, 2, 1, 2.05, 1.025},
		// Moved to a cluster whose engines give no TTFT and more queue
		// pressure: graded steering would send it back.
		{"graded steering does not take it back", []route.Target{at(1000), at(0)}, []route.Signal{slow, pressed}, 60000, 2, 1, 3, 1.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := route.NewCell(tt.ts, weights.ShedFractions{})
			d := route.Decide(c, tt.live, route.Request{Priority: weights.Standard, Draw: 7, Cost: 1000, Prompt: tt.prompt, Target: tt.target})
			if d.Outcome != route.Routed || d.Drawn != 0 {
				t.Fatalf("decision %+v; want routed, drawn to target 0", d)
			}
			if d.Chosen != tt.want {
				t.Fatalf("chosen %d; want %d (decision %+v)", d.Chosen, tt.want, d)
			}
			moved := tt.want != 0
			if d.Reached != moved {
				t.Fatalf("reached %v; want %v", d.Reached, moved)
			}
			if moved && (d.ReachedFrom != 0 || math.Abs(d.FirstAt-tt.firstAt) > 1e-9 || math.Abs(d.ReachAt-tt.reachAt) > 1e-9 || d.ReachAmong < 1) {
				t.Errorf("from %d at %v s, to %v s among %d; want from 0 at %v s, to %v s", d.ReachedFrom, d.FirstAt, d.ReachAt, d.ReachAmong, tt.firstAt, tt.reachAt)
			}
		})
	}
}

// TestReachNotWhenSteeringIsOff: extproc.steering false keeps every
// request where Envoy's draw put it.
func TestReachNotWhenSteeringIsOff(t *testing.T) {
	c := route.NewCell([]route.Target{{Weight: 1000, Capacity: 1000}, {Weight: 0, Capacity: 1000}}, weights.ShedFractions{})
	live := []route.Signal{
		{PressureKnown: true, Serving: 2, PrefillPerToken: 5e-5},
		{PressureKnown: true, Serving: 2, PrefillPerToken: 2.5e-5},
	}
	d := route.Decide(c, live, route.Request{Priority: weights.Standard, Draw: 7, Prompt: 60000, Target: 2, NoSteer: true})
	if d.Chosen != 0 || d.Reached {
		t.Fatalf("chosen %d, reached %v; want 0, not moved", d.Chosen, d.Reached)
	}
}

// TestReachAfterKept: balancing kept the request off a cluster with a
// shorter queue for its slower prefill; past the target where it was
// kept, it then moves to a cluster within it, and the decision says
// both.
func TestReachAfterKept(t *testing.T) {
	ts := []route.Target{{Weight: 1000, RTT: 0.001, Capacity: 1000}, {Weight: 0, RTT: 0.001, Capacity: 1000}, {Weight: 0, RTT: 0.001, Capacity: 1000}}
	a100 := route.Signal{PressureKnown: true, Serving: 2, PrefillPerToken: 5e-5, QueueWait: 0.5}   // 0.5 + 3 s
	slowest := route.Signal{PressureKnown: true, Serving: 2, PrefillPerToken: 1e-4}                // 0 + 6 s
	h100 := route.Signal{PressureKnown: true, Serving: 2, PrefillPerToken: 2.5e-5, QueueWait: 0.5} // 0.5 + 1.5 s
	d := route.Decide(route.NewCell(ts, weights.ShedFractions{}), []route.Signal{a100, slowest, h100}, route.Request{Priority: weights.Standard, Draw: 7, Prompt: 60000, Target: 2})
	if !d.Kept || d.Alternative != 1 || !d.Reached || d.ReachedFrom != 0 || d.Chosen != 2 {
		t.Fatalf("kept %v (alternative %d), reached %v from %d, chosen %d; want kept off 1, then moved from 0 to 2", d.Kept, d.Alternative, d.Reached, d.ReachedFrom, d.Chosen)
	}
}

// TestReachDrawsByWeight: among several clusters within the target, the
// request's draw picks by their weights.
func TestReachDrawsByWeight(t *testing.T) {
	ts := []route.Target{{Weight: 1000, Capacity: 1000}, {Weight: 100, Capacity: 1000}, {Weight: 900, Capacity: 1000}}
	slow := route.Signal{PressureKnown: true, Serving: 2, PrefillPerToken: 5e-5}
	fast := route.Signal{PressureKnown: true, Serving: 2, PrefillPerToken: 2.5e-5}
	c := route.NewCell(ts, weights.ShedFractions{})
	counts := make([]int, len(ts))
	moved := 0
	for draw := range uint64(20000) {
		d := route.Decide(c, []route.Signal{slow, fast, fast}, route.Request{Priority: weights.Standard, Draw: draw * 0x9e3779b97f4a7c15, Prompt: 60000, Target: 2})
		if d.Reached {
			moved++
			counts[d.Chosen]++
			if d.ReachAmong != 2 {
				t.Fatalf("among %d; want 2", d.ReachAmong)
			}
		}
	}
	if moved == 0 || counts[0] != 0 {
		t.Fatalf("moved %d, counts %v; want target 0's draws moved", moved, counts)
	}
	if share := float64(counts[2]) / float64(moved); math.Abs(share-0.9) > 0.02 {
		t.Errorf("target 2 took %.3f of the moved draws; want 0.9 (its weight's share)", share)
	}
}
