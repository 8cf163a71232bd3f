package replica

import (
	"math"
	"slices"
	"testing"
	"time"
)

// tinyProfile is a small replica for exact scheduling tests: 1 ms steps
// (plus 1 µs per token past 16), blocks KV blocks of 16 tokens.
func tinyProfile(blocks, maxSeqs, budget int) Profile {
	return Profile{
		Name: "tiny", FloorTokens: 16, Floor: time.Millisecond, PerToken: time.Microsecond,
		KVBytesPerToken: 1, KVCacheBytes: int64(blocks * DefaultBlockSize),
		MaxSeqs: maxSeqs, MaxBatchedTokens: budget,
	}
}

// stepRec is the state of one step right after it started.
type stepRec struct {
	end  time.Duration
	load Load
}

// stepThrough runs r step by step (at most limit steps), recording each.
func stepThrough(r *Replica, limit int) ([]stepRec, []Result) {
	var recs []stepRec
	var out []Result
	for range limit {
		at, busy := r.Next()
		if !busy {
			break
		}
		recs = append(recs, stepRec{end: at, load: r.Load()})
		out = r.Advance(at, out)
	}
	return recs, out
}

func batchTokens(recs []stepRec) []int {
	var ts []int
	for _, s := range recs {
		ts = append(ts, s.load.BatchTokens)
	}
	return ts
}

func TestChunkedPrefill(t *testing.T) {
	tests := []struct {
		name   string
		submit func(r *Replica)
		want   []int // tokens of the first steps
	}{
		{
			name:   "a long prompt is split across steps at the budget",
			submit: func(r *Replica) { r.Submit(0, Request{ID: 1, Prompt: 20000, Output: 2}) },
			want:   []int{8192, 8192, 3616, 1},
		},
		{
			name: "prompts are packed FIFO into one budget",
			submit: func(r *Replica) {
				for i := range 3 {
					r.Submit(0, Request{ID: uint64(i), Prompt: 3000, Output: 1})
				}
			},
			want: []int{8192, 808},
		},
		{
			name: "a decoding sequence shares the budget with a chunk",
			submit: func(r *Replica) {
				r.Submit(0, Request{ID: 1, Prompt: 100, Output: 50})
				at, _ := r.Next()
				r.Advance(at, nil)
				r.Submit(at, Request{ID: 2, Prompt: 20000, Output: 1})
			},
			want: []int{8192, 8192, 3619, 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReplica(t, Options{Profile: mustProfile(t, ProfileLlama3x8BH100)})
			tt.submit(r)
			recs, _ := stepThrough(r, 10000)
			got := batchTokens(recs)
			if len(got) < len(tt.want) || !slices.Equal(got[:len(tt.want)], tt.want) {
				t.Errorf("step tokens %v, want %v first", got[:min(len(got), 8)], tt.want)
			}
			for i, n := range got {
				if n > DefaultMaxBatchedTokens {
					t.Errorf("step %d: %d tokens over the budget %d", i, n, DefaultMaxBatchedTokens)
				}
			}
		})
	}
}

func TestLongPromptFirstToken(t *testing.T) {
	p := mustProfile(t, ProfileLlama3x8BH100)
	r := newReplica(t, Options{Profile: p})
	r.Submit(0, Request{ID: 1, Prompt: 20000, Output: 1})
	res := r.Advance(math.MaxInt64, nil)
	want := 2*p.StepTime(8192, 0) + p.StepTime(3616, 0)
	if len(res) != 1 || res[0].FirstToken != want || res[0].Done != want {
		t.Errorf("results %+v, want first token and done at %v (three chunks)", res, want)
	}
}

func TestPreemption(t *testing.T) {
	t.Run("none at moderate load", func(t *testing.T) {
		for _, rate := range []float64{8, 14} {
			st := openLoop(t, Options{Profile: mustProfile(t, ProfileLlama3x8BH100)}, rate, 5*time.Minute, lognormalSizes(), 3)
			if st.preemptions != 0 {
				t.Errorf("rate %v: %d preemptions, want none (KV far from full)", rate, st.preemptions)
			}
		}
	})
	t.Run("only near KV exhaustion when overcommitted", func(t *testing.T) {
		r := newReplica(t, Options{Profile: mustProfile(t, ProfileLlama3x8BH100)})
		for i := range 256 { // 256 x 3000 tokens: far more than 420k tokens of KV
			r.Submit(0, Request{ID: uint64(i), Prompt: 1000, Output: 2000})
		}
		recs, res := stepThrough(r, 1_000_000)
		prev := 0
		for _, s := range recs {
			if s.load.Preemptions > prev && s.load.KVUsage < 0.9 {
				t.Errorf("preempted at %v with KV usage %.2f after the step's allocation", s.end, s.load.KVUsage)
			}
			prev = s.load.Preemptions
		}
		if prev == 0 {
			t.Error("no preemption although KV is overcommitted")
		}
		if len(res) != 256 {
			t.Fatalf("%d results, want 256", len(res))
		}
		for _, x := range res {
			if x.Failed || x.Output != 2000 {
				t.Errorf("result %+v, want completed with 2000 tokens", x)
			}
		}
		t.Logf("%d preemptions over %d steps", prev, len(recs))
	})
	t.Run("the last admitted is preempted and resumes first", func(t *testing.T) {
		r := newReplica(t, Options{Profile: tinyProfile(10, 8, 64)})
		r.Submit(0, Request{ID: 1, Prompt: 16, Output: 80}) // 6 blocks at the end
		r.Submit(0, Request{ID: 2, Prompt: 16, Output: 80}) // together 12 > 10
		res := r.Advance(math.MaxInt64, nil)
		if len(res) != 2 {
			t.Fatalf("results %+v, want 2", res)
		}
		a, b := res[0], res[1]
		if a.ID != 1 || a.Preemptions != 0 || b.ID != 2 || b.Preemptions < 1 {
			t.Errorf("results %+v: want request 2 (admitted last) preempted, 1 never", res)
		}
		if a.Output != 80 || b.Output != 80 || a.Failed || b.Failed || b.FirstToken >= a.Done {
			t.Errorf("results %+v: want both complete, 2's first token before 1 ends", res)
		}
		if l := r.Load(); l.KVBlocksUsed != 0 || l.Running != 0 || l.PendingTokens != 0 {
			t.Errorf("Load after all %+v, want empty", l)
		}
	})
}
