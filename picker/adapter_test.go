package picker

import (
	"strings"
	"testing"
	"time"
)

// TestAdapterTiers: a request for a LoRA adapter goes to a replica that
// has it loaded and is not saturated, else to one that has it but is
// saturated while the adapter's share of the requests asks for no more
// replicas than hold it, else to one that may load it now (a free slot),
// and to a replica whose slots other adapters take only when every
// replica is so; within a tier, the least cost wins.
func TestAdapterTiers(t *testing.T) {
	at := time.Unix(1000, 0)
	rep := func(slots int, running ...string) Adapters {
		return Adapters{Known: true, Running: running, Max: slots}
	}
	// bound: requests of the running adapters wait for the batch.
	bound := func(slots int, running ...string) Adapters {
		return Adapters{Known: true, Running: running, Waiting: running, Max: slots}
	}
	tests := []struct {
		name      string
		cands     []Replica
		busy      map[string]int // requests already on a replica (its load): of the base model, or "addr/adapter"'s
		adapter   string
		want      string
		wantTier  string
		wantTerms int
	}{
		{
			"loaded beats idle", []Replica{
				{Address: "a", Ramp: 1, ScrapedAt: at, Adapters: rep(4, "sql")},
				{Address: "b", Ramp: 1, ScrapedAt: at, Adapters: rep(4)},
			}, map[string]int{"a": 3}, "sql", "a", AdapterLoaded, 1,
		},
		{
			"waiting counts as loaded", []Replica{
				{Address: "a", Ramp: 1, ScrapedAt: at, Adapters: Adapters{Known: true, Waiting: []string{"sql"}, Max: 4}},
				{Address: "b", Ramp: 1, ScrapedAt: at, Adapters: rep(4)},
			}, map[string]int{"a": 3}, "sql", "a", AdapterLoaded, 1,
		},
		{
			"loaded but saturated keeps an adapter of a small share", []Replica{
				{Address: "a", Ramp: 1, Saturated: true, ScrapedAt: at, Adapters: rep(4, "sql")},
				{Address: "b", Ramp: 1, ScrapedAt: at, Adapters: rep(4, "chat")},
			}, map[string]int{"a": 3}, "sql", "a", AdapterBusy, 1,
		},
		{
			// Every request so far was sql's: its share of two replicas
			// asks for both, and one holds it, compute-bound.
			"loaded but saturated spills an adapter whose share asks for more replicas", []Replica{
				{Address: "a", Ramp: 1, Saturated: true, ScrapedAt: at, Adapters: bound(4, "sql")},
				{Address: "b", Ramp: 1, ScrapedAt: at, Adapters: rep(4, "chat")},
			}, map[string]int{"a/sql": 3}, "sql", "b", AdapterSpread, 1,
		},
		{
			"loaded but saturated and slot-bound keeps an adapter whose share asks for more replicas", []Replica{
				{Address: "a", Ramp: 1, Saturated: true, ScrapedAt: at, Adapters: Adapters{Known: true, Running: []string{"sql"}, Waiting: []string{"chat", "sql"}, Max: 1}},
				{Address: "b", Ramp: 1, ScrapedAt: at, Adapters: rep(4, "chat")},
			}, map[string]int{"a/sql": 3}, "sql", "a", AdapterBusy, 1,
		},
		{
			// The holder is not saturated, but its requests wait for
			// its batch: the idle replica with a free slot ranks with it
			// and costs less.
			"a compute-bound holder spreads an adapter whose share asks for more replicas", []Replica{
				{Address: "a", Ramp: 1, ScrapedAt: at, Adapters: bound(4, "sql")},
				{Address: "b", Ramp: 1, ScrapedAt: at, Adapters: rep(4, "chat")},
			}, map[string]int{"a/sql": 3}, "sql", "b", AdapterSpread, 2,
		},
		{
			// sql asks for all three replicas; one of its two holders is
			// compute-bound: the replica with a free slot ranks with both
			// and costs least.
			"one compute-bound holder of two spreads an adapter whose share asks for more replicas", []Replica{
				{Address: "a", Ramp: 1, ScrapedAt: at, Adapters: bound(4, "sql")},
				{Address: "b", Ramp: 1, ScrapedAt: at, Adapters: rep(4, "chat")},
				{Address: "c", Ramp: 1, ScrapedAt: at, Adapters: rep(4, "sql")},
			}, map[string]int{"a/sql": 3, "c/sql": 2}, "sql", "b", AdapterSpread, 3,
		},
		{
			"a holder with nothing waiting keeps the adapter", []Replica{
				{Address: "a", Ramp: 1, ScrapedAt: at, Adapters: rep(4, "sql")},
				{Address: "b", Ramp: 1, ScrapedAt: at, Adapters: rep(4, "chat")},
			}, map[string]int{"a/sql": 3}, "sql", "a", AdapterLoaded, 1,
		},
		{
			"a slot-bound holder keeps the adapter", []Replica{
				{Address: "a", Ramp: 1, ScrapedAt: at, Adapters: Adapters{Known: true, Running: []string{"sql"}, Waiting: []string{"chat", "sql"}, Max: 1}},
				{Address: "b", Ramp: 1, ScrapedAt: at, Adapters: rep(4, "chat")},
			}, map[string]int{"a/sql": 3}, "sql", "a", AdapterLoaded, 1,
		},
		{
			// sql is a quarter of the requests: half of two replicas, and
			// one holds it.
			"a compute-bound holder keeps an adapter of a small share", []Replica{
				{Address: "a", Ramp: 1, ScrapedAt: at, Adapters: bound(4, "sql")},
				{Address: "b", Ramp: 1, ScrapedAt: at, Adapters: rep(4, "chat")},
			}, map[string]int{"a": 3}, "sql", "a", AdapterLoaded, 1,
		},
		{
			// sql is a quarter of the requests, but its one holder's
			// engine left requests waiting at every scrape for a while, all
			// of adapters it runs: it admits no more.
			"a compute-bound holder whose queue lasts spreads an adapter of a small share", []Replica{
				{Address: "a", Ramp: 1, ScrapedAt: at, Adapters: bound(4, "sql"), QueueLasting: true},
				{Address: "b", Ramp: 1, ScrapedAt: at, Adapters: rep(4, "chat")},
			}, map[string]int{"a": 3}, "sql", "b", AdapterSpread, 2,
		},
		{
			// Its queue lasts, but requests of another adapter wait there
			// for a slot: spreading would take a slot another adapter
			// lacks.
			"a slot-bound holder whose queue lasts keeps the adapter", []Replica{
				{Address: "a", Ramp: 1, ScrapedAt: at, Adapters: Adapters{Known: true, Running: []string{"sql"}, Waiting: []string{"chat", "sql"}, Max: 1}, QueueLasting: true},
				{Address: "b", Ramp: 1, ScrapedAt: at, Adapters: rep(4, "chat")},
			}, map[string]int{"a": 3}, "sql", "a", AdapterLoaded, 1,
		},
		{
			// b's batch ran two adapters, its max_lora, at its last
			// scrape: sql's requests there wait for a slot. a runs sql.
			"a replica running the adapter beats one where it waits for a slot", []Replica{
				{Address: "a", Ramp: 1, ScrapedAt: at, Adapters: rep(2, "chat", "sql")},
				{Address: "b", Ramp: 1, ScrapedAt: at, Adapters: Adapters{Known: true, Running: []string{"chat", "code"}, Waiting: []string{"sql"}, Max: 2}},
			}, map[string]int{"a": 5}, "sql", "a", AdapterLoaded, 1,
		},
		{
			// No replica runs sql: b, where its requests wait for a slot,
			// beats c, which has a free slot and costs less.
			"where the adapter waits for a slot beats where it would be loaded", []Replica{
				{Address: "b", Ramp: 1, ScrapedAt: at, Adapters: Adapters{Known: true, Running: []string{"chat", "code"}, Waiting: []string{"sql"}, Max: 2}},
				{Address: "c", Ramp: 1, ScrapedAt: at, Adapters: rep(2, "chat")},
			}, map[string]int{"b": 5}, "sql", "b", AdapterSlotWait, 1,
		},
		{
			"never a full replica while another has a slot", []Replica{
				{Address: "a", Ramp: 1, ScrapedAt: at, Adapters: rep(2, "chat", "code")},
				{Address: "b", Ramp: 1, ScrapedAt: at, Adapters: rep(2, "chat")},
			}, map[string]int{"b": 5}, "sql", "b", AdapterSlot, 1,
		},
		{
			"every replica full: the least cost", []Replica{
				{Address: "a", Ramp: 1, ScrapedAt: at, Adapters: rep(1, "chat")},
				{Address: "b", Ramp: 1, ScrapedAt: at, Adapters: rep(1, "code")},
			}, map[string]int{"a": 2}, "sql", "b", AdapterFull, 2,
		},
		{
			"no report: a slot may be free", []Replica{
				{Address: "a", Ramp: 1},
				{Address: "b", Ramp: 1},
			}, map[string]int{"a": 2}, "sql", "b", AdapterSlot, 2,
		},
		{
			"the base model ignores adapters", []Replica{
				{Address: "a", Ramp: 1, ScrapedAt: at, Adapters: rep(4, "sql")},
				{Address: "b", Ramp: 1, ScrapedAt: at, Adapters: rep(4)},
			}, map[string]int{"a": 3}, "", "b", "", 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCluster(Options{CacheTokens: 1 << 16})
			for key, n := range tc.busy {
				addr, adapter, _ := strings.Cut(key, "/") // "a/sql": requests of sql on a
				for range n {
					c.Pick([]Replica{{Address: addr, Ramp: 1}}, Request{PromptTokens: 100, Adapter: adapter})
				}
			}
			d, tk := c.Pick(tc.cands, Request{PromptTokens: 100, Adapter: tc.adapter})
			defer tk.Done()
			if d.Chosen.Address != tc.want || d.Adapter != tc.wantTier {
				t.Errorf("chose %s (tier %q), want %s (tier %q)", d.Chosen.Address, d.Adapter, tc.want, tc.wantTier)
			}
			if n := len(d.Hosts); n != tc.wantTerms {
				t.Errorf("%d hosts %v, want %d candidates of the tier", n, d.Hosts, tc.wantTerms)
			}
			if d.Chosen.Adapter != tc.wantTier {
				t.Errorf("chosen term's tier %q, want %q", d.Chosen.Adapter, tc.wantTier)
			}
		})
	}
}

