package picker

import (
	"fmt"
	"testing"
)

// TestSessionCredit: a request whose prompt ILB did not read (no blocks)
// goes back to the replica that served its session, credited with the
// whole blocks of the session's longest request there; the credit ages
// with the replica's cache, stays within the request's own length, and
// counts only without blocks.
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
			{session: 7, prompt: 3000, want: "=0", reason: ReasonSession, credited: 31 * BlockTokens}, // 2000 tokens: 31 whole blocks
			{session: 7, prompt: 4000, want: "=0", reason: ReasonSession, credited: 46 * BlockTokens},
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

// TestSessionsAge: sessions age a replica's index by their length, as
// prompts do: after 60 sessions of 2,000 tokens through a replica whose
// cache holds 4,096, the first is no longer credited there, the last is.
func TestSessionsAge(t *testing.T) {
	c := NewCluster(Options{CacheTokens: 4096})
	reps := []Replica{{Address: "a", Ramp: 1}, {Address: "b", Ramp: 1}}
	for s := uint64(1); s <= 60; s++ {
		_, tk := c.Pick(reps[:1], Request{Session: s, PromptTokens: 2000})
		tk.Done()
	}
	if st := c.Stats(); st.Blocks > 4096/BlockTokens {
		t.Errorf("the index holds %d blocks, over its %d", st.Blocks, 4096/BlockTokens)
	}
	for _, tc := range []struct {
		session uint64
		want    string
		credit  bool
	}{{60, "a", true}, {1, "", false}} {
		d, tk := c.Pick(reps, Request{Session: tc.session, PromptTokens: 2500})
		tk.Done()
		if tc.credit && (d.Chosen.Address != tc.want || d.Reason != ReasonSession || d.Chosen.Cached != 31*BlockTokens) {
			t.Errorf("session %d: %+v (%s), want a credited with 31 blocks", tc.session, d.Chosen, d.Reason)
		}
		if !tc.credit && (d.Chosen.Cached != 0 || d.Reason == ReasonSession) {
			t.Errorf("session %d: %+v (%s), want no credit left", tc.session, d.Chosen, d.Reason)
		}
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
