package signals

import (
	"math"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// oneVLLM is a harness watching one fake vLLM replica.
func oneVLLM(t *testing.T, signals string) (*harness, *fakeReplica) {
	t.Helper()
	f := newFakeReplica(t, "vllm.txt")
	c := testConfig(t, staticCluster("c1", f.addr()), signals)
	return newHarness(t, Options{Config: c}), f
}

func TestStaticEndpointStartsThenReadyOnFirstRound(t *testing.T) {
	h, f := oneVLLM(t, baseSignals)
	r := h.wantState(f.addr(), StateStarting)
	if r.Reason != "configured endpoint" || r.Ramp != 0 {
		t.Errorf("before the first round: %+v", r)
	}
	s := h.step(0)
	r = h.wantState(f.addr(), StateReady)
	if r.Reason != "healthy on the first probe round" || r.Ramp != 1 || !r.LastScrape.Equal(h.clock.Now()) || r.LastError != "" {
		t.Errorf("after the first round: %+v", r)
	}
	want := Metrics{
		Waiting: 3, Running: 17, KVUsage: 0.4212, KVKnown: true,
		PromptTokens: 1484567, GenerationTokens: 555554, Models: []string{qwen, llama},
	}
	if !reflect.DeepEqual(r.Metrics, want) {
		t.Errorf("metrics %+v, want %+v", r.Metrics, want)
	}
	c := s.Clusters["c1"]
	if c.Ready != 1 || c.Waiting != 3 || c.Running != 17 || c.KVUsage != 0.4212 || !c.KVKnown || c.Saturated || !c.OldestScrape.Equal(h.clock.Now()) {
		t.Errorf("cluster %+v", c)
	}
	if len(r.Transitions) != 1 || r.Transitions[0].From != StateStarting || r.Transitions[0].To != StateReady {
		t.Errorf("transitions %+v", r.Transitions)
	}
}

func TestUnhealthyAfterTwoFailedProbes(t *testing.T) {
	h, f := oneVLLM(t, baseSignals)
	h.step(0)
	f.set(answer500, answerOK, nil)
	h.step(time.Second)
	r := h.wantState(f.addr(), StateReady) // one failure is not enough
	if r.LastError != "health probe: HTTP 500" {
		t.Errorf("last error %q", r.LastError)
	}
	before := f.healthProbes()
	h.step(50 * time.Millisecond) // the retry is due after RetryDelay (100ms), not before
	if after := f.healthProbes(); after != before {
		t.Errorf("probed again %v after a failure; want after the 100ms retry delay", 50*time.Millisecond)
	}
	h.step(50 * time.Millisecond)
	r = h.wantState(f.addr(), StateUnhealthy)
	if r.Reason != "health probe: HTTP 500 (2 in a row)" || r.Ramp != 0 {
		t.Errorf("unhealthy: %+v", r)
	}
	if c := h.m.Snapshot().Clusters["c1"]; c.Unhealthy != 1 || c.Ready != 0 || c.Waiting != 0 {
		t.Errorf("cluster %+v", c)
	}
}

// TestHealthProbeTimeout: a replica whose probes time out (a silent
// failure) is unhealthy once its streak has lasted the blind window (two
// intervals) and the monitor is not blind; one that refuses (definite)
// after UnhealthyAfter failures (TestConnectionRefusedReason).
func TestHealthProbeTimeout(t *testing.T) {
	h, f := oneVLLM(t, baseSignals)
	h.step(0)
	f.set(answerHang, answerOK, nil)
	h.step(time.Second) // t=1s: first timeout, the streak begins
	h.wantState(f.addr(), StateReady)
	h.step(100 * time.Millisecond) // 1.1s: second, held for the window
	if r := h.wantState(f.addr(), StateReady); r.LastError != "health probe: timeout after 300ms" {
		t.Errorf("last error %q", r.LastError)
	}
	h.step(time.Second) // 2.1s: third
	h.wantState(f.addr(), StateReady)
	h.step(899 * time.Millisecond) // 2.999s: not yet two intervals
	h.wantState(f.addr(), StateReady)
	h.step(time.Millisecond) // 3s
	if r := h.wantState(f.addr(), StateUnhealthy); r.Reason != "health probe: timeout after 300ms (3 in a row)" {
		t.Errorf("reason %q", r.Reason)
	}
	if b := h.m.Snapshot().Blind; b != nil {
		t.Errorf("one cluster cannot make the monitor blind: %+v", b)
	}
}

func TestConnectionRefusedReason(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := testConfig(t, staticCluster("c1", addr), baseSignals)
	h := newHarness(t, Options{Config: c})
	h.step(0)
	h.wantState(addr, StateStarting)
	h.step(100 * time.Millisecond)
	r := h.wantState(addr, StateUnhealthy)
	if !strings.HasPrefix(r.Reason, "health probe: dial tcp "+addr+": connect: connection refused") || !strings.HasSuffix(r.Reason, "(2 in a row)") {
		t.Errorf("reason %q", r.Reason)
	}
}

func TestRecoveryThroughWarming(t *testing.T) {
	h, f := oneVLLM(t, baseSignals)
	h.step(0)
	f.set(answer500, answerOK, nil)
	h.step(time.Second)
	h.step(100 * time.Millisecond)
	h.wantState(f.addr(), StateUnhealthy)

	f.set(answerOK, answerOK, nil)
	h.step(time.Second) // unhealthy replicas are probed every interval
	h.wantState(f.addr(), StateUnhealthy)
	h.step(time.Second)
	r := h.wantState(f.addr(), StateWarming)
	if r.Reason != "recovered: 2 health probes ok in a row" || r.Ramp != 0.1 {
		t.Errorf("warming: %+v", r)
	}
	prev := r.Ramp
	for i := 1; i < 10; i++ {
		s := h.step(time.Second)
		r = h.wantState(f.addr(), StateWarming)
		want := 0.1 + 0.9*float64(i)/10
		if diff := r.Ramp - want; r.Ramp <= prev || diff > 1e-9 || diff < -1e-9 {
			t.Fatalf("after %ds: ramp %v, want %v", i, r.Ramp, want)
		}
		prev = r.Ramp
		if c := s.Clusters["c1"]; c.Warming != 1 || len(c.Ramps) != 1 || c.Ramps[0] != r.Ramp {
			t.Fatalf("cluster %+v", c)
		}
		st := s.ClusterStates(h.m.cfg)["c1"]
		if d := st.Capacity - 100*r.Ramp; d > 1e-9 || d < -1e-9 {
			t.Fatalf("capacity %v with ramp %v", st.Capacity, r.Ramp)
		}
	}
	h.step(time.Second)
	r = h.wantState(f.addr(), StateReady)
	if r.Reason != "warmup done" || r.Ramp != 1 {
		t.Errorf("ready: %+v", r)
	}
	var path []State
	for _, tr := range r.Transitions {
		path = append(path, tr.To)
	}
	if want := []State{StateReady, StateUnhealthy, StateWarming, StateReady}; !reflect.DeepEqual(path, want) {
		t.Errorf("transitions %v, want %v", path, want)
	}
}

func TestNoWarmupMeansReady(t *testing.T) {
	h, f := oneVLLM(t, `  {interval: 1s, timeout: 300ms, retry_delay: 100ms, warmup: 0s}`)
	h.step(0)
	f.set(answer500, answerOK, nil)
	h.step(time.Second)
	h.step(100 * time.Millisecond)
	f.set(answerOK, answerOK, nil)
	h.step(time.Second)
	h.step(time.Second)
	if r := h.wantState(f.addr(), StateReady); r.Reason != "recovered: 2 health probes ok in a row" {
		t.Errorf("reason %q", r.Reason)
	}
}

func TestStaleWhenAliveWithoutGoodMetrics(t *testing.T) {
	tests := []struct {
		name      string
		answer    string
		body      string
		lastError string
	}{
		{"garbage", answerOK, "garbage.txt", "metrics: parse error at line 1: invalid metric name"},
		{"truncated", answerOK, "truncated.txt", "metrics: parse error at line 25: unexpected end of input stream"},
		{"500", answer500, "", "metrics: HTTP 500"},
		{"hang past the timeout", answerHang, "", "metrics: timeout after 300ms"},
		{"huge body", answerHuge, "", "metrics: metrics body over 65536 bytes"},
		{"missing metric", answerOK, "missing_metric.txt", "metrics unusable: vllm:num_requests_running missing; vllm:generation_tokens_total missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, f := oneVLLM(t, `  {interval: 1s, timeout: 300ms, retry_delay: 100ms, stale_after: 3, max_body_bytes: 65536}`)
			h.step(0)
			var body []byte
			if tt.body != "" {
				body = readFixture(t, tt.body)
			}
			f.set(answerOK, tt.answer, body)
			for i := 1; i <= 2; i++ {
				h.step(time.Second)
				r := h.wantState(f.addr(), StateReady)
				if r.LastError != tt.lastError || !reflect.DeepEqual(r.Metrics.Problems, problemsOf(tt.lastError)) {
					t.Fatalf("after %d bad scrapes: last error %q, problems %q; want %q", i, r.LastError, r.Metrics.Problems, tt.lastError)
				}
				if r.Metrics.Running != 17 { // the last good values stay, aged by LastScrape
					t.Fatalf("running %v", r.Metrics.Running)
				}
			}
			s := h.step(time.Second)
			r := h.wantState(f.addr(), StateStale)
			if r.Reason != "no good metrics for 3 intervals: "+tt.lastError || r.Ramp != 1 || r.Saturated {
				t.Errorf("stale: %+v", r)
			}
			if c := s.Clusters["c1"]; c.Stale != 1 || c.Running != 0 || c.KVKnown || c.Saturated {
				t.Errorf("cluster %+v", c)
			}
			if st := s.ClusterStates(h.m.cfg)["c1"]; st.Capacity != 100 || st.Ready != 1 {
				t.Errorf("a stale replica counts as capacity: %+v", st)
			}

			f.set(answerOK, answerOK, readFixture(t, "vllm.txt"))
			h.step(time.Second)
			if r := h.wantState(f.addr(), StateReady); r.Reason != "metrics back" || r.LastError != "" || r.Metrics.Problems != nil {
				t.Errorf("back: %+v", r)
			}
		})
	}
}