// TestAdapterMemory: an adapter ILB sent a replica counts as loaded there
// while it is among the last max_lora adapters ILB sent it (the engine's
// GPU slots are an LRU), takes a slot until a newer scrape, and once
// pushed out of the slots the replica stays the best place for it, its
// slots free or not (the engine's CPU cache: a copy, not a load from
// disk).
func TestAdapterMemory(t *testing.T) {
	c := NewCluster(Options{CacheTokens: 1 << 16})
	t0 := time.Unix(1000, 0)
	empty := Adapters{Known: true, Max: 1}
	both := func(at time.Time) []Replica {
		return []Replica{{Address: "a", Ramp: 1, ScrapedAt: at, Adapters: empty}, {Address: "b", Ramp: 1, ScrapedAt: at, Adapters: empty}}
	}
	pick := func(cands []Replica, adapter string) Decision {
		t.Helper()
		d, tk := c.Pick(cands, Request{PromptTokens: 100, Adapter: adapter})
		tk.Done()
		return d
	}
	first := pick(both(t0), "sql").Chosen.Address
	other := map[string]string{"a": "b", "b": "a"}[first]
	if d := pick(both(t0), "sql"); d.Chosen.Address != first || d.Adapter != AdapterLoaded {
		t.Fatalf("second sql request went to %s (%s), want %s (loaded)", d.Chosen.Address, d.Adapter, first)
	}
	// Another adapter before the next scrape: first's one slot holds sql.
	if d := pick(both(t0), "chat"); d.Chosen.Address != other {
		t.Fatalf("chat went to %s, want %s: %s's only slot holds sql", d.Chosen.Address, other, first)
	}
	// A newer scrape shows nothing running: sql is still the last
	// adapter ILB sent first, in its slot.
	t1 := t0.Add(time.Second)
	if d := pick(both(t1), "sql"); d.Chosen.Address != first || d.Adapter != AdapterLoaded {
		t.Errorf("after the scrape: sql went to %s (%s), want %s (loaded: its slot's last adapter)", d.Chosen.Address, d.Adapter, first)
	}
	// Code takes first's slot; sql is then cached there, not loaded.
	only := []Replica{both(t1)[map[string]int{"a": 0, "b": 1}[first]]}
	pick(only, "code")
	t2 := t1.Add(time.Second)
	if d := pick(both(t2), "sql"); d.Chosen.Address != first || d.Adapter != AdapterCached {
		t.Errorf("after code took the slot: sql went to %s (%s), want %s (cached)", d.Chosen.Address, d.Adapter, first)
	}
	// Its one slot busy with code's requests, the other replica's free:
	// sql still goes where it is cached, to wait for the slot, rather
	// than to a load from disk on the other.
	only = []Replica{both(t2)[map[string]int{"a": 0, "b": 1}[first]]}
	pick(only, "code")
	t3 := t2.Add(time.Second)
	cands := both(t3)
	for i := range cands {
		if cands[i].Address == first {
			cands[i].Adapters = Adapters{Known: true, Max: 1, Running: []string{"code"}}
		}
	}
	if d := pick(cands, "sql"); d.Chosen.Address != first || d.Adapter != AdapterCached {
		t.Errorf("with its slot busy: sql went to %s (%s), want %s (cached: a wait for the slot, not a load from disk)", d.Chosen.Address, d.Adapter, first)
	}
}

