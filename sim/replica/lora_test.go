package replica

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// Costs of the LoRA tests: loading is slow and activating cheap, both far
// above the 1 ms steps of tinyProfile so that they stand out.
const (
	testLoad     = 100 * time.Millisecond
	testActivate = 10 * time.Millisecond
)

// loraReq is a request of tinyProfile size (8 prompt tokens) for adapter
// ("" is the base model).
func loraReq(id uint64, adapter string, output int) Request {
	return Request{ID: id, Prompt: 8, Output: output, Adapter: adapter}
}

// firstTokenSteps maps each result's ID to the step (from 1) whose end
// produced its first token.
func firstTokenSteps(t *testing.T, recs []stepRec, res []Result) map[uint64]int {
	t.Helper()
	steps := map[uint64]int{}
	for _, x := range res {
		i := slices.IndexFunc(recs, func(s stepRec) bool { return s.end == x.FirstToken })
		if i < 0 || x.Failed {
			t.Fatalf("result %+v: first token at no step end", x)
		}
		steps[x.ID] = i + 1
	}
	return steps
}

// TestLoRAMaxLoras: the batch holds at most MaxLoras adapters; a request
// of one more waits in its place while base-model requests and requests
// of the batch's adapters behind it are admitted (vLLM's
// skipped_waiting_requests).
func TestLoRAMaxLoras(t *testing.T) {
	tests := []struct {
		name     string
		maxLoras int
		maxSeqs  int
		reqs     []Request
		want     map[uint64]int   // first-token step of each request
		after1   []AdapterLoad    // Adapters once the first step started
		skipped  map[uint64][]int // the steps that skipped a request for its adapter
	}{
		{
			name:     "a third adapter waits while two run; base and running adapters pass it",
			maxLoras: 2, maxSeqs: 8,
			reqs: []Request{
				loraReq(1, "a", 3), loraReq(2, "b", 6), loraReq(3, "c", 2),
				loraReq(4, "", 2), loraReq(5, "a", 2),
			},
			// a's last request ends with step 3: c gets the slot at step 4.
			want:    map[uint64]int{1: 1, 2: 1, 3: 4, 4: 1, 5: 1},
			after1:  []AdapterLoad{{"a", 2, 0}, {"b", 1, 0}, {"c", 0, 1}},
			skipped: map[uint64][]int{3: {1, 2, 3}},
		},
		{
			name:     "skipped requests keep their order",
			maxLoras: 1, maxSeqs: 8,
			reqs: []Request{
				loraReq(1, "a", 3), loraReq(2, "b", 2), loraReq(3, "c", 2),
				loraReq(4, "b", 2), loraReq(5, "a", 1),
			},
			// b (the first skipped) goes before c, and takes its second
			// request along; c waits for b to end.
			want:    map[uint64]int{1: 1, 2: 4, 3: 6, 4: 4, 5: 1},
			after1:  []AdapterLoad{{"a", 2, 0}, {"b", 0, 2}, {"c", 0, 1}},
			skipped: map[uint64][]int{2: {1, 2, 3}, 3: {1, 2, 3, 4, 5}, 4: {1, 2, 3}},
		},
		{
			name:     "MaxSeqs still bounds the batch; a full batch skips nobody",
			maxLoras: 1, maxSeqs: 2,
			reqs: []Request{loraReq(1, "a", 3), loraReq(2, "b", 2), loraReq(3, "", 2), loraReq(4, "", 1)},
			// Step 2 has no free slot, so nothing is looked at; step 3
			// admits 4 past b; a ends with step 3.
			want:    map[uint64]int{1: 1, 2: 4, 3: 1, 4: 3},
			after1:  []AdapterLoad{{"a", 1, 0}, {"b", 0, 1}},
			skipped: map[uint64][]int{2: {1, 3}},
		},
		{
			name:     "no limit reached: FIFO as without LoRA",
			maxLoras: 3, maxSeqs: 8,
			reqs:   []Request{loraReq(1, "a", 2), loraReq(2, "b", 2), loraReq(3, "c", 2), loraReq(4, "", 2)},
			want:   map[uint64]int{1: 1, 2: 1, 3: 1, 4: 1},
			after1: []AdapterLoad{{"a", 1, 0}, {"b", 1, 0}, {"c", 1, 0}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReplica(t, Options{Profile: tinyProfile(100, tt.maxSeqs, 64), LoRA: LoRA{MaxLoras: tt.maxLoras}})
			for _, q := range tt.reqs {
				r.Submit(0, q)
			}
			r.Next()
			if got := r.Adapters(nil); got.MaxLoras != tt.maxLoras || !slices.Equal(got.Adapters, tt.after1) {
				t.Errorf("Adapters in the first step %+v, want MaxLoras %d, %+v", got, tt.maxLoras, tt.after1)
			}
			recs, res := stepThrough(r, 100)
			if got := firstTokenSteps(t, recs, res); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("first-token steps %v, want %v", got, tt.want)
			}
			for _, x := range res {
				var want time.Duration
				for _, n := range tt.skipped[x.ID] {
					want += recs[n-1].end
					if n > 1 {
						want -= recs[n-2].end
					}
				}
				if x.AdapterWait != want {
					t.Errorf("request %d: AdapterWait %v, want %v", x.ID, x.AdapterWait, want)
				}
			}
			if got := r.Adapters(nil); len(got.Adapters) != 0 {
				t.Errorf("Adapters at the end %+v, want none", got.Adapters)
			}
		})
	}
}

