package workload

import (
	"encoding/binary"
	"hash/fnv"
	"testing"
	"time"
)

// TestGenerateUnchanged pins the requests of workloads without documents:
// the fingerprints were taken before documents existed, so the document
// fields at zero change nothing, down to the last prefix hash.
func TestGenerateUnchanged(t *testing.T) {
	eu, asia, us := baseSource("eu", 20), baseSource("asia", 7), baseSource("us", 5)
	eu.DiurnalAmplitude, eu.GammaShape = 0.5, 0.5
	eu.Models = []Share{{"llama", 3}, {"qwen", 1}}
	eu.Priorities = []Share{{PriorityCritical, 1}, {PriorityStandard, 2}, {PrioritySheddable, 1}}
	eu.SessionShare, eu.SessionTurns, eu.SessionThink, eu.SharedPrefixTokens = 0.4, 5, 3*time.Second, 200
	asia.UTCOffsetHours, asia.SharedPrefixTokens = 8, 512
	asia.Bursts = []Burst{{At: time.Minute, Duration: time.Minute, Factor: 3}}
	us.Lengths = Lengths{Rows: []Row{{Input: 9000, Output: 700}, {Input: 40, Output: 3}, {Input: 0, Output: 40000}}}
	us.SessionShare, us.SessionTurns, us.SharedPrefixTokens = 1, 30, 1000
	tests := []struct {
		name     string
		spec     Spec
		requests int
		want     uint64
	}{
		{"sine, bursts, sessions, system prompts", Spec{Duration: 10 * time.Minute, Period: time.Hour, Seed: 7, Sources: []SourceSpec{eu, asia}}, 11236, 0xe9983f5a05b4be89},
		{"trace rows, full contexts", Spec{Duration: 10 * time.Minute, Seed: 8, Sources: []SourceSpec{us}}, 2953, 0xe195d5b62f0cce67},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs := generate(t, tt.spec)
			if got := fingerprint(reqs); len(reqs) != tt.requests || got != tt.want {
				t.Errorf("%d requests, fingerprint %#x; want %d, %#x", len(reqs), got, tt.requests, tt.want)
			}
		})
	}
}

// fingerprint is FNV-1a over every field of reqs.
func fingerprint(reqs []Request) uint64 {
	h := fnv.New64a()
	var b [8]byte
	put := func(x uint64) {
		binary.LittleEndian.PutUint64(b[:], x)
		_, _ = h.Write(b[:])
	}
	for _, r := range reqs {
		put(uint64(r.At))
		_, _ = h.Write([]byte(r.Source + "\x00" + r.Model + "\x00" + r.Priority + "\x00" + r.Session + "\x00"))
		put(uint64(r.Prompt))
		put(uint64(r.Output))
		put(uint64(len(r.Prefix)))
		for _, x := range r.Prefix {
			put(x)
		}
	}
	return h.Sum64()
}
