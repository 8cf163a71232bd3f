package workload

import (
	"testing"
	"time"
)

// BenchmarkGenerate generates one simulated hour at about 100 requests per
// second (360k requests) from one source with a daily sine, bursty Gamma
// arrivals, two models, sessions and a shared system prompt.
func BenchmarkGenerate(b *testing.B) {
	src := baseSource("eu", 100)
	src.DiurnalAmplitude, src.GammaShape = 0.5, 0.5
	src.Models = []Share{{"llama", 3}, {"qwen", 1}}
	src.Priorities = []Share{{PriorityCritical, 1}, {PriorityStandard, 2}, {PrioritySheddable, 1}}
	src.SessionShare, src.SessionTurns, src.SharedPrefixTokens = 0.3, 4, 512
	spec := Spec{Duration: time.Hour, Period: time.Hour, Seed: 1, Sources: []SourceSpec{src}}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		reqs, err := Generate(spec)
		if err != nil {
			b.Fatal(err)
		}
		n = len(reqs)
	}
	b.ReportMetric(float64(n), "requests/op")
}

// BenchmarkGenerateThreeRegions is the same hour split over three sources
// 8 hours apart, which adds the merge.
func BenchmarkGenerateThreeRegions(b *testing.B) {
	var sources []SourceSpec
	for i, name := range []string{"us", "eu", "asia"} {
		src := baseSource(name, 100.0/3)
		src.UTCOffsetHours = float64(8*i - 8)
		src.DiurnalAmplitude = 0.5
		src.SessionShare, src.SessionTurns, src.SharedPrefixTokens = 0.3, 4, 512
		sources = append(sources, src)
	}
	spec := Spec{Duration: time.Hour, Period: time.Hour, Seed: 1, Sources: sources}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Generate(spec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGenerateDocuments is BenchmarkGenerate's hour with documents:
// 3 of 10,000 chunks of 512 tokens per request, Zipf 1.
func BenchmarkGenerateDocuments(b *testing.B) {
	src := baseSource("eu", 100)
	src.DiurnalAmplitude, src.GammaShape = 0.5, 0.5
	src.Models = []Share{{"llama", 3}, {"qwen", 1}}
	src.SessionShare, src.SessionTurns, src.SharedPrefixTokens = 0.3, 4, 512
	src.Documents, src.DocumentTokens, src.DocumentsPerRequest, src.DocumentZipf = 10000, 512, 3, 1
	spec := Spec{Duration: time.Hour, Period: time.Hour, Seed: 1, Sources: []SourceSpec{src}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Generate(spec); err != nil {
			b.Fatal(err)
		}
	}
}
