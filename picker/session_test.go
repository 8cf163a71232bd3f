package picker

import (
	"fmt"
	"testing"
)

// TestSessionCredit: a request whose prompt ILB did not read (no blocks)
// goes back to the replica that served its session last, credited with
// that request's prompt; the credit ages with the replica's cache, stays
// within the request's own length, and counts only without blocks.
func TestSessionCredit(t *testing.T) {
	reps := []Replica{{Address: "a", Ramp: 1}, {Address: "b", Ramp: 1}, {Address: "c", Ramp: 1}}
	type step struct {
		session  uint64
		prompt   int
		blocks   []uint64
		fill     int    // prompts of other sessions sent to the holder first (ageing its cache)
		want     string // "=0": the first step's replica; "!0": another
		reason   string
		credited int // the chosen replica's cached tokens
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a session returns to its replica", []step{
			{session: 7, prompt: 2000, reason: ReasonLoad},
			{session: 7, prompt: 3000, want: "=0", reason: ReasonSession, credited: 2000},
			{session: 7, prompt: 4000, want: "=0", reason: ReasonSession, credited: 3000},
		}},
		{"the credit is at most the prompt less a block", []step{
			{session: 7, prompt: 8000, reason: ReasonLoad},
			{session: 7, prompt: 1000, want: "=0", reason: ReasonSession, credited: 1000 - BlockTokens},
		}},
		{"another session earns nothing there", []step{
			{session: 7, prompt: 2000, reason: ReasonLoad},
			{session: 8, prompt: 3000, want: "!0", reason: ReasonLoad},
		}},
		{"a request with blocks is judged by its blocks", []step{
			{session: 7, prompt: 2000, reason: ReasonLoad},
			{session: 7, prompt: 3000, blocks: blocks("m", prompt("unrelated", 8*BlockBytes)), want: "!0", reason: ReasonLoad},
		}},
		{"the credit ages out with the replica's cache", []step{
			{session: 7, prompt: 2000, reason: ReasonLoad},
			{session: 7, prompt: 3000, fill: 3, want: "!0", reason: ReasonLoad},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCluster(Options{CacheTokens: 64 * BlockTokens}) // 64 blocks a replica
			var first string
			for i, s := range tc.steps {
				for f := range s.fill {
					// 40 blocks each: the session block is forgotten
					// after two (capacity 64).
					b := blocks("m", prompt(fmt.Sprint("filler", f), 40*BlockBytes))
					_, tk := c.Pick([]Replica{{Address: first, Ramp: 1}}, Request{Blocks: b, PromptTokens: 40 * BlockTokens})
					tk.Done()
				}
				d, tk := c.Pick(reps, Request{Session: s.session, PromptTokens: s.prompt, Blocks: s.blocks, Draw: uint64(i)})
				tk.Done()
				if i == 0 {
					first = d.Chosen.Address
				}
				if d.Reason != s.reason {
					t.Errorf("step %d: reason %s, want %s (%+v)", i, d.Reason, s.reason, d)
				}
				switch {
				case s.want == "=0" && d.Chosen.Address != first:
					t.Errorf("step %d: chose %s, want the session's replica %s", i, d.Chosen.Address, first)
				case s.want == "!0" && d.Chosen.Address == first:
					t.Errorf("step %d: chose the session's replica %s: want no credit there", i, first)
				}
				if d.Chosen.Cached != s.credited || d.Chosen.Session != (s.credited > 0) {
					t.Errorf("step %d: chosen terms %+v, want %d tokens credited by the session", i, d.Chosen, s.credited)
				}
			}
		})
	}
}

// TestSessionsBounded: the sessions remembered are bounded by twice the
// cache's blocks; the oldest are forgotten first.
func TestSessionsBounded(t *testing.T) {
	c := NewCluster(Options{CacheTokens: 8 * BlockTokens}) // 8 blocks: 16 sessions
	reps := []Replica{{Address: "a", Ramp: 1}}
	for s := uint64(1); s <= 100; s++ {
		_, tk := c.Pick(reps, Request{Session: s, PromptTokens: 500})
		tk.Done()
	}
	if st := c.Stats(); st.Sessions != 16 || st.Blocks > 8 {
		t.Errorf("after 100 sessions: %+v, want 16 sessions and at most 8 blocks", st)
	}
	if _, ok := c.sessions.m[100]; !ok {
		t.Error("the newest session was forgotten")
	}
	if _, ok := c.sessions.m[1]; ok {
		t.Error("the oldest session is still remembered")
	}
}

// TestMaxQueueSkew: with the guard, a replica whose queue is longer than
// the shortest by more than the bound is never chosen, even holding the
// whole prompt; without it, the cost rule keeps the holder longer.
func TestMaxQueueSkew(t *testing.T) {
	hot := blocks("m", prompt("hot document", 40*BlockBytes))
	reps := []Replica{{Address: "a", Ramp: 1}, {Address: "b", Ramp: 1}}
	for _, tc := range []struct {
		name string
		skew int
		stay int // requests, never settled, the holder takes before one goes elsewhere
	}{
		{"bound of 2", 2, 3},
		{"bound of 5", 5, 6},
		{"no bound: the cost rule alone", 0, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCluster(Options{CacheTokens: 1 << 20, MaxQueueSkew: tc.skew})
			_, tk := c.Pick(reps[:1], Request{Blocks: hot, PromptTokens: 40 * BlockTokens})
			tk.Done() // "a" holds the prompt, idle
			stay := 20
			for i := range 20 {
				qa, qb := c.state("a").queued, c.state("b").queued
				d, _ := c.Pick(reps, Request{Blocks: hot, PromptTokens: 40 * BlockTokens, Draw: uint64(i)})
				if d.Chosen.Address != "a" && stay == 20 {
					stay = i
				}
				if tc.skew == 0 {
					continue
				}
				for _, h := range d.Hosts {
					if q := map[string]int{"a": qa, "b": qb}[h]; q > min(qa, qb)+tc.skew {
						t.Errorf("request %d: %s listed (%v) with a queue of %d, past the shortest %d + %d", i, h, d.Hosts, q, min(qa, qb), tc.skew)
					}
				}
			}
			if stay != tc.stay {
				t.Errorf("the holder took %d requests before one went elsewhere, want %d", stay, tc.stay)
			}
		})
	}
}
