package picker

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// prompt returns n bytes of deterministic text seeded by s.
func prompt(s string, n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s-%d ", s, i)
	}
	return b.Bytes()[:n]
}

func blocks(model string, text []byte) []uint64 { return AppendBlocks(nil, Seed(model), text) }

func TestAppendBlocks(t *testing.T) {
	base := prompt("conversation", 10*BlockBytes)
	longer := append(bytes.Clone(base), prompt("next turn", 3*BlockBytes)...)
	edited := bytes.Clone(base)
	edited[5*BlockBytes+7] ^= 1
	for _, tc := range []struct {
		name       string
		a, b       []uint64
		wantShared int
	}{
		{"a longer turn shares every full block of the shorter", blocks("m", base), blocks("m", longer), 10},
		{"an edit in block 5 shares blocks 0-4 only", blocks("m", base), blocks("m", edited), 5},
		{"another model shares nothing", blocks("m", base), blocks("other", base), 0},
		{"a partial block is not hashed", blocks("m", base[:BlockBytes-1]), nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shared := 0
			for shared < min(len(tc.a), len(tc.b)) && tc.a[shared] == tc.b[shared] {
				shared++
			}
			if shared != tc.wantShared {
				t.Errorf("shared %d leading blocks, want %d", shared, tc.wantShared)
			}
			for i := shared; i < min(len(tc.a), len(tc.b)); i++ {
				if tc.a[i] == tc.b[i] {
					t.Errorf("block %d equal after a difference: the chain does not carry the past", i)
				}
			}
		})
	}
	if n := len(blocks("m", prompt("huge", 2*Span(MaxBlocks)*BlockBytes))); n != MaxBlocks {
		t.Errorf("a huge prompt has %d blocks, want the bound %d", n, MaxBlocks)
	}
}

// TestChainShape: a prompt's chain is one hash per block for the first
// DenseBlocks, then one per SparseStride blocks, up to MaxBlocks; Hashes,
// Span and Hashed describe that shape (the routing benchmark builds its
// chains with Hashed), and a sparse hash is shared exactly when the bytes
// up to its end are.
func TestChainShape(t *testing.T) {
	tests := []struct {
		name          string
		blocks        int
		hashes, spans int
	}{
		{"none", 0, 0, 0},
		{"short", 10, 10, 10},
		{"dense whole", DenseBlocks, DenseBlocks, DenseBlocks},
		{"a partial sparse span is not hashed", DenseBlocks + SparseStride - 1, DenseBlocks, DenseBlocks},
		{"one sparse span", DenseBlocks + SparseStride, DenseBlocks + 1, DenseBlocks + SparseStride},
		{"long", DenseBlocks + 100*SparseStride + 3, DenseBlocks + 100, DenseBlocks + 100*SparseStride},
		{"past the bound", 10 * Span(MaxBlocks), MaxBlocks, Span(MaxBlocks)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := prompt(tt.name, tt.blocks*BlockBytes)
			if got := len(AppendBlocks(nil, 1, text)); got != tt.hashes {
				t.Errorf("AppendBlocks: %d hashes; want %d", got, tt.hashes)
			}
			if got := Hashes(tt.blocks); got != tt.hashes {
				t.Errorf("Hashes(%d) = %d; want %d", tt.blocks, got, tt.hashes)
			}
			if got := Span(tt.hashes); got != tt.spans {
				t.Errorf("Span(%d) = %d; want %d", tt.hashes, got, tt.spans)
			}
			n := 0
			for i := range tt.blocks {
				if Hashed(i) {
					n++
				}
			}
			if n != tt.hashes {
				t.Errorf("Hashed is true for %d of %d blocks; want %d", n, tt.blocks, tt.hashes)
			}
		})
	}
	// Two prompts that differ in block DenseBlocks+11 (sparse span 1)
	// share the dense part and sparse span 0, and nothing after.
	a := prompt("a", (DenseBlocks+4*SparseStride)*BlockBytes)
	b := append([]byte(nil), a...)
	b[(DenseBlocks+11)*BlockBytes] ^= 1
	ca, cb := AppendBlocks(nil, 1, a), AppendBlocks(nil, 1, b)
	shared := 0
	for shared < len(ca) && ca[shared] == cb[shared] {
		shared++
	}
	if shared != DenseBlocks+1 {
		t.Errorf("shared %d hashes; want %d", shared, DenseBlocks+1)
	}
}

