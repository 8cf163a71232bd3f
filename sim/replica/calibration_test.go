package replica

import (
	"math"
	"testing"
	"time"
)

// TestInterTokenLatency: the H100 profile decodes at 7-15 ms per token at
// low load (batch 1-8), 7-8 ms at batch 1.
func TestInterTokenLatency(t *testing.T) {
	tests := []struct {
		name     string
		batch    int
		min, max time.Duration
	}{
		{"batch 1", 1, 7 * time.Millisecond, 8 * time.Millisecond},
		{"batch 2", 2, 7 * time.Millisecond, 15 * time.Millisecond},
		{"batch 4", 4, 7 * time.Millisecond, 15 * time.Millisecond},
		{"batch 8", 8, 7 * time.Millisecond, 15 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReplica(t, Options{Profile: mustProfile(t, ProfileLlama3x8BH100)})
			for i := range tt.batch {
				r.Submit(0, Request{ID: uint64(i), Prompt: 1155, Output: 211})
			}
			res := r.Advance(math.MaxInt64, nil)
			if len(res) != tt.batch {
				t.Fatalf("%d results, want %d", len(res), tt.batch)
			}
			for _, x := range res {
				itl := (x.Done - x.FirstToken) / time.Duration(x.Output-1)
				if itl < tt.min || itl > tt.max {
					t.Errorf("request %d: ITL %v, want in [%v, %v]", x.ID, itl, tt.min, tt.max)
				}
			}
		})
	}
}

// TestHockeyStick feeds Poisson arrivals of Azure-conversation sizes at
// increasing rates: TTFT stays low below the knee and explodes past it;
// throughput follows the offered rate up to 16 req/s and saturates
// between 16 and 20 req/s.
func TestHockeyStick(t *testing.T) {
	const d = 10 * time.Minute
	rates := []float64{2, 8, 14, 16, 18, 20, 22, 26}
	sources := []struct {
		name string
		size func(testing.TB) sizer
	}{
		{"lognormal approximation", func(testing.TB) sizer { return lognormalSizes() }},
		{"Azure conversation trace", traceSizes},
	}
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			t.Parallel()
			size := src.size(t)
			p := mustProfile(t, ProfileLlama3x8BH100)
			stats := map[float64]loadStats{}
			for _, rate := range rates {
				st := openLoop(t, Options{Profile: p}, rate, d, size, 7)
				t.Logf("rate %4.0f: %v", rate, st)
				stats[rate] = st
				switch {
				case rate <= 16:
					if st.throughput < 0.95*st.offered {
						t.Errorf("rate %v: throughput %.1f/s does not follow the offered %.1f/s below the knee", rate, st.throughput, st.offered)
					}
					if st.p99 > time.Second {
						t.Errorf("rate %v: TTFT p99 %v, want < 1s below the knee", rate, st.p99)
					}
				case rate >= 20:
					if st.throughput > 0.95*st.offered {
						t.Errorf("rate %v: throughput %.1f/s still follows the offered %.1f/s past the knee", rate, st.throughput, st.offered)
					}
					if st.p99 < 10*time.Second {
						t.Errorf("rate %v: TTFT p99 %v, want > 10s past the knee (queue growing)", rate, st.p99)
					}
				}
			}
			if c := stats[26].throughput; c < 16 || c > 20 {
				t.Errorf("saturation throughput %.1f req/s, want the knee in [16, 20]", c)
			}
			if lo, hi := stats[14].p99, stats[22].p99; hi < 20*lo {
				t.Errorf("TTFT p99 %v at 14 req/s vs %v at 22 req/s: no hockey stick", lo, hi)
			}
			for i := 1; i < len(rates); i++ {
				if rates[i] >= 18 && stats[rates[i]].p99 < stats[rates[i-1]].p99 {
					t.Errorf("TTFT p99 falls from %v to %v between %v and %v req/s", stats[rates[i-1]].p99, stats[rates[i]].p99, rates[i-1], rates[i])
				}
			}
		})
	}
}

// TestProfileAnchors checks the calibration anchors of the shipped
// profiles.
func TestProfileAnchors(t *testing.T) {
	h100 := mustProfile(t, ProfileLlama3x8BH100)
	a100 := mustProfile(t, ProfileLlama3x8BA100)
	b1 := func(p Profile) time.Duration { return p.StepTime(1, 1300) } // batch-1 decode
	pf := func(p Profile) time.Duration {                              // TTFT of a lone 1155-token prompt
		var d time.Duration
		for left := 1155; left > 0; left -= p.withDefaults().MaxBatchedTokens {
			d += p.StepTime(min(left, p.withDefaults().MaxBatchedTokens), 0)
		}
		return d
	}
	ratio := func(a, b time.Duration) float64 { return float64(a) / float64(b) }
	tests := []struct {
		name     string
		got      float64
		min, max float64
	}{
		{"h100 KV bytes per token", float64(h100.KVBytesPerToken), 131072, 131072},
		{"h100 KV tokens", float64(h100.KVTokens()), 400_000, 440_000},
		{"h100 KV cache GB", float64(h100.KVCacheBytes) / 1e9, 50, 60},
		{"h100 floor ms at 128 tokens", h100.StepTime(128, 0).Seconds() * 1e3, 6, 7.5},
		{"h100 batch-1 ITL ms", b1(h100).Seconds() * 1e3, 7, 8},
		{"h100 us per extra token", float64(h100.StepTime(1128, 0)-h100.StepTime(128, 0)) / 1e3 / 1000, 20, 22},
		{"a100/h100 batch-1 ITL", ratio(b1(a100), b1(h100)), 1.6, 2},
		{"a100/h100 prefill 1155 tokens", ratio(pf(a100), pf(h100)), 1.6, 2},
		{"70b tp4 batch-1 ITL ms", b1(mustProfile(t, ProfileLlama3x70BH100TP4)).Seconds() * 1e3, 12, 25},
		{"70b tp4 KV bytes per token", float64(mustProfile(t, ProfileLlama3x70BH100TP4).KVBytesPerToken), 327680, 327680},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got < tt.min || tt.got > tt.max {
				t.Errorf("%s = %.4g, want in [%.4g, %.4g]", tt.name, tt.got, tt.min, tt.max)
			}
		})
	}
}
