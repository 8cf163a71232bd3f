package workload

import (
	"math"
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestGenerateMeanRate(t *testing.T) {
	const period = 10 * time.Minute
	tests := []struct {
		name   string
		mutate func(*SourceSpec)
	}{
		{"poisson, flat", func(*SourceSpec) {}},
		{"poisson, daily sine", func(s *SourceSpec) { s.DiurnalAmplitude = 0.8 }},
		{"full swing, time zone", func(s *SourceSpec) { s.DiurnalAmplitude = 1; s.UTCOffsetHours = -7 }},
		{"bursty gamma, daily sine", func(s *SourceSpec) { s.DiurnalAmplitude = 0.5; s.GammaShape = 0.3 }},
		{"regular gamma, daily sine", func(s *SourceSpec) { s.DiurnalAmplitude = 0.5; s.GammaShape = 5 }},
		{"sessions", func(s *SourceSpec) { s.SessionShare = 0.7; s.SessionTurns = 5 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := baseSource("eu", 10)
			tt.mutate(&src)
			reqs := generate(t, Spec{Duration: 10 * period, Period: period, Seed: 7, Sources: []SourceSpec{src}})
			st := Summarize(reqs, time.Second)
			if st.Span != 10*period {
				t.Errorf("span %v, want %v", st.Span, 10*period)
			}
			near(t, "rate", st.Rate, 10, 0.03)
		})
	}
}

// TestGenerateDiurnalPhase checks that the daily sine peaks at 14:00 local
// time: two sources 8 hours apart peak 8 (compressed) hours apart.
func TestGenerateDiurnalPhase(t *testing.T) {
	tests := []struct {
		name   string
		period time.Duration
	}{
		{"compressed day", time.Hour},
		{"real day", 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eu, asia := baseSource("eu", 1), baseSource("asia", 1)
			asia.UTCOffsetHours = 8
			for _, s := range []*SourceSpec{&eu, &asia} {
				s.DiurnalAmplitude = 0.8
				s.MeanRate = 60000 / tt.period.Seconds() // 60000 requests per period
			}
			reqs := generate(t, Spec{Duration: tt.period, Period: tt.period, Seed: 1, Sources: []SourceSpec{eu, asia}})
			got := map[string]float64{}
			for name, rs := range bySource(reqs) {
				phase, amp := peakPhase(rs, tt.period)
				got[name] = phase
				if math.Abs(amp-0.8) > 0.03 {
					t.Errorf("%s: amplitude %.3f, want 0.8 ± 0.03", name, amp)
				}
			}
			// Peaks at 14:00 UTC and 14:00 UTC+8 = 06:00 UTC.
			for name, want := range map[string]float64{"eu": 14.0 / 24, "asia": 6.0 / 24} {
				if d := cycleDiff(got[name], want); d > 0.005 {
					t.Errorf("%s peaks at %.2f h UTC, want %.2f h", name, 24*got[name], 24*want)
				}
			}
			if d := cycleDiff(got["eu"]-got["asia"], 8.0/24); d > 0.005 {
				t.Errorf("peaks %.2f h apart, want 8 h", 24*math.Mod(got["eu"]-got["asia"]+1, 1))
			}
		})
	}
}

func TestGenerateGammaCV(t *testing.T) {
	tests := []struct {
		name     string
		shape    float64
		amp      float64
		wantCV   float64
		relative float64
	}{
		{"default is poisson", 0, 0, 1, 0.03},
		{"bursty", 0.25, 0, 2, 0.05},
		{"very bursty", 0.04, 0, 5, 0.1},
		{"regular", 4, 0, 0.5, 0.03},
		{"bursty under a slow sine", 0.25, 0.3, 2, 0.05},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := baseSource("eu", 20)
			src.GammaShape, src.DiurnalAmplitude = tt.shape, tt.amp
			reqs := generate(t, Spec{Duration: time.Hour, Seed: 3, Sources: []SourceSpec{src}})
			near(t, "CV of the gaps", gapsCV(reqs), tt.wantCV, tt.relative)
		})
	}
}