// TestLongPrefixCredited: a prompt sharing 100k tokens with one a
// replica was sent is credited with them (its sparse hashes), not only
// with the dense part's 32k; and a replica's index counts the blocks its
// hashes cover, so long prompts do not make it believe the engine holds
// more than its cache.
func TestLongPrefixCredited(t *testing.T) {
	c := NewCluster(Options{CacheTokens: 200_000})
	reps := []Replica{{Address: "a", Ramp: 1}, {Address: "b", Ramp: 1}}
	shared := prompt("corpus", 400_000) // 100k tokens
	first := append(bytes.Clone(shared), prompt("question one", 2*BlockBytes)...)
	d, tk := c.Pick(reps[:1], Request{Blocks: blocks("m", first), PromptTokens: len(first) / 4})
	tk.Done()
	second := append(bytes.Clone(shared), prompt("question two", 2*BlockBytes)...)
	d2, tk2 := c.Pick(reps, Request{Blocks: blocks("m", second), PromptTokens: len(second) / 4, Draw: 1})
	tk2.Done()
	if d2.Chosen.Address != d.Chosen.Address || d2.Chosen.Cached < 99_000 || d2.Chosen.Cached > 100_000 {
		t.Fatalf("second prompt: %+v; want %s with about 100k tokens cached (first %s)", d2.Chosen, d.Chosen.Address, d.Chosen.Address)
	}
	// Three more 100k-token prompts to the same replica: its 200k-token
	// cache cannot hold four, and the index says so.
	for i := range 3 {
		p := prompt(fmt.Sprint("other corpus ", i), 400_000)
		_, tk := c.Pick(reps[:1], Request{Blocks: blocks("m", p), PromptTokens: len(p) / 4})
		tk.Done()
	}
	if got := c.Stats().Blocks * BlockTokens; got > 200_000+BlockTokens*SparseStride {
		t.Errorf("the index covers %d tokens; want at most replica a's 200k-token cache", got)
	}
}

func TestCacheBoundedAndPrefixClosed(t *testing.T) {
	c := newCache(100)
	for conv := range 50 {
		c.record(blocks("m", prompt(fmt.Sprint("conv", conv), 20*BlockBytes)))
		if c.size() > 100 {
			t.Fatalf("after conversation %d the cache holds %d blocks, over its capacity 100", conv, c.size())
		}
	}
	// The last conversations are held whole; older ones are gone or held
	// as a prefix (never a suffix without its head).
	for conv := range 50 {
		b := blocks("m", prompt(fmt.Sprint("conv", conv), 20*BlockBytes))
		m := c.match(b)
		held := 0
		for _, h := range b {
			if _, ok := c.blocks[h]; ok {
				held++
			}
		}
		if held != m {
			t.Errorf("conversation %d: %d blocks held but the leading match is %d: not a prefix", conv, held, m)
		}
		if conv >= 46 && m != 20 {
			t.Errorf("recent conversation %d: match %d, want 20", conv, m)
		}
	}
	if len(c.ring) != 200 {
		t.Errorf("ring of %d entries, want 2 × capacity", len(c.ring))
	}
}

