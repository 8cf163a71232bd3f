package workload

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// sessionSpec is a workload with sessions from two sources and two models.
func sessionSpec(share, turns float64, think time.Duration, shared int) Spec {
	var sources []SourceSpec
	for _, name := range []string{"eu", "us"} {
		src := baseSource(name, 10)
		src.Models = []Share{{"llama", 1}, {"qwen", 1}}
		src.Priorities = []Share{{PriorityCritical, 1}, {PriorityStandard, 1}}
		src.SessionShare, src.SessionTurns, src.SessionThink = share, turns, think
		src.SharedPrefixTokens = shared
		sources = append(sources, src)
	}
	return Spec{Duration: 2000 * time.Second, Seed: 21, Sources: sources}
}

func TestGenerateSessionShape(t *testing.T) {
	tests := []struct {
		name     string
		share    float64
		turns    float64
		think    time.Duration
		duration time.Duration
	}{
		{"half in sessions of 4 turns", 0.5, 4, 5 * time.Second, 2000 * time.Second},
		{"all in sessions of 2 turns, default think", 1, 2, 0, 2000 * time.Second},
		{"single-turn sessions", 0.3, 1, time.Second, 2000 * time.Second},
		{"long sessions", 0.2, 8, 20 * time.Second, 8000 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := sessionSpec(tt.share, tt.turns, tt.think, 0)
			spec.Duration = tt.duration
			reqs := generate(t, spec)
			st := Summarize(reqs, 0)
			got := float64(st.SessionRequests) / float64(st.Requests)
			if math.Abs(got-tt.share) > 0.015 {
				t.Errorf("share of session requests %.3f, want %.3f ± 0.015", got, tt.share)
			}
			// The sessions started in the first half, which the end of the
			// workload does not cut, have the mean number of turns.
			var sessions, turns float64
			for _, ts := range sessionsOf(reqs) {
				if ts[0].At < tt.duration/2 {
					sessions++
					turns += float64(len(ts))
				}
			}
			near(t, "mean turns per session", turns/sessions, tt.turns, 0.05)
			think := tt.think
			if think == 0 {
				think = DefaultSessionThink
			}
			for key, turns := range sessionsOf(reqs) {
				for i := 1; i < len(turns); i++ {
					if gap := turns[i].At - turns[i-1].At; gap < think/2 {
						t.Fatalf("session %s: turns %v apart, want at least half the think time %v", key, gap, think)
					}
				}
			}
		})
	}
}

// sessionsOf groups the session requests by key, in arrival order.
func sessionsOf(reqs []Request) map[string][]Request {
	out := map[string][]Request{}
	for _, r := range reqs {
		if r.Session != "" {
			out[r.Session] = append(out[r.Session], r)
		}
	}
	return out
}

// TestGenerateSessionPrefixes checks the prompts and prefixes of sessions:
// every turn extends the previous prompt and its answer, and its prefix
// hashes extend the previous ones, after the shared system prompt.
func TestGenerateSessionPrefixes(t *testing.T) {
	const shared = 100 // 6 full blocks, then 4 tokens
	reqs := generate(t, sessionSpec(0.5, 4, 5*time.Second, shared))
	system := map[string][]uint64{} // source/model → the system prompt's hashes
	for _, r := range reqs {
		if r.Session != "" {
			continue
		}
		k := r.Source + "/" + r.Model
		if len(r.Prefix) != shared/BlockTokens || r.Prompt <= shared {
			t.Fatalf("request %+v: want %d system blocks and a prompt longer than %d", r, shared/BlockTokens, shared)
		}
		if s, ok := system[k]; ok && !slices.Equal(s, r.Prefix) {
			t.Fatalf("%s: two requests with different system prompt hashes", k)
		}
		system[k] = r.Prefix
	}
	if len(system) != 4 {
		t.Fatalf("system prompts of %d source/model pairs, want 4", len(system))
	}
	distinct := map[uint64]bool{}
	for _, s := range system {
		distinct[s[0]] = true
	}
	if len(distinct) != 4 {
		t.Error("source/model pairs share a system prompt hash")
	}
	for key, turns := range sessionsOf(reqs) {
		first := turns[0]
		if !strings.HasPrefix(key, first.Source+"/") {
			t.Errorf("session key %q does not name its source %s", key, first.Source)
		}
		if sys := system[first.Source+"/"+first.Model]; !slices.Equal(first.Prefix[:len(sys)], sys) {
			t.Fatalf("session %s does not start with its system prompt", key)
		}
		for i, r := range turns {
			if len(r.Prefix) != r.Prompt/BlockTokens {
				t.Fatalf("session %s turn %d: %d prefix blocks for %d tokens, want every full block", key, i, len(r.Prefix), r.Prompt)
			}
			if r.Model != first.Model || r.Priority != first.Priority || r.Source != first.Source {
				t.Fatalf("session %s turn %d: %s/%s/%s, want the first turn's %s/%s/%s", key, i, r.Source, r.Model, r.Priority, first.Source, first.Model, first.Priority)
			}
			if i == 0 {
				continue
			}
			prev := turns[i-1]
			if r.Prompt <= prev.Prompt+prev.Output {
				t.Fatalf("session %s turn %d: prompt %d, want more than the previous prompt and answer %d+%d", key, i, r.Prompt, prev.Prompt, prev.Output)
			}
			if !slices.Equal(r.Prefix[:len(prev.Prefix)], prev.Prefix) {
				t.Fatalf("session %s turn %d: prefix does not extend the previous turn's", key, i)
			}
		}
	}
}

