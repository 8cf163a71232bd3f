package workload

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReplayScaling replays the bursty code trace (Azure LLM inference
// trace 2023, CC-BY 4.0) at several rates: RateScale s gives s times the
// requests per second, the same lengths, and the same burst shape at the
// time scale 1/s.
func TestReplayScaling(t *testing.T) {
	rows := loadTrace(t, "azure-llm-2023-code.csv")
	span := rows[len(rows)-1].At
	orig := Summarize(asRequests(rows), time.Second)
	tests := []struct {
		name  string
		scale float64
	}{
		{"as recorded", 1},
		{"three times the rate", 3},
		{"half the rate", 0.5},
		{"ten times the rate", 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Whole passes over the trace: at least one, and the trace's span.
			passes := max(1, tt.scale)
			duration := time.Duration(float64(span) * passes / tt.scale)
			reqs, err := Replay{Rows: rows, Source: "eu", Model: "m", RateScale: tt.scale}.Requests(duration)
			if err != nil {
				t.Fatalf("Requests: %v", err)
			}
			near(t, "requests", float64(len(reqs)), passes*float64(len(rows)), 0.01)
			window := time.Duration(float64(time.Second) / tt.scale)
			st := Summarize(reqs, window)
			near(t, "rate", st.Rate, tt.scale*orig.Rate, 0.02)
			near(t, "CV of counts per 1/scale s", st.CVWindow, orig.CV1s, 0.05)
			near(t, "prompt mean", st.PromptMean, orig.PromptMean, 0.01)
			near(t, "output mean", st.OutputMean, orig.OutputMean, 0.02)
			if !slices.IsSortedFunc(reqs, byAt) {
				t.Error("requests not sorted")
			}
		})
	}
}

func TestReplayShiftAndLoop(t *testing.T) {
	// Four rows one second apart: the loop is 4 s (span 3 s + a mean gap).
	rows := []Row{{At: 0, Input: 10}, {At: time.Second, Input: 11}, {At: 2 * time.Second, Input: 12}, {At: 3 * time.Second, Input: 13}}
	type arrival struct {
		at     time.Duration
		prompt int
	}
	s := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	tests := []struct {
		name     string
		scale    float64
		shift    time.Duration
		duration time.Duration
		want     []arrival
	}{
		{"loops", 1, 0, s(6), []arrival{{0, 10}, {s(1), 11}, {s(2), 12}, {s(3), 13}, {s(4), 10}, {s(5), 11}}},
		{"shift rotates", 1, s(1), s(5), []arrival{{0, 13}, {s(1), 10}, {s(2), 11}, {s(3), 12}, {s(4), 13}}},
		{"negative shift", 1, -s(1), s(4), []arrival{{0, 11}, {s(1), 12}, {s(2), 13}, {s(3), 10}}},
		{"shift beyond the loop", 1, s(9), s(2), []arrival{{0, 13}, {s(1), 10}}},
		{"scaled by 2", 2, 0, s(3), []arrival{{0, 10}, {s(0.5), 11}, {s(1), 12}, {s(1.5), 13}, {s(2), 10}, {s(2.5), 11}}},
		{"scaled by 2, shift in scaled time", 2, s(0.5), s(1), []arrival{{0, 13}, {s(0.5), 10}}},
		{"zero duration", 1, 0, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs, err := Replay{Rows: rows, Source: "eu", Model: "m", RateScale: tt.scale, Shift: tt.shift}.Requests(tt.duration)
			if err != nil {
				t.Fatalf("Requests: %v", err)
			}
			var got []arrival
			for _, r := range reqs {
				got = append(got, arrival{r.At, r.Prompt})
				if r.Source != "eu" || r.Model != "m" || r.Priority != PriorityStandard || r.Output != 1 {
					t.Errorf("request %+v: want source eu, model m, standard, output raised to 1", r)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("arrivals %v, want %v", got, tt.want)
			}
		})
	}
}