func TestGenerateBursts(t *testing.T) {
	src := baseSource("eu", 10)
	src.Bursts = []Burst{
		{At: 100 * time.Second, Duration: 100 * time.Second, Factor: 4},
		{At: 150 * time.Second, Duration: 100 * time.Second, Factor: 2}, // overlaps: ×8 in [150, 200)
		{At: 300 * time.Second, Duration: 50 * time.Second, Factor: 0},
		{At: 450 * time.Second, Duration: time.Hour, Factor: 3}, // clipped to the end
	}
	s := Spec{Duration: 500 * time.Second, Seed: 11, Sources: []SourceSpec{src}}
	reqs := generate(t, s)
	count := func(from, to time.Duration) float64 {
		n := 0
		for _, r := range reqs {
			if r.At >= from && r.At < to {
				n++
			}
		}
		return float64(n) / (to - from).Seconds()
	}
	sec := func(x int) time.Duration { return time.Duration(x) * time.Second }
	in := newIntensity(src.withDefaults(), DefaultPeriod, s.Duration)
	tests := []struct {
		name     string
		from, to int // seconds
		factor   float64
	}{
		{"before", 0, 100, 1},
		{"first burst", 100, 150, 4},
		{"overlap", 150, 200, 8},
		{"second burst", 200, 250, 2},
		{"between", 250, 300, 1},
		{"silence", 300, 350, 0},
		{"after", 350, 450, 1},
		{"clipped burst", 450, 500, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mid := float64(tt.from+tt.to) / 2
			if got := in.rate(mid); math.Abs(got-10*tt.factor) > 1e-9 {
				t.Errorf("rate at %gs %g, want %g", mid, got, 10*tt.factor)
			}
			got := count(sec(tt.from), sec(tt.to))
			if tt.factor == 0 {
				if got != 0 {
					t.Errorf("rate %g in a silent window", got)
				}
				return
			}
			// Poisson: ± 4 standard deviations of the count.
			n := 10 * tt.factor * float64(tt.to-tt.from)
			near(t, "rate", got, 10*tt.factor, 4/math.Sqrt(n))
		})
	}
}

func TestGenerateShares(t *testing.T) {
	tests := []struct {
		name         string
		sessionShare float64
		tolerance    float64 // absolute, on shares
	}{
		{"independent requests", 0, 0.01},
		{"sessions inherit from their first turn", 0.5, 0.03},
	}
	models := []Share{{"llama", 3}, {"qwen", 1}}
	prios := []Share{{PriorityCritical, 1}, {PriorityStandard, 2}, {PrioritySheddable, 1}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := baseSource("eu", 20)
			src.Models, src.Priorities = models, prios
			src.SessionShare, src.SessionTurns = tt.sessionShare, 3
			st := Summarize(generate(t, Spec{Duration: 30 * time.Minute, Seed: 5, Sources: []SourceSpec{src}}), 0)
			check := func(counts map[string]int, shares []Share, total float64) {
				t.Helper()
				for _, s := range shares {
					got := float64(counts[s.Name]) / float64(st.Requests)
					if want := s.Weight / total; math.Abs(got-want) > tt.tolerance {
						t.Errorf("share of %s %.3f, want %.3f ± %.3f", s.Name, got, want, tt.tolerance)
					}
				}
			}
			check(st.PerModel, models, 4)
			check(st.PerPriority, prios, 4)
		})
	}
}