// TestGenerateSessionContextFull checks that sessions end rather than grow
// prompts past MaxTokens.
func TestGenerateSessionContextFull(t *testing.T) {
	spec := sessionSpec(1, 50, time.Second, 1000)
	for i := range spec.Sources {
		spec.Sources[i].Lengths = Lengths{InputMean: 3000, InputP99: 8000, OutputMean: 500, OutputP99: 2000}
	}
	spec.Duration = 200 * time.Second
	reqs := generate(t, spec)
	longest := 0
	for _, r := range reqs {
		if r.Prompt > MaxTokens || r.Prompt < 1 || r.Output < 1 {
			t.Fatalf("request %+v: prompt and output want [1, %d]", r, MaxTokens)
		}
		longest = max(longest, r.Prompt)
	}
	if longest < MaxTokens/2 {
		t.Errorf("longest prompt %d: the sessions did not grow", longest)
	}
	st := Summarize(reqs, 0)
	if turns := float64(st.SessionRequests) / float64(st.Sessions); turns > 15 {
		t.Errorf("%.1f turns per session: full contexts did not end sessions", turns)
	}
}

// TestGenerateAgentSessions checks that the session knobs express agents:
// long sessions (20 turns on average, geometric) with short think times
// (1.5 to 4.5 s drawn, plus the wait for a session request) where each turn adds a tool output of 200 to 2000 tokens
// (the new message) and a short answer to a growing context, every turn
// sharing all full blocks of the previous turn's prompt.
func TestGenerateAgentSessions(t *testing.T) {
	src := baseSource("agents", 20)
	src.SessionShare, src.SessionTurns, src.SessionThink = 1, 20, 3*time.Second
	src.SharedPrefixTokens = 2000 // instructions and tool definitions
	src.Lengths = Lengths{InputMean: 800, InputP99: 2000, OutputMean: 100, OutputP99: 300}
	const duration = 20 * time.Minute
	reqs := generate(t, Spec{Duration: duration, Seed: 4, Sources: []SourceSpec{src}})
	var sessions, turns, long, tools, toolsInRange float64
	var gaps []time.Duration
	for key, ts := range sessionsOf(reqs) {
		if ts[0].At < duration/2 {
			sessions++
			turns += float64(len(ts))
			if len(ts) >= 10 {
				long++
			}
		}
		for i, r := range ts {
			if len(r.Prefix) != r.Prompt/BlockTokens {
				t.Fatalf("session %s turn %d: %d prefix blocks for %d tokens, want all", key, i, len(r.Prefix), r.Prompt)
			}
			if i == 0 {
				continue
			}
			prev := ts[i-1]
			tool := r.Prompt - prev.Prompt - prev.Output
			if tool < 1 || !slices.Equal(r.Prefix[:len(prev.Prefix)], prev.Prefix) {
				t.Fatalf("session %s turn %d: does not extend the previous prompt and answer with a tool output", key, i)
			}
			tools++
			if tool >= 200 && tool <= 2000 {
				toolsInRange++
			}
			gaps = append(gaps, r.At-prev.At)
		}
	}
	// Sessions cut by a full context window bring the mean below 20.
	if mean := turns / sessions; mean < 15 || mean > 20.5 {
		t.Errorf("%.1f turns per session, want 15 to 20", mean)
	}
	if share := long / sessions; share < 0.5 {
		t.Errorf("%.2f of the sessions have 10 turns or more, want at least half", share)
	}
	if share := toolsInRange / tools; share < 0.97 {
		t.Errorf("%.3f of the tool outputs in [200, 2000] tokens, want 0.97", share)
	}
	// A turn waits for the next session request of the source once due,
	// which adds to the drawn think time.
	slices.Sort(gaps)
	if lo, mid, p90 := gaps[0], gaps[len(gaps)/2], gaps[len(gaps)*9/10]; lo < 1500*time.Millisecond || mid > 4*time.Second || p90 > 5500*time.Millisecond {
		t.Errorf("think times: min %v, median %v, p90 %v; want >= 1.5s, <= 4s, <= 5.5s", lo, mid, p90)
	}
}