func TestPick(t *testing.T) {
	convA := prompt("conversation A", 40*BlockBytes) // ~2,560 tokens
	three := []Replica{{Address: "10.0.0.1:8000", Ramp: 1}, {Address: "10.0.0.2:8000", Ramp: 1}, {Address: "10.0.0.3:8000", Ramp: 1}}
	type step struct {
		text     []byte
		done     bool // settle the ticket at once
		first    bool // first token only: load stays in flight
		reps     []Replica
		want     string
		reason   string
		runnerUp bool
	}
	tokens := func(b []byte) int { return len(b) / 4 }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a conversation returns to the replica holding it", []step{
			{text: convA, done: true, reps: three, reason: ReasonLoad},
			{text: append(bytes.Clone(convA), prompt("turn 2", 4*BlockBytes)...), done: true, reps: three, want: "=0", reason: ReasonPrefix},
		}},
		{"saturation breaks a tie only", []step{
			{text: convA, done: true, reps: []Replica{{Address: "10.0.0.1:8000", Ramp: 1, Saturated: true}, {Address: "10.0.0.2:8000", Ramp: 1}}, want: "10.0.0.2:8000", reason: ReasonLoad},
			{text: convA, done: true, reps: []Replica{{Address: "10.0.0.1:8000", Ramp: 1}, {Address: "10.0.0.2:8000", Ramp: 1, Saturated: true}}, want: "10.0.0.2:8000", reason: ReasonPrefix},
		}},
		{"one replica", []step{
			{text: convA, done: true, reps: three[:1], want: "10.0.0.1:8000", reason: ReasonOnly},
		}},
		{"a warming replica counts its load over its ramp", []step{
			{text: prompt("x", 8*BlockBytes), first: true, reps: []Replica{{Address: "w", Ramp: 0.1}, {Address: "r", Ramp: 1}}, want: "r", reason: ReasonLoad, runnerUp: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCluster(Options{CacheTokens: 1 << 20})
			var chosen []string
			for i, s := range tc.steps {
				d, tk := c.Pick(s.reps, Request{Blocks: blocks("m", s.text), PromptTokens: tokens(s.text), Draw: uint64(i)})
				chosen = append(chosen, d.Chosen.Address)
				if s.reason != "" && d.Reason != s.reason {
					t.Errorf("step %d: reason %s, want %s (%+v)", i, d.Reason, s.reason, d)
				}
				switch {
				case s.want == "=0" && d.Chosen.Address != chosen[0]:
					t.Errorf("step %d: chose %s, want %s (the holder)", i, d.Chosen.Address, chosen[0])
				case s.want == "!0" && d.Chosen.Address == chosen[0]:
					t.Errorf("step %d: chose the holder %s behind its queue", i, d.Chosen.Address)
				case s.want != "" && !strings.ContainsAny(s.want[:1], "=!") && d.Chosen.Address != s.want:
					t.Errorf("step %d: chose %s, want %s", i, d.Chosen.Address, s.want)
				}
				if len(s.reps) > 1 && (d.RunnerUp.Address == "" || d.Lost() == "" || len(d.Hosts) < 2 || d.Hosts[0] != d.Chosen.Address) {
					t.Errorf("step %d: no runner-up, reason it lost or host list: %+v", i, d)
				}
				if s.first {
					tk.FirstToken()
				}
				if s.done {
					tk.Done()
				}
			}
		})
	}
}

// TestHotPrefixSpreads: requests sharing a prefix stay on its replica
// while its queue is shorter than the prefill they would repeat
// elsewhere, weighted by the queues; then they spread, and the second
// replica learns the prefix too.
func TestHotPrefixSpreads(t *testing.T) {
	c := NewCluster(Options{CacheTokens: 1 << 20})
	reps := []Replica{{Address: "a", Ramp: 1}, {Address: "b", Ramp: 1}, {Address: "c", Ramp: 1}}
	hot := prompt("hot document", 40*BlockBytes)
	d, tk := c.Pick(reps, Request{Blocks: blocks("m", hot), PromptTokens: len(hot) / 4})
	tk.FirstToken() // its prefill is done: the replica holds the prefix
	got := []string{d.Chosen.Address}
	for i := range 60 {
		d, _ := c.Pick(reps, Request{Blocks: blocks("m", hot), PromptTokens: len(hot) / 4, Draw: uint64(i)}) // never settled: a queue builds
		got = append(got, d.Chosen.Address)
	}
	if got[1] != got[0] {
		t.Errorf("second request went to %s, first to %s: want the holder while its queue is short", got[1], got[0])
	}
	per := map[string]int{}
	for _, a := range got {
		per[a]++
	}
	// Each request adds a block of prefill to the holder's queue (the
	// prompt is held whole): it takes about 40 (2,560 tokens / 64) before
	// a second replica is cheaper; from then on the holder keeps only
	// what its queue can bear against the others'.
	if len(per) < 2 || per[got[0]] > 52 {
		t.Errorf("61 requests of one hot prefix, never finished, went %v: want them spread once the holder's queue outweighs the prefix", per)
	}
	if per[got[0]] < 30 {
		t.Errorf("60 requests of one hot prefix went %v: the holder took too few (affinity lost while its queue was short)", per)
	}
}