func TestReplayPrefix(t *testing.T) {
	rows := []Row{
		{At: 0, Input: 1000, HashIDs: []uint64{1, 2}},          // 62 full blocks; 64 from the IDs
		{At: time.Second, Input: 600, HashIDs: []uint64{1, 3}}, // shares the first 512 tokens
		{At: 2 * time.Second, Input: 600},
	}
	replay := func(source string, hashTokens int) []Request {
		t.Helper()
		reqs, err := Replay{Rows: rows, Source: source, Model: "m", HashBlockTokens: hashTokens}.Requests(8 * time.Second)
		if err != nil {
			t.Fatalf("Requests: %v", err)
		}
		return reqs
	}
	eu := replay("eu", 0)
	if got := []int{len(eu[0].Prefix), len(eu[1].Prefix), len(eu[2].Prefix)}; !slices.Equal(got, []int{62, 37, 0}) {
		t.Fatalf("prefix lengths %v, want [62 37 0]", got)
	}
	if !slices.Equal(eu[0].Prefix[:32], eu[1].Prefix[:32]) || eu[0].Prefix[32] == eu[1].Prefix[32] {
		t.Error("rows 0 and 1 share exactly their first hash ID (32 blocks); their prefixes do not show it")
	}
	if !slices.Equal(eu[0].Prefix, eu[3].Prefix) {
		t.Error("the second pass of the loop has other hashes than the first")
	}
	if us := replay("us", 0); slices.Equal(us[0].Prefix, eu[0].Prefix) {
		t.Error("two sources replaying one trace share prefix hashes")
	}
	if perBlock := replay("eu", BlockTokens); len(perBlock[0].Prefix) != 2 {
		t.Errorf("with one ID per %d-token block, prefix length %d, want 2", BlockTokens, len(perBlock[0].Prefix))
	}
}

func TestReplayPriorities(t *testing.T) {
	rows := loadTrace(t, "azure-llm-2023-conv.csv")
	shares := []Share{{PriorityCritical, 1}, {PriorityStandard, 2}, {PrioritySheddable, 1}}
	play := func(seed uint64) []Request {
		t.Helper()
		reqs, err := Replay{Rows: rows, Source: "eu", Model: "m", Priorities: shares, Seed: seed}.Requests(time.Hour)
		if err != nil {
			t.Fatalf("Requests: %v", err)
		}
		return reqs
	}
	reqs := play(1)
	st := Summarize(reqs, time.Second)
	for _, s := range shares {
		got := float64(st.PerPriority[s.Name]) / float64(st.Requests)
		if want := s.Weight / 4; math.Abs(got-want) > 0.015 {
			t.Errorf("share of %s %.3f, want %.3f ± 0.015", s.Name, got, want)
		}
	}
	if !reflect.DeepEqual(reqs, play(1)) {
		t.Error("the same seed gives other requests")
	}
	if reflect.DeepEqual(reqs, play(2)) {
		t.Error("another seed gives the same priorities")
	}
}

func TestReplayErrors(t *testing.T) {
	rows := []Row{{At: 0}, {At: time.Second}}
	tests := []struct {
		name     string
		replay   Replay
		duration time.Duration
		paths    []string
	}{
		{"one row", Replay{Rows: rows[:1], Source: "s", Model: "m"}, time.Hour, []string{"replay.rows"}},
		{"unsorted", Replay{Rows: []Row{{At: time.Second}, {At: 0}}, Source: "s", Model: "m"}, time.Hour, []string{"replay.rows"}},
		{"no span", Replay{Rows: []Row{{At: time.Second}, {At: time.Second}}, Source: "s", Model: "m"}, time.Hour, []string{"replay.rows"}},
		{"names and scale", Replay{Rows: rows, RateScale: -1}, time.Hour, []string{"replay.source", "replay.model", "replay.rate_scale"}},
		{"NaN scale", Replay{Rows: rows, Source: "s", Model: "m", RateScale: math.NaN()}, time.Hour, []string{"replay.rate_scale"}},
		{"scale below 1ns per row", Replay{Rows: rows, Source: "s", Model: "m", RateScale: 1e9}, time.Hour, []string{"replay.rate_scale"}},
		{"bad priority", Replay{Rows: rows, Source: "s", Model: "m", Priorities: []Share{{"urgent", 1}, {PriorityStandard, 0}}}, time.Hour, []string{"replay.priorities[0].name", "replay.priorities[1].weight"}},
		{"hash block tokens", Replay{Rows: rows, Source: "s", Model: "m", HashBlockTokens: 100}, time.Hour, []string{"replay.hash_block_tokens"}},
		{"negative duration", Replay{Rows: rows, Source: "s", Model: "m"}, -time.Second, []string{"duration"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.replay.Requests(tt.duration)
			checkFieldErrors(t, err, tt.paths)
		})
	}
}

// checkFieldErrors checks that err joins exactly one *FieldError per path,
// in order, each message starting with its path.
func checkFieldErrors(t *testing.T, err error, paths []string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want errors at %v", paths)
	}
	var got []string
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			got = append(got, fieldPath(t, e))
		}
	} else {
		got = append(got, fieldPath(t, err))
	}
	if !slices.Equal(got, paths) {
		t.Errorf("error paths %q, want %q; error:\n%v", got, paths, err)
	}
}

func fieldPath(t *testing.T, err error) string {
	t.Helper()
	fe, ok := errors.AsType[*FieldError](err)
	if !ok {
		t.Fatalf("error %v (%T), want a *FieldError", err, err)
	}
	if !strings.HasPrefix(err.Error(), fe.Path+": ") {
		t.Errorf("error %q does not start with its path", err)
	}
	return fe.Path
}