func TestGenerateLengths(t *testing.T) {
	lognormalConv := Lengths{InputMean: 1155, InputP99: 4142, OutputMean: 211, OutputP99: 900}
	tests := []struct {
		name                   string
		lengths                Lengths
		convRows               bool // draw pairs from the conv trace instead
		shared                 int
		inMean, inP99, outMean float64
	}{
		{"lognormal as the conv trace", lognormalConv, false, 0, 1155, 4142, 211},
		{"system prompt comes on top", lognormalConv, false, 500, 1655, 4642, 211},
		{"constant", Lengths{InputMean: 300, InputP99: 300, OutputMean: 20, OutputP99: 20}, false, 0, 300, 300, 20},
		{"pairs from the conv trace", Lengths{}, true, 0, 1155, 4142, 211},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := baseSource("eu", 20)
			src.Lengths, src.SharedPrefixTokens = tt.lengths, tt.shared
			if tt.convRows {
				src.Lengths = Lengths{Rows: loadTrace(t, "azure-llm-2023-conv.csv")}
			}
			st := Summarize(generate(t, Spec{Duration: time.Hour, Seed: 9, Sources: []SourceSpec{src}}), 0)
			near(t, "prompt mean", st.PromptMean, tt.inMean, 0.02)
			near(t, "prompt p99", st.PromptP99, tt.inP99, 0.04)
			near(t, "output mean", st.OutputMean, tt.outMean, 0.02)
		})
	}
}

func TestGenerateDeterminism(t *testing.T) {
	spec := func(seed uint64, asiaRate float64) Spec {
		eu, asia := baseSource("eu", 5), baseSource("asia", asiaRate)
		for _, s := range []*SourceSpec{&eu, &asia} {
			s.DiurnalAmplitude, s.GammaShape = 0.5, 0.5
			s.SessionShare, s.SessionTurns, s.SharedPrefixTokens = 0.4, 3, 64
			s.Priorities = []Share{{PriorityCritical, 1}, {PrioritySheddable, 1}}
		}
		return Spec{Duration: 10 * time.Minute, Period: time.Hour, Seed: seed, Sources: []SourceSpec{eu, asia}}
	}
	a := generate(t, spec(42, 5))
	tests := []struct {
		name   string
		other  []Request
		equal  bool
		source string // compare only this source; "" for all
	}{
		{"same seed, same requests", generate(t, spec(42, 5)), true, ""},
		{"another seed, other requests", generate(t, spec(43, 5)), false, ""},
		{"another source's change leaves a source alone", generate(t, spec(42, 9)), true, "eu"},
		{"the changed source changes", generate(t, spec(42, 9)), false, "asia"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, y := a, tt.other
			if tt.source != "" {
				x, y = bySource(x)[tt.source], bySource(y)[tt.source]
			}
			if got := reflect.DeepEqual(x, y); got != tt.equal {
				t.Errorf("equal %v, want %v", got, tt.equal)
			}
		})
	}
	if !slices.IsSortedFunc(a, byAt) {
		t.Error("requests not sorted by At")
	}
}

func TestMerge(t *testing.T) {
	r := func(at int, src string) Request { return Request{At: time.Duration(at), Source: src} }
	tests := []struct {
		name    string
		streams [][]Request
		want    []Request
	}{
		{"none", nil, nil},
		{"empty streams", [][]Request{{}, nil}, nil},
		{"one", [][]Request{{r(1, "a"), r(2, "a")}}, []Request{r(1, "a"), r(2, "a")}},
		{
			"ties keep stream order",
			[][]Request{{r(1, "a"), r(3, "a")}, {r(1, "b"), r(2, "b")}, {r(1, "c"), r(3, "c")}},
			[]Request{r(1, "a"), r(1, "b"), r(1, "c"), r(2, "b"), r(3, "a"), r(3, "c")},
		},
		{
			"unsorted stream is sorted stably",
			[][]Request{{r(2, "a1"), r(1, "a"), r(2, "a2")}, {r(2, "b")}},
			[]Request{r(1, "a"), r(2, "a1"), r(2, "a2"), r(2, "b")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(tt.streams)
			for i, s := range before {
				before[i] = slices.Clone(s)
			}
			got := Merge(tt.streams...)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Merge %v, want %v", got, tt.want)
			}
			if !reflect.DeepEqual(before, tt.streams) {
				t.Error("Merge modified its input")
			}
		})
	}
}