// TestLoRALoadCost: loading and activating adapters lengthen the step
// that needs them, once per load, and are charged to the requests of
// those adapters only.
func TestLoRALoadCost(t *testing.T) {
	type phase struct {
		steps int // run this many steps before submitting reqs (0: at once)
		reqs  []Request
	}
	costs := LoRA{MaxLoras: 2, MaxCPULoras: 3, LoadTime: testLoad, ActivateTime: testActivate}
	cold := testLoad + testActivate
	tests := []struct {
		name   string
		lora   LoRA
		phases []phase
		extra  []time.Duration // per step: its time beyond the profile's; the rest 0
		cost   map[uint64]time.Duration
	}{
		{
			name: "a cold adapter is loaded and activated in its first step only", lora: costs,
			phases: []phase{{0, []Request{loraReq(1, "a", 3)}}},
			extra:  []time.Duration{cold, 0, 0},
			cost:   map[uint64]time.Duration{1: cold},
		},
		{
			name: "two adapters loaded in one step both add", lora: costs,
			phases: []phase{{0, []Request{loraReq(1, "a", 2), loraReq(2, "b", 2)}}},
			extra:  []time.Duration{2 * cold, 0},
			cost:   map[uint64]time.Duration{1: cold, 2: cold},
		},
		{
			name: "requests of one adapter share one load", lora: costs,
			phases: []phase{{0, []Request{loraReq(1, "a", 2), loraReq(2, "a", 2)}}},
			extra:  []time.Duration{cold, 0},
			cost:   map[uint64]time.Duration{1: cold, 2: cold},
		},
		{
			name: "a base request shares the step, not the cost", lora: costs,
			phases: []phase{{0, []Request{loraReq(1, "a", 2), loraReq(2, "", 2)}}},
			extra:  []time.Duration{cold, 0},
			cost:   map[uint64]time.Duration{1: cold, 2: 0},
		},
		{
			name: "an adapter joining a running batch is loaded in the step it joins", lora: costs,
			phases: []phase{{0, []Request{loraReq(1, "a", 3)}}, {1, []Request{loraReq(2, "b", 1)}}},
			extra:  []time.Duration{cold, cold, 0},
			cost:   map[uint64]time.Duration{1: cold, 2: cold},
		},
		{
			name: "a resident adapter costs nothing", lora: costs,
			phases: []phase{{0, []Request{loraReq(1, "a", 1)}}, {100, []Request{loraReq(2, "a", 1)}}},
			extra:  []time.Duration{cold, 0},
			cost:   map[uint64]time.Duration{1: cold, 2: 0},
		},
		{
			name: "in the CPU cache but not in a GPU slot: activation only",
			lora: LoRA{MaxLoras: 1, MaxCPULoras: 2, LoadTime: testLoad, ActivateTime: testActivate},
			phases: []phase{
				{0, []Request{loraReq(1, "a", 1)}}, {100, []Request{loraReq(2, "b", 1)}}, {100, []Request{loraReq(3, "a", 1)}},
			},
			extra: []time.Duration{cold, cold, testActivate},
			cost:  map[uint64]time.Duration{1: cold, 2: cold, 3: testActivate},
		},
		{
			name: "a running adapter is never evicted for a newcomer",
			lora: LoRA{MaxLoras: 2, MaxCPULoras: 2, LoadTime: testLoad, ActivateTime: testActivate},
			// a and b are in both caches; c waits for b to end (step 3),
			// then evicts b, not a, which the batch holds.
			phases: []phase{{0, []Request{loraReq(1, "a", 6), loraReq(2, "b", 3), loraReq(3, "c", 2)}}},
			extra:  []time.Duration{2 * cold, 0, 0, cold, 0},
			cost:   map[uint64]time.Duration{1: cold, 2: cold, 3: cold},
		},
		{
			name:   "zero times are free",
			lora:   LoRA{MaxLoras: 1},
			phases: []phase{{0, []Request{loraReq(1, "a", 1)}}, {100, []Request{loraReq(2, "b", 1)}}},
			extra:  []time.Duration{0, 0},
			cost:   map[uint64]time.Duration{1: 0, 2: 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tinyProfile(100, 8, 64)
			r := newReplica(t, Options{Profile: p, LoRA: tt.lora})
			var recs []stepRec
			var res []Result
			now := time.Duration(0)
			for _, ph := range tt.phases {
				rs, out := stepThrough(r, ph.steps)
				recs, res = append(recs, rs...), append(res, out...)
				if len(recs) > 0 {
					now = recs[len(recs)-1].end
				}
				for _, q := range ph.reqs {
					r.Submit(now, q)
				}
			}
			rs, out := stepThrough(r, 100)
			recs, res = append(recs, rs...), append(res, out...)
			var got []time.Duration
			start := time.Duration(0)
			for _, s := range recs {
				got = append(got, s.end-start-p.StepTime(s.load.BatchTokens, 0))
				start = s.end
			}
			want := append(slices.Clone(tt.extra), make([]time.Duration, max(0, len(got)-len(tt.extra)))...)
			if !slices.Equal(got, want) {
				t.Errorf("extra step times %v, want %v", got, want)
			}
			if len(res) != len(tt.cost) {
				t.Fatalf("%d results, want %d", len(res), len(tt.cost))
			}
			for _, x := range res {
				if x.Failed || x.AdapterCost != tt.cost[x.ID] {
					t.Errorf("request %d: AdapterCost %v (failed %v), want %v", x.ID, x.AdapterCost, x.Failed, tt.cost[x.ID])
				}
			}
		})
	}
}