// problemsOf is the Problems a scrape with this last error leaves.
func problemsOf(lastError string) []string {
	if rest, ok := strings.CutPrefix(lastError, "metrics unusable: "); ok {
		return strings.Split(rest, "; ")
	}
	return []string{lastError}
}

func TestTokensPerSecondAndCounterReset(t *testing.T) {
	h, f := oneVLLM(t, baseSignals)
	body := func(prompt, gen float64) []byte {
		return []byte(strings.Join([]string{
			"vllm:num_requests_waiting 0", "vllm:num_requests_running 1", "vllm:kv_cache_usage_perc 0.1",
			"vllm:prompt_tokens_total " + fmtFloat(prompt), "vllm:generation_tokens_total " + fmtFloat(gen), "",
		}, "\n"))
	}
	f.set(answerOK, answerOK, body(1000, 100))
	h.step(0)
	if r := h.replica(f.addr()); r.Metrics.TokensPerSecond != 0 {
		t.Errorf("rate after one scrape: %v, want 0 (unknown)", r.Metrics.TokensPerSecond)
	}
	f.set(answerOK, answerOK, body(3000, 600))
	h.step(2 * time.Second)
	if r := h.replica(f.addr()); r.Metrics.TokensPerSecond != 1250 {
		t.Errorf("rate %v, want (2000+500)/2s = 1250", r.Metrics.TokensPerSecond)
	}
	f.set(answerOK, answerOK, body(150, 50)) // the engine restarted
	h.step(time.Second)
	if r := h.replica(f.addr()); r.Metrics.TokensPerSecond != 200 {
		t.Errorf("rate after a reset %v, want 200/1s", r.Metrics.TokensPerSecond)
	}
	if c := h.m.Snapshot().Clusters["c1"]; c.TokensPerSecond != 200 {
		t.Errorf("cluster rate %v", c.TokensPerSecond)
	}
}