// TestAdapterShares: an adapter's share follows the recent requests
// (half-life adapterHalfLife), stays exact through the weights'
// rescaling, and past maxAdapterShares adapters a new one reads 0 while
// its requests still count in the total.
func TestAdapterShares(t *testing.T) {
	tests := []struct {
		name     string
		requests func(a *adapterShares)
		adapter  string
		lo, hi   float64
	}{
		{"none yet", func(*adapterShares) {}, "sql", 0, 0},
		{"half and half", func(a *adapterShares) {
			for i := range 4000 {
				a.add([]string{"sql", ""}[i%2])
			}
		}, "sql", 0.49, 0.51},
		{"a change of mix is followed", func(a *adapterShares) {
			for range 5000 {
				a.add("sql")
			}
			for range 5 * adapterHalfLife {
				a.add("chat")
			}
		}, "sql", 0.02, 0.04}, // 2^-5
		{"through many rescalings", func(a *adapterShares) {
			for i := range 200_000 {
				a.add([]string{"sql", "chat", "code", ""}[i%4])
			}
		}, "code", 0.24, 0.26},
		{"past the bound a new adapter reads 0", func(a *adapterShares) {
			for i := range maxAdapterShares {
				a.add(strings.Repeat("x", 1+i%7) + string(rune('a'+i%26)) + string(rune(i)))
			}
			for range 100 {
				a.add("late")
			}
		}, "late", 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var a adapterShares
			tc.requests(&a)
			if got := a.share(tc.adapter); got < tc.lo || got > tc.hi {
				t.Errorf("share of %q = %v, want in [%v, %v]", tc.adapter, got, tc.lo, tc.hi)
			}
			if len(a.weight) > maxAdapterShares {
				t.Errorf("%d adapters followed, more than %d", len(a.weight), maxAdapterShares)
			}
		})
	}
}

