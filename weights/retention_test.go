package weights_test

import (
	"fmt"
	"runtime"
	"testing"
	"weak"

	"github.com/ilbproject/ilb/weights"
)

// TestOldVersionsAreCollectable: a version's lazy explanation keeps what
// it needs of the previous version (its weights and shed fractions), not
// the version itself, so each version does not keep every earlier one —
// and its flow network — alive. Every policy is checked, since each
// attaches explanations, and the optimizer the controller keeps too (its
// working memory must hold nothing of a version).
func TestOldVersionsAreCollectable(t *testing.T) {
	kept := weights.NewOptimizer()
	for i, p := range []weights.Policy{weights.Optimizer{}, kept, weights.Proportional{}, weights.RoundRobin{}, weights.Waterfall{}} {
		t.Run(fmt.Sprintf("%d-%s", i, p.Name()), func(t *testing.T) {
			in := benchWorld(t, 10, 20, 5, 5)
			var first weak.Pointer[weights.Weights]
			var prev *weights.Weights
			for i := range 20 {
				in.Previous = prev
				for k, v := range in.Demand { // versions change
					v.CostPerSecond *= 1.2
					in.Demand[k] = v
					break
				}
				w, err := p.Compute(in)
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					first = weak.Make(w)
				}
				prev = w
			}
			in.Previous = nil
			runtime.GC()
			runtime.GC()
			if first.Value() != nil {
				t.Error("the first version is still reachable from the 20th: explanations keep earlier versions alive")
			}
			if _, ok := prev.Explain(in.Config.Sources[0].Name, in.Config.Models[0].Name); !ok {
				t.Error("no explanation")
			}
			runtime.KeepAlive(prev)
		})
	}
}

// TestRetainedHeapDoesNotGrow keeps only the latest version, as the
// controller does, over 2N ticks of a mid-size fleet: the heap in use
// after 2N ticks is about the heap after N (one version and its lazy
// explanation), not twice as much.
func TestRetainedHeapDoesNotGrow(t *testing.T) {
	if testing.Short() {
		t.Skip("solves 40 ticks of a 40 × 200 × 10 fleet")
	}
	in := benchWorld(t, 40, 200, 10, 10)
	heap := func() float64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return float64(ms.HeapAlloc) / 1e6
	}
	var prev *weights.Weights
	run := func(n int) {
		for range n {
			in.Previous = prev
			for k, v := range in.Demand {
				v.CostPerSecond *= 1.03
				in.Demand[k] = v
				break
			}
			w, err := weights.Optimizer{}.Compute(in)
			if err != nil {
				t.Fatal(err)
			}
			prev = w
		}
	}
	const n = 20
	run(n)
	in.Previous = nil
	atN := heap()
	run(n)
	in.Previous = nil
	at2N := heap()
	t.Logf("heap in use after %d ticks: %.1f MB; after %d: %.1f MB", n, atN, 2*n, at2N)
	if at2N > 1.25*atN+2 {
		t.Errorf("retained heap grows with the number of ticks: %.1f MB after %d, %.1f MB after %d", atN, n, at2N, 2*n)
	}
	runtime.KeepAlive(prev)
}