func TestJitterIsBoundedAndDeterministic(t *testing.T) {
	lo, hi := 1.0, -1.0
	for n := range uint64(10000) {
		j := defaultJitter("10.0.0.1:8000", n)
		lo, hi = min(lo, j), max(hi, j)
		if j != defaultJitter("10.0.0.1:8000", n) {
			t.Fatal("not deterministic")
		}
	}
	if lo < -0.1 || hi >= 0.1 || lo > -0.09 || hi < 0.09 {
		t.Errorf("jitter range [%v, %v], want about [-0.1, 0.1)", lo, hi)
	}
}

func TestTokenAndTTFTRates(t *testing.T) {
	h, f := oneVLLM(t, baseSignals)
	// The TTFT histogram: requests in total, and within 1 s and 2.5 s.
	// The default target is 2 s: the 2.5 s bucket straddles it, and two
	// thirds of its observations count as within (interpolated, as
	// histogram_quantile does).
	body := func(prompt, gen, within1, within2p5, count float64) []byte {
		return []byte(strings.Join([]string{
			"vllm:num_requests_waiting 0", "vllm:num_requests_running 1", "vllm:kv_cache_usage_perc 0.1",
			"vllm:prompt_tokens_total " + fmtFloat(prompt), "vllm:generation_tokens_total " + fmtFloat(gen),
			"# TYPE vllm:time_to_first_token_seconds histogram",
			`vllm:time_to_first_token_seconds_bucket{le="1.0"} ` + fmtFloat(within1),
			`vllm:time_to_first_token_seconds_bucket{le="2.5"} ` + fmtFloat(within2p5),
			`vllm:time_to_first_token_seconds_bucket{le="+Inf"} ` + fmtFloat(count),
			"vllm:time_to_first_token_seconds_sum 10",
			"vllm:time_to_first_token_seconds_count " + fmtFloat(count), "",
		}, "\n"))
	}
	f.set(answerOK, answerOK, body(1000, 100, 10, 13, 13))
	h.step(0)
	if r := h.replica(f.addr()); r.Metrics.RatesKnown || r.Metrics.TTFTKnown {
		t.Errorf("rates known after one scrape: %+v", r.Metrics)
	}
	f.set(answerOK, answerOK, body(3000, 600, 40, 46, 51))
	h.step(2 * time.Second)
	r := h.replica(f.addr())
	if m := r.Metrics; !m.RatesKnown || m.PromptTokensPerSecond != 1000 || m.GenerationTokensPerSecond != 250 {
		t.Errorf("token rates %+v; want 2000/2s prompt, 500/2s generation", m)
	}
	// 38 first tokens in 2 s; within 2 s: 12 then 44 (10 + 3 × 2/3, 40 +
	// 6 × 2/3), 32 of them: 6 slow.
	if m := r.Metrics; !m.TTFTKnown || m.FirstTokensPerSecond != 19 || math.Abs(m.SlowFirstTokensPerSecond-3) > 1e-9 {
		t.Errorf("TTFT rates %+v; want 19/s, 3/s slow", m)
	}
	c := h.m.Snapshot().Clusters["c1"]
	if c.TTFTKnown != 1 || c.FirstTokensPerSecond != 19 || math.Abs(c.SlowFirstTokensPerSecond-3) > 1e-9 || c.RatesKnown != 1 || c.PromptTokensPerSecond != 1000 {
		t.Errorf("cluster %+v", c)
	}
	// A histogram that lies (a bucket above the count) is unknown, with a
	// problem, not a number.
	f.set(answerOK, answerOK, body(4000, 700, 90, 95, 60))
	h.step(time.Second)
	r = h.replica(f.addr())
	if r.Metrics.TTFTKnown || !slices.ContainsFunc(r.Metrics.Problems, func(p string) bool { return strings.Contains(p, "TTFT unknown") }) {
		t.Errorf("metrics %+v; want TTFT unknown with a problem", r.Metrics)
	}
}