func TestTicketsSettleLoad(t *testing.T) {
	c := NewCluster(Options{CacheTokens: 1 << 16})
	reps := []Replica{{Address: "a", Ramp: 1}, {Address: "b", Ramp: 1}}
	var ts []Ticket
	for i := range 10 {
		_, tk := c.Pick(reps, Request{Blocks: blocks("m", prompt(fmt.Sprint(i), 4*BlockBytes)), PromptTokens: 256, DecodeWork: 0.1 * float64(i+1)})
		ts = append(ts, tk)
	}
	for i := range ts {
		ts[i].FirstToken()
		ts[i].FirstToken() // idempotent
		ts[i].Done()
		ts[i].Done()
	}
	for _, addr := range []string{"a", "b"} {
		if st := c.replicas[addr]; st.inFlight != 0 || st.awaiting != 0 || st.decode != 0 {
			t.Errorf("replica %s: in flight %d, awaiting %d, decode work %v after every ticket settled", addr, st.inFlight, st.awaiting, st.decode)
		}
	}
	c.Retain(func(a string) bool { return a == "a" })
	if s := c.Stats(); s.Replicas != 1 || s.Bytes <= 0 {
		t.Errorf("after Retain: %+v, want 1 replica", s)
	}
	var zero Ticket
	zero.FirstToken()
	zero.Done()
}

// TestDecodeWorkSpreadsSharedPrefix: new sessions sharing a long prefix
// (an agent's instructions) that only one replica holds. Counting only
// queued prefill, every one goes to the holder (its queue empties at each
// first token) and the other replica stays idle; counting the decode work
// of the requests in flight, they spread once the holder's decode work
// outweighs the shared prefix's prefill.
func TestDecodeWorkSpreadsSharedPrefix(t *testing.T) {
	preamble := prompt("instructions and tools", 48*BlockBytes)
	session := func(i int) []byte {
		return append(bytes.Clone(preamble), prompt(fmt.Sprint("task", i), 10*BlockBytes)...)
	}
	reps := []Replica{{Address: "a", Ramp: 1}, {Address: "b", Ramp: 1}}
	for _, tc := range []struct {
		name           string
		decode         float64
		minB, maxB     int // requests of 20 the replica without the prefix gets
		holderFirstTen int // requests of the first 10 the holder gets, at least
	}{
		{"prefill only: the holder takes all", 0, 0, 0, 10},
		{"with decode work: they spread", 1000, 7, 12, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCluster(Options{CacheTokens: 1 << 20})
			first := session(-1)
			_, tk := c.Pick(reps[:1], Request{Blocks: blocks("m", first), PromptTokens: len(first) / 4, DecodeWork: tc.decode})
			tk.FirstToken() // decoding on "a", never done
			toB, holderFirst := 0, 0
			for i := range 20 {
				text := session(i)
				d, tk := c.Pick(reps, Request{Blocks: blocks("m", text), PromptTokens: len(text) / 4, Draw: uint64(i), DecodeWork: tc.decode})
				tk.FirstToken() // prefilled; it decodes from now on
				if d.Chosen.Address == "b" {
					toB++
				} else if i < 10 {
					holderFirst++
				}
				if d.Chosen.Decode < 0 || (tc.decode == 0 && d.Chosen.Decode != 0) {
					t.Errorf("request %d: decode work %v, want %v a request", i, d.Chosen.Decode, tc.decode)
				}
			}
			if toB < tc.minB || toB > tc.maxB || holderFirst < tc.holderFirstTen {
				t.Errorf("b got %d of 20 (want %d–%d), the holder %d of the first 10 (want >= %d)", toB, tc.minB, tc.maxB, holderFirst, tc.holderFirstTen)
			}
		})
	}
}