// TestLoRAEviction: both caches evict the least recently used adapter.
// Requests run one at a time.
func TestLoRAEviction(t *testing.T) {
	type use struct {
		adapter  string
		cost     time.Duration
		gpu, cpu []string // AdapterCache afterwards, most recent first
	}
	cold := testLoad + testActivate
	tests := []struct {
		name string
		lora LoRA
		uses []use
	}{
		{
			name: "GPU slots and CPU cache, LRU each",
			lora: LoRA{MaxLoras: 2, MaxCPULoras: 3, LoadTime: testLoad, ActivateTime: testActivate},
			uses: []use{
				{"a", cold, []string{"a"}, []string{"a"}},
				{"b", cold, []string{"b", "a"}, []string{"b", "a"}},
				{"c", cold, []string{"c", "b"}, []string{"c", "b", "a"}},         // a leaves its slot
				{"a", testActivate, []string{"a", "c"}, []string{"a", "c", "b"}}, // from the CPU cache; b leaves its slot
				{"d", cold, []string{"d", "a"}, []string{"d", "a", "c"}},         // b leaves the CPU cache, c its slot
				{"b", cold, []string{"b", "d"}, []string{"b", "d", "a"}},
				{"a", testActivate, []string{"a", "b"}, []string{"a", "b", "d"}},
				{"b", 0, []string{"b", "a"}, []string{"b", "a", "d"}}, // resident: only touched
			},
		},
		{
			name: "a CPU cache no larger than the slots",
			lora: LoRA{MaxLoras: 2, MaxCPULoras: 2, LoadTime: testLoad, ActivateTime: testActivate},
			uses: []use{
				{"a", cold, []string{"a"}, []string{"a"}},
				{"b", cold, []string{"b", "a"}, []string{"b", "a"}},
				{"c", cold, []string{"c", "b"}, []string{"c", "b"}}, // a leaves both: loaded again next
				{"a", cold, []string{"a", "c"}, []string{"a", "c"}},
			},
		},
		{
			name: "the default CPU cache is MaxLoras adapters",
			lora: LoRA{MaxLoras: 1, LoadTime: testLoad, ActivateTime: testActivate},
			uses: []use{
				{"a", cold, []string{"a"}, []string{"a"}},
				{"b", cold, []string{"b"}, []string{"b"}},
				{"a", cold, []string{"a"}, []string{"a"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReplica(t, Options{Profile: tinyProfile(100, 8, 64), LoRA: tt.lora})
			now := time.Duration(0)
			for i, u := range tt.uses {
				r.Submit(now, loraReq(uint64(i), u.adapter, 1))
				res := r.Advance(math.MaxInt64, nil)
				if len(res) != 1 || res[0].AdapterCost != u.cost {
					t.Fatalf("use %d of %s: results %+v, want AdapterCost %v", i, u.adapter, res, u.cost)
				}
				now = res[0].Done
				if gpu, cpu := r.AdapterCache(); !slices.Equal(gpu, u.gpu) || !slices.Equal(cpu, u.cpu) {
					t.Errorf("after use %d of %s: GPU %v, CPU %v; want %v, %v", i, u.adapter, gpu, cpu, u.gpu, u.cpu)
				}
			}
		})
	}
}

// TestLoRADisabled: with MaxLoras 0 a request for an adapter is refused,
// at once; base-model requests are served.
func TestLoRADisabled(t *testing.T) {
	tests := []struct {
		name    string
		lora    LoRA
		adapter string
		failed  bool
	}{
		{"adapter without LoRA", LoRA{}, "a", true},
		{"base model without LoRA", LoRA{}, "", false},
		{"adapter with LoRA", LoRA{MaxLoras: 1}, "a", false},
		{"CPU cache and costs ignored when disabled", LoRA{MaxCPULoras: 4, LoadTime: time.Second}, "a", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReplica(t, Options{Profile: tinyProfile(100, 8, 64), LoRA: tt.lora})
			r.Submit(5*time.Millisecond, loraReq(1, tt.adapter, 2))
			res := r.Advance(math.MaxInt64, nil)
			if len(res) != 1 || res[0].Failed != tt.failed || res[0].Adapter != tt.adapter {
				t.Fatalf("results %+v, want one with Failed %v, Adapter %q", res, tt.failed, tt.adapter)
			}
			if tt.failed && (res[0].Done != 5*time.Millisecond || res[0].Output != 0) {
				t.Errorf("refused %+v, want Done at submission, no output", res[0])
			}
			if l := r.Adapters(nil); len(l.Adapters) != 0 || l.MaxLoras != tt.lora.MaxLoras {
				t.Errorf("Adapters %+v, want none, MaxLoras %d", l, tt.lora.MaxLoras)
			}
		})
	}
}

// TestLoRARestart: a failed replica loses its adapters (and their
// request counts); after the restart they are loaded again.
func TestLoRARestart(t *testing.T) {
	r := newReplica(t, Options{
		Profile: tinyProfile(100, 8, 64),
		LoRA:    LoRA{MaxLoras: 2, MaxCPULoras: 4, LoadTime: testLoad, ActivateTime: testActivate},
	})
	r.Submit(0, loraReq(1, "a", 1))
	r.Submit(0, loraReq(2, "b", 1))
	res := r.Advance(math.MaxInt64, nil)
	r.Submit(res[1].Done, loraReq(3, "c", 50))
	r.Submit(res[1].Done, loraReq(4, "c", 50))
	at, _ := r.Next()
	failed := r.SetState(at+time.Millisecond, Failed)
	if len(failed) != 2 {
		t.Fatalf("failed %+v, want the two requests of c", failed)
	}
	if gpu, cpu := r.AdapterCache(); len(gpu)+len(cpu) != 0 {
		t.Errorf("after failing: GPU %v, CPU %v; want both empty", gpu, cpu)
	}
	if l := r.Adapters(nil); len(l.Adapters) != 0 {
		t.Errorf("Adapters after failing %+v, want none", l.Adapters)
	}
	now := at + time.Second
	r.SetState(now, Ready)
	r.Submit(now, loraReq(5, "a", 1))
	res = r.Advance(math.MaxInt64, nil)
	if len(res) != 1 || res[0].Failed || res[0].AdapterCost != testLoad+testActivate {
		t.Errorf("after the restart %+v, want a loaded again (AdapterCost %v)", res, testLoad+testActivate)
	}
}

// loraWorkload is arrivals of the 3-minute TestDeterminism kind, each for
// one of adapters adapters (skewed: adapter i is about twice as likely as
// i+1), or for the base model with probability base.
func loraWorkload(seed uint64, d time.Duration, adapters int, base float64) []arrival {
	arrivals := poisson(16, d, lognormalSizes(), seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	names := make([]string, adapters)
	for i := range names {
		names[i] = string(rune('a' + i))
	}
	for i := range arrivals {
		if rng.Float64() < base {
			continue
		}
		k := 0
		for k < adapters-1 && rng.IntN(2) == 0 {
			k++
		}
		arrivals[i].req.Adapter = names[k]
		arrivals[i].req.Tag = i
	}
	return arrivals
}

// TestLoRADeterminism: the same inputs give identical results with
// adapters contending for slots, loads, evictions and preemptions; and
// at every step the reported adapter counts add up to the replica's, with
// at most MaxLoras adapters running.
func TestLoRADeterminism(t *testing.T) {
	p := mustProfile(t, ProfileLlama3x8BH100)
	p.KVCacheBytes /= 4 // preemptions at this load
	o := Options{Profile: p, LoRA: LoRA{MaxLoras: 2, MaxCPULoras: 3, LoadTime: 30 * time.Millisecond, ActivateTime: time.Millisecond}}
	arrivals := loraWorkload(11, 3*time.Minute, 6, 0)
	run := func(check bool) ([]Result, Load) {
		r := newReplica(t, o)
		var out []Result
		var buf []AdapterLoad
		next := 0
		for {
			at, busy := r.Next()
			if next < len(arrivals) && (!busy || arrivals[next].at <= at) {
				out = r.Advance(arrivals[next].at, out)
				r.Submit(arrivals[next].at, arrivals[next].req)
				next++
				continue
			}
			if !busy {
				return out, r.Load()
			}
			out = r.Advance(at, out)
			if !check {
				continue
			}
			r.Next()
			l, al := r.Load(), r.Adapters(buf)
			buf = al.Adapters
			running, waiting, inBatch := 0, 0, 0
			for _, a := range al.Adapters {
				running, waiting = running+a.Running, waiting+a.Waiting
				if a.Running > 0 {
					inBatch++
				}
			}
			if running != l.Running || waiting != l.Waiting || inBatch > o.LoRA.MaxLoras {
				t.Fatalf("at %v: adapters %+v, Load %+v: counts differ or more than %d adapters run", at, al.Adapters, l, o.LoRA.MaxLoras)
			}
		}
	}
	a, la := run(true)
	b, lb := run(false)
	if !reflect.DeepEqual(a, b) || la != lb {
		t.Fatal("two runs of the same inputs differ")
	}
	var cost, wait time.Duration
	for _, x := range a {
		cost, wait = cost+x.AdapterCost, wait+x.AdapterWait
		if x.Failed || x.Adapter == "" {
			t.Fatalf("result %+v: want completed, with an adapter", x)
		}
	}
	if len(a) != len(arrivals) || la.Preemptions == 0 || cost == 0 || wait == 0 {
		t.Errorf("%d results of %d, %d preemptions, adapter cost %v, wait %v: want all, and all > 0 to exercise the model",
			len(a), len(arrivals), la.Preemptions, cost, wait)
	}
}

// TestAdapters: the counts follow requests through admission, skipping,
// cancellation and completion, in the order adapters got their requests.
func TestAdapters(t *testing.T) {
	r := newReplica(t, Options{Profile: tinyProfile(100, 8, 64), LoRA: LoRA{MaxLoras: 1}})
	r.Submit(0, loraReq(1, "b", 5))
	r.Submit(0, loraReq(2, "a", 5))
	r.Submit(0, loraReq(3, "b", 5))
	r.Submit(0, loraReq(4, "", 5))
	var end time.Duration // when the last request ended
	steps := []struct {
		name string
		do   func()
		want []AdapterLoad
	}{
		{"queued", func() {}, []AdapterLoad{{"b", 0, 2}, {"a", 0, 1}}},
		{"b runs, a skipped", func() { r.Next() }, []AdapterLoad{{"b", 2, 0}, {"a", 0, 1}}},
		{"a running request of b cancelled", func() { r.Cancel(0, 1) }, []AdapterLoad{{"b", 1, 0}, {"a", 0, 1}}},
		{"a waiting request of a cancelled", func() { r.Cancel(0, 2) }, []AdapterLoad{{"b", 1, 0}}},
		{"a comes back, after b", func() { r.Submit(0, loraReq(5, "a", 1)) }, []AdapterLoad{{"b", 1, 0}, {"a", 0, 1}}},
		{"all done", func() {
			res := r.Advance(math.MaxInt64, nil)
			end = res[len(res)-1].Done
		}, nil},
		{"c first now", func() {
			r.Submit(end, loraReq(6, "c", 1))
			r.Submit(end, loraReq(7, "b", 1))
		}, []AdapterLoad{{"c", 0, 1}, {"b", 0, 1}}},
	}
	var buf []AdapterLoad
	for _, s := range steps {
		s.do()
		got := r.Adapters(buf)
		if !slices.Equal(got.Adapters, s.want) {
			t.Errorf("%s: Adapters %+v, want %+v", s.name, got.Adapters, s.want)
		}
		buf = got.Adapters
	}
}
