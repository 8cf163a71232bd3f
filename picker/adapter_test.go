package picker

import (
	"testing"
	"time"
)

// TestAdapterTiers: a request for a LoRA adapter goes to a replica that
// has it loaded and is not saturated, else to one that may load it now
// (a free slot), and to a replica whose slots other adapters take only
// when every replica is so; within a tier, the least cost wins.
func TestAdapterTiers(t *testing.T) {
	at := time.Unix(1000, 0)
	rep := func(max int, running ...string) Adapters {
		return Adapters{Known: true, Running: running, Max: max}
	}
	tests := []struct {
		name      string
		cands     []Replica
		busy      map[string]int // base-model requests already on a replica (its load)
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
			"loaded but saturated competes with a free slot by cost", []Replica{
				{Address: "a", Ramp: 1, Saturated: true, ScrapedAt: at, Adapters: rep(4, "sql")},
				{Address: "b", Ramp: 1, ScrapedAt: at, Adapters: rep(4, "chat")},
			}, map[string]int{"a": 3}, "sql", "b", AdapterSlot, 2,
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
			for addr, n := range tc.busy {
				for range n {
					c.Pick([]Replica{{Address: addr, Ramp: 1}}, Request{PromptTokens: 100})
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

// TestAdapterSentCountsUntilScraped: an adapter ILB sent a replica counts
// as loaded there (and takes a slot) until a newer scrape, which reports
// it if it still runs; its requests in flight count until done.
func TestAdapterSentCountsUntilScraped(t *testing.T) {
	c := NewCluster(Options{CacheTokens: 1 << 16})
	t0 := time.Unix(1000, 0)
	cands := func(at time.Time, a, b Adapters) []Replica {
		return []Replica{{Address: "a", Ramp: 1, ScrapedAt: at, Adapters: a}, {Address: "b", Ramp: 1, ScrapedAt: at, Adapters: b}}
	}
	empty := Adapters{Known: true, Max: 1}
	d1, t1 := c.Pick(cands(t0, empty, empty), Request{PromptTokens: 100, Adapter: "sql", Draw: 0})
	first := d1.Chosen.Address
	other := map[string]string{"a": "b", "b": "a"}[first]
	// The same adapter follows it, though the other replica is idle.
	d2, t2 := c.Pick(cands(t0, empty, empty), Request{PromptTokens: 100, Adapter: "sql", Draw: 1})
	if d2.Chosen.Address != first || d2.Adapter != AdapterLoaded {
		t.Fatalf("second sql request went to %s (%s), want %s (loaded)", d2.Chosen.Address, d2.Adapter, first)
	}
	// Another adapter: the first replica's one slot is taken by sql.
	d3, t3 := c.Pick(cands(t0, empty, empty), Request{PromptTokens: 1, Adapter: "chat"})
	if d3.Chosen.Address != other {
		t.Fatalf("chat went to %s, want %s: %s's only slot holds sql", d3.Chosen.Address, other, first)
	}
	t1.Done()
	t2.Done()
	t3.Done()
	// A newer scrape that does not list sql: forgotten, both are equal.
	t1s := t0.Add(time.Second)
	d4, t4 := c.Pick(cands(t1s, empty, empty), Request{PromptTokens: 100, Adapter: "sql"})
	defer t4.Done()
	if d4.Adapter != AdapterSlot || len(d4.Hosts) != 2 {
		t.Errorf("after a scrape without sql: tier %q among %v, want free_slot among both", d4.Adapter, d4.Hosts)
	}
}