// TestDecodeLoad: a replica's decode load is its engine's running
// requests at the last scrape (DecodeUnit each) plus the decode work ILB
// sent it since; a newer scrape replaces both; without a scrape, or when
// more, ILB's own requests whose streams are open count.
func TestDecodeLoad(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		running   float64
		scrapedAt time.Time
		done      bool    // settle the request picked (its stream ends)
		want      float64 // the replica's Decode term before this pick
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"the engine's count, then ILB's picks since", []step{
			{running: 10, scrapedAt: t0, done: true, want: 10 * 1000},
			{running: 10, scrapedAt: t0, done: true, want: 10*1000 + 500},
			{running: 10, scrapedAt: t0, done: true, want: 10*1000 + 2*500},
		}},
		{"a newer scrape replaces both", []step{
			{running: 10, scrapedAt: t0, done: true, want: 10 * 1000},
			{running: 4, scrapedAt: t0.Add(time.Second), done: true, want: 4 * 1000},
		}},
		{"no scrape: ILB's open streams", []step{
			{want: 0},
			{want: 500},
			{done: true, want: 1000},
			{want: 1000}, // the third settled: two open
		}},
		{"ILB's open streams when they are more", []step{
			{running: 0, scrapedAt: t0, want: 0},
			{running: 0, scrapedAt: t0.Add(time.Second), want: 500},
		}},
		{"hostile counts are unknown", []step{
			{running: math.NaN(), scrapedAt: t0, done: true, want: 0},
			{running: math.Inf(1), scrapedAt: t0, done: true, want: 0},
			{running: -3, scrapedAt: t0, want: 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCluster(Options{CacheTokens: 1 << 16})
			for i, s := range tc.steps {
				reps := []Replica{{Address: "a", Ramp: 1, Running: s.running, ScrapedAt: s.scrapedAt}}
				d, tk := c.Pick(reps, Request{PromptTokens: 100, DecodeWork: 500, DecodeUnit: 1000})
				if d.Chosen.Decode != s.want {
					t.Errorf("step %d: decode %v, want %v", i, d.Chosen.Decode, s.want)
				}
				if s.done {
					tk.FirstToken()
					tk.Done()
				}
			}
		})
	}
}

// TestForgetCache: a replica's index is emptied, its load kept.
func TestForgetCache(t *testing.T) {
	c := NewCluster(Options{CacheTokens: 1 << 16})
	text := prompt("conversation", 20*BlockBytes)
	reps := []Replica{{Address: "a", Ramp: 1}}
	c.Pick(reps, Request{Blocks: blocks("m", text), PromptTokens: len(text) / 4, DecodeWork: 100})
	c.ForgetCache("a")
	c.ForgetCache("unknown") // nothing to forget
	d, _ := c.Pick(reps, Request{Blocks: blocks("m", text), PromptTokens: len(text) / 4})
	if d.Chosen.Cached != 0 || d.Chosen.InFlight != 1 || d.Chosen.Decode != 100 {
		t.Errorf("after ForgetCache: %+v, want nothing cached and the request in flight still counted", d.Chosen)
	}
}

// TestLostNamesTheTerm: why the runner-up lost is the first term of the
// choice's order that tells it from the chosen replica.
func TestLostNamesTheTerm(t *testing.T) {
	chosen := Term{Address: "a", Cost: 100, InFlight: 2}
	for _, tc := range []struct {
		name     string
		chosen   Term
		runnerUp Term
		want     string
	}{
		{"more work", chosen, Term{Address: "b", Cost: 150, InFlight: 0}, LostMoreWork},
		{"more in flight", chosen, Term{Address: "b", Cost: 100, InFlight: 3}, LostInFlight},
		{"saturated", chosen, Term{Address: "b", Cost: 100, InFlight: 2, Saturated: true}, LostSaturated},
		{"the rotation", chosen, Term{Address: "b", Cost: 100, InFlight: 2}, LostRotation},
		{"no runner-up", chosen, Term{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decision{Chosen: tc.chosen, RunnerUp: tc.runnerUp}
			if got := d.Lost(); got != tc.want {
				t.Errorf("Lost() = %q; want %q", got, tc.want)
			}
		})
	}
}

// TestPickInto: PickInto decides as Pick does, on twin clusters given the
// same requests, and lists the hosts in the memory it was given.
func TestPickInto(t *testing.T) {
	reps := []Replica{{Address: "10.0.0.1:8000", Ramp: 1}, {Address: "10.0.0.2:8000", Ramp: 1}, {Address: "10.0.0.3:8000", Ramp: 1}, {Address: "10.0.0.4:8000", Ramp: 1}}
	a, b := NewCluster(Options{CacheTokens: 1 << 20}), NewCluster(Options{CacheTokens: 1 << 20})
	for i := range 20 {
		text := prompt(fmt.Sprintf("conversation %d", i%3), (4+i)*BlockBytes)
		req := Request{Blocks: blocks("m", text), PromptTokens: len(text) / 4, Draw: uint64(i)}
		want, _ := a.Pick(reps, req)
		var mem [MaxHosts]string
		got, _ := b.PickInto(reps, req, mem[:0])
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("request %d: PickInto = %+v; Pick = %+v", i, got, want)
		}
		if len(got.Hosts) != MaxHosts || &got.Hosts[0] != &mem[0] {
			t.Errorf("request %d: hosts %v not in the memory given", i, got.Hosts)
		}
	}
}
