package demand_test

import (
	"math"
	"sync"
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/weights"
)

// limits is a model of context 10,000 tokens and output 2,000, prompt
// tokens costing 1 and output 4, with ext_proc's defaults of 500 and 250:
// an ordinary request costs 500 + 4×250 = 1,500.
func limits() demand.Limits {
	return demand.NewLimits(config.ExtProc{DefaultPromptTokens: 500, DefaultOutputTokens: 250},
		config.Model{Name: "m", ContextTokens: 10_000, MaxOutputTokens: 2_000, PromptTokenCost: 1, OutputTokenCost: 4})
}

func TestEstimate(t *testing.T) {
	l := limits()
	if l.Ordinary != 1500 {
		t.Fatalf("ordinary %v; want 1500", l.Ordinary)
	}
	tests := []struct {
		name             string
		prompt           float64
		known            bool
		maxTokens        int
		cost, wantPrompt float64
	}{
		{"nothing known: an ordinary request", 0, false, 0, 1500, 500},
		{"prompt known, default output", 2000, true, 0, 3000, 2000},
		{"max_tokens", 100, true, 10, 140, 100},
		{"max_tokens over max_output_tokens", 100, true, 50_000, 100 + 4*2000, 100},
		{"output bounded by what the context leaves", 9_900, true, 1000, 9_900 + 4*100, 9_900},
		{"prompt over the context", 50_000, true, 0, 10_000 + 4, 10_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cost, prompt := l.Estimate(tt.prompt, tt.known, tt.maxTokens)
			if cost != tt.cost || prompt != tt.wantPrompt {
				t.Fatalf("cost %v, prompt %v; want %v, %v", cost, prompt, tt.cost, tt.wantPrompt)
			}
		})
	}
}

func TestBooking(t *testing.T) {
	l := limits()
	tests := []struct {
		name                      string
		cost, typical             float64
		provisional, refused      float64
		booked, prompt, generated float64
		served                    float64
	}{
		{"small request: whole at the decision", 800, 0, 800, 800, 800, 300, 100, 800},
		{"large claim, nothing learned: an ordinary share", 9000, 0, 1500, 1500, 1500, 1000, 2000, 9000},
		{"large claim, long-prompt stream: its typical share", 9000, 6000, 6000, 6000, 6000, 5000, 10, 6000},
		{"refused small request counts as a typical one", 800, 6000, 800, 6000, 800, 300, 100, 800},
		{"served less than booked: booking never goes back", 9000, 0, 1500, 1500, 1500, 100, 10, 1500},
		{"served more than claimed: capped at the estimate", 3000, 0, 1500, 1500, 1500, 2000, 2000, 3000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := l.Provisional(tt.cost, tt.typical); got != tt.provisional {
				t.Errorf("provisional %v; want %v", got, tt.provisional)
			}
			if got := l.Refused(tt.cost, tt.typical); got != tt.refused {
				t.Errorf("refused %v; want %v", got, tt.refused)
			}
			if got := l.Served(tt.cost, tt.booked, tt.prompt, tt.generated); got != tt.served {
				t.Errorf("served %v; want %v", got, tt.served)
			}
		})
	}
}

func TestTypical(t *testing.T) {
	k := weights.DemandKey{Source: "s", Model: "m", Priority: weights.Standard}
	other := weights.DemandKey{Source: "s", Model: "m", Priority: weights.Sheddable}
	ty := demand.NewTypical()
	if got := ty.Of(k); got != 0 {
		t.Fatalf("nothing learned: %v; want 0", got)
	}
	for _, c := range []float64{100, 300, math.NaN(), math.Inf(1), -5} {
		ty.Observe(k, c)
	}
	if got := ty.Of(k); got != 200 {
		t.Fatalf("after 100 and 300 (and invalid values): %v; want 200", got)
	}
	// The mean follows the last TypicalWindow requests: after many at
	// 1,000 it is close to 1,000, whatever came first.
	for range 10 * demand.TypicalWindow {
		ty.Observe(k, 1000)
	}
	if got := ty.Of(k); math.Abs(got-1000) > 1 {
		t.Fatalf("after %d requests at 1,000: %v", 10*demand.TypicalWindow, got)
	}
	if got := ty.Of(other); got != 0 {
		t.Fatalf("another stream learned %v; want 0", got)
	}
	var nilTypical *demand.Typical
	if got := nilTypical.Of(k); got != 0 {
		t.Fatalf("nil: %v", got)
	}
}

// TestTypicalConcurrent is for the race detector: observers and readers
// of many streams at once.
func TestTypicalConcurrent(t *testing.T) {
	ty := demand.NewTypical()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				k := weights.DemandKey{Source: "s", Model: string(rune('a' + i%5)), Priority: weights.Priorities[g%len(weights.Priorities)]}
				ty.Observe(k, float64(i))
				_ = ty.Of(k)
			}
		})
	}
	wg.Wait()
	if got := ty.Of(weights.DemandKey{Source: "s", Model: "a", Priority: weights.Priorities[0]}); !(got > 0) {
		t.Fatalf("learned %v; want > 0", got)
	}
}