// TestAdapterCPUMemory: an adapter ILB sent a replica further back is
// cached there (a copy from CPU memory, not a load from disk) only while
// it is among the last MaxCPULoras distinct adapters ILB sent it: the
// engine's CPU cache is an LRU of --max-cpu-loras.
func TestAdapterCPUMemory(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name     string
		cpu      int // Options.MaxCPULoras
		wantTier string
	}{
		{"unknown: the last 64 it sent", 0, AdapterCached},
		{"three in CPU memory: sql is the third last", 3, AdapterCached},
		{"two in CPU memory: sql is evicted", 2, AdapterSlot},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCluster(Options{CacheTokens: 1 << 16, MaxCPULoras: tc.cpu})
			a := []Replica{{Address: "a", Ramp: 1, ScrapedAt: t0, Adapters: Adapters{Known: true, Max: 1}}}
			for _, ad := range []string{"sql", "chat", "code"} {
				_, tk := c.Pick(a, Request{PromptTokens: 100, Adapter: ad})
				tk.Done()
			}
			// A newer scrape: nothing runs, one slot each, "a" last held code.
			t1 := t0.Add(time.Second)
			both := []Replica{
				{Address: "a", Ramp: 1, ScrapedAt: t1, Adapters: Adapters{Known: true, Max: 1}},
				{Address: "b", Ramp: 1, ScrapedAt: t1, Adapters: Adapters{Known: true, Max: 1}},
			}
			d, tk := c.Pick(both, Request{PromptTokens: 100, Adapter: "sql"})
			tk.Done()
			if d.Adapter != tc.wantTier || tc.wantTier == AdapterCached && d.Chosen.Address != "a" {
				t.Errorf("sql went to %s (tier %q), want tier %q (on a when cached)", d.Chosen.Address, d.Adapter, tc.wantTier)
			}
		})
	}
}