func TestTTFTNow(t *testing.T) {
	tests := []struct {
		name                string
		mean, waiting, rate float64
		want                float64
	}{
		{"no queue: the measured mean", 0.3, 0, 20, 0.3},
		{"a queue: waiting over the first-token rate", 0.3, 40, 20, 2},
		{"a queue and no first token: one a second", 0.3, 5, 0, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TTFTNow(tt.mean, tt.waiting, tt.rate); got != tt.want {
				t.Errorf("TTFTNow(%v, %v, %v) = %v; want %v", tt.mean, tt.waiting, tt.rate, got, tt.want)
			}
		})
	}
}

func TestHistogramWithin(t *testing.T) {
	bucket := func(ub float64, c uint64) *dto.Bucket { return &dto.Bucket{UpperBound: &ub, CumulativeCount: &c} }
	count := uint64(50)
	// Out of order, as a registry may list them.
	h := &dto.Histogram{SampleCount: &count, Bucket: []*dto.Bucket{bucket(2.5, 44), bucket(1, 40), bucket(0.5, 30), bucket(math.Inf(1), 50)}}
	bad := &dto.Histogram{SampleCount: &count, Bucket: []*dto.Bucket{bucket(1, 40), bucket(2.5, 30)}}
	tests := []struct {
		name   string
		h      *dto.Histogram
		target float64
		within float64
		ok     bool
	}{
		{"the straddling bucket interpolated: 40 + 4 × (2 − 1) / (2.5 − 1)", h, 2, 40 + 4*2.0/3, true},
		{"a target on a bound: its count", h, 1, 40, true},
		{"no finite bound above the target: the count at the bound below", h, 3, 44, true},
		{"no bound at or below the target: unknown", h, 0.1, 0, false},
		{"a bucket below the one under it: unknown", bad, 2, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, w, ok := histogramWithin(tt.h, tt.target)
			if ok != tt.ok || ok && (c != 50 || math.Abs(w-tt.within) > 1e-9) {
				t.Errorf("histogramWithin(%v) = %v, %v, %v; want 50, %v, %v", tt.target, c, w, ok, tt.within, tt.ok)
			}
		})
	}
}
