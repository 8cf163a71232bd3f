package decision

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ilbproject/ilb/picker"
)

func TestLogRing(t *testing.T) {
	l := NewLog(3, 0)
	for i := range 5 {
		l.Add(&Record{RequestID: "r" + strconv.Itoa(i)})
	}
	for _, tt := range []struct {
		id   string
		kept bool
	}{{"r0", false}, {"r1", false}, {"r2", true}, {"r3", true}, {"r4", true}} {
		if _, ok := l.Get(tt.id); ok != tt.kept {
			t.Errorf("Get(%s) kept = %v; want %v", tt.id, ok, tt.kept)
		}
	}
	recent := l.Recent(10)
	if len(recent) != 3 || recent[0].RequestID != "r4" || recent[2].RequestID != "r2" {
		t.Errorf("Recent = %v; want r4, r3, r2", recent)
	}
	// A later record with the same id wins; evicting the older one must
	// not drop the newer from the index.
	l.Add(&Record{RequestID: "r2", Model: "new"})
	l.Add(&Record{RequestID: "x"})
	if r, ok := l.Get("r2"); !ok || r.Model != "new" {
		t.Errorf("Get(r2) = %+v, %v; want the newer record", r, ok)
	}
}

func TestLogBoundedInBytes(t *testing.T) {
	const limit = 64 << 10
	l := NewLog(1000, limit)
	for i := range 500 {
		l.Add(&Record{RequestID: "r" + strconv.Itoa(i), Redrawn: string(make([]byte, 300))})
		if b := l.Bytes(); b > limit {
			t.Fatalf("after %d records the log holds %d bytes; limit %d", i+1, b, limit)
		}
	}
	kept := l.Recent(1000)
	per := entryOverhead + 300 + 2 + 4 + 1 // the id and the explanation inline, with their lengths
	if len(kept) < limit/per-1 || len(kept) > limit/per+1 {
		t.Errorf("kept %d records of ~%d bytes under %d bytes", len(kept), per, limit)
	}
	if kept[0].RequestID != "r499" || kept[0].Seq != 500 {
		t.Errorf("newest = %s (seq %d); want r499 (seq 500)", kept[0].RequestID, kept[0].Seq)
	}
	if _, ok := l.Get("r0"); ok {
		t.Error("the oldest record is still indexed")
	}
	// Updates count too: a record that grows can evict others.
	r := &Record{RequestID: "grow"}
	l.Add(r)
	before := len(l.Recent(1000))
	_ = l.Update(r, func(r *Record) { r.UpstreamHost = string(make([]byte, 8000)) })
	l.Add(&Record{RequestID: "next"})
	if b := l.Bytes(); b > limit {
		t.Errorf("after an update the log holds %d bytes; limit %d", b, limit)
	}
	if after := len(l.Recent(1000)); after >= before+1 {
		t.Errorf("a grown record evicted nothing: %d records, then %d", before, after)
	}
}

func TestLogPages(t *testing.T) {
	l := NewLog(10, 0)
	for i := range 8 {
		l.Add(&Record{RequestID: "r" + strconv.Itoa(i), Source: []string{"a", "b"}[i%2]})
	}
	page := l.Find(Filter{Source: "a"}, 2)
	if len(page) != 2 || page[0].RequestID != "r6" || page[1].RequestID != "r4" {
		t.Fatalf("first page = %v", page)
	}
	next := l.Find(Filter{Source: "a", Before: page[1].Seq}, 2)
	if len(next) != 2 || next[0].RequestID != "r2" || next[1].RequestID != "r0" {
		t.Errorf("second page = %v; want r2, r0", next)
	}
}

// TestLogConcurrent: writers add and complete records while readers page,
// get and tally (run with -race). Every page is newest first without
// duplicates, every record read is a whole version (complete ones carry
// their response), and once the writers stop the log keeps exactly the
// newest records within its bounds, each found by id, with the bytes
// counted matching the records kept.
func TestLogConcurrent(t *testing.T) {
	const size, writers, perWriter = 64, 4, 2000
	l := NewLog(size, 48<<10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := l.Subscribe(ctx, Filter{}, writers*perWriter)
	var wg, readers sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				r := &Record{RequestID: strconv.Itoa(w) + "-" + strconv.Itoa(i), Source: "s", Reason: "weighted"}
				l.Add(r)
				if i%3 != 0 {
					_ = l.Update(r, func(r *Record) {
						r.ServedCluster, r.UpstreamHost, r.Complete = "c", strings.Repeat("h", i%200), true
					})
				}
			}
		})
	}
	stop := make(chan struct{})
	errs := make(chan error, 3)
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				page := l.Find(Filter{Source: "s"}, size)
				for i, r := range page {
					switch {
					case i > 0 && r.Seq >= page[i-1].Seq:
						errs <- fmt.Errorf("page not newest first: seq %d after %d", r.Seq, page[i-1].Seq)
						return
					case r.Complete && r.ServedCluster != "c":
						errs <- fmt.Errorf("record %s complete without its response: %+v", r.RequestID, r)
						return
					}
					if got, ok := l.Get(r.RequestID); ok && got.Seq != r.Seq {
						errs <- fmt.Errorf("Get(%s) = seq %d; the page had seq %d", r.RequestID, got.Seq, r.Seq)
						return
					}
				}
				_ = l.Tally(0)
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	kept := l.Recent(size + 1)
	var bytes int64
	for i, r := range kept {
		bytes += int64(encode(&r, &l.in, nil).size)
		if got, ok := l.Get(r.RequestID); !ok || got.Seq != r.Seq {
			t.Errorf("kept record %s (seq %d) not found by id: %+v, %v", r.RequestID, r.Seq, got, ok)
		}
		if want := uint64(writers*perWriter - i); r.Seq != want {
			t.Errorf("kept record %d has seq %d; want %d (the newest, in sequence)", i, r.Seq, want)
		}
	}
	if len(kept) == 0 || len(kept) > size || bytes != l.Bytes() || bytes > 48<<10+int64(encode(&kept[0], &l.in, nil).size) {
		t.Errorf("%d records kept, %d bytes counted, %d estimated; want 1..%d records within the bound, counted exactly", len(kept), l.Bytes(), bytes, size)
	}
	// Deliveries are made by the writers themselves: all are buffered now.
	want := writers * (perWriter - (perWriter+2)/3) // i%3 != 0 completes
	if n := len(sub.Records()); n != want {
		t.Fatalf("%d deliveries; want each completed record exactly once (%d)", n, want)
	}
	seen := map[string]bool{}
	for range want {
		d := <-sub.Records()
		if !d.Record.Complete || d.DroppedBefore != 0 || seen[d.Record.RequestID] {
			t.Fatalf("delivery %+v (delivered before: %v)", d, seen[d.Record.RequestID])
		}
		seen[d.Record.RequestID] = true
	}
	if n := sub.Dropped(); n != 0 {
		t.Errorf("%d dropped; want none", n)
	}
}

// TestUpdateStrings: an update's version reads back exactly as written,
// whether it changed the strings kept inline or not — including a change
// that keeps their total length, and a value moving between the
// interned table and the inline text.
func TestUpdateStrings(t *testing.T) {
	long := strings.Repeat("h", maxInterned+1)
	for _, tc := range []struct {
		name   string
		first  func(*Record)
		update func(*Record)
	}{
		{"nothing inline changes", func(*Record) {}, func(r *Record) { r.Status, r.Complete = 200, true }},
		{"an interned field changes", func(*Record) {}, func(r *Record) { r.ServedCluster = "c2" }},
		{"same length, other text", func(r *Record) { r.Unanswered = "aaaa" }, func(r *Record) { r.Unanswered = "bbbb" }},
		{"moved between fields", func(r *Record) { r.Redrawn = "xy" }, func(r *Record) { r.Redrawn, r.Unanswered = "", "xy" }},
		{"interned to inline", func(r *Record) { r.UpstreamHost = "10.0.0.1:8000" }, func(r *Record) { r.UpstreamHost = long }},
		{"inline to interned", func(r *Record) { r.UpstreamHost = long }, func(r *Record) { r.UpstreamHost = "10.0.0.1:8000" }},
		{"inline emptied", func(r *Record) { r.Redrawn = "why" }, func(r *Record) { r.Redrawn = "" }},
		{"a tenant's share kept", func(r *Record) {
			r.Tenant, r.TenantFrom, r.TenantDemand, r.TenantFair, r.TenantShed = "team-a", "header", 0.6, 0.25, 0.5
		}, func(r *Record) { r.Status = 429 }},
		{"a tenant's share set by the update", func(r *Record) { r.Tenant = "team-a" }, func(r *Record) { r.TenantDemand, r.TenantFair, r.TenantShed = 0.1, 0.3, 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLog(8, 0)
			r := &Record{RequestID: "req-1", Source: "edge", Path: "/v1/chat/completions", Chosen: "c1", SessionHash: "abc"}
			tc.first(r)
			l.Add(r)
			r = l.Update(r, tc.update)
			got, ok := l.Get("req-1")
			if !ok {
				t.Fatal("the record is not found")
			}
			want := *r
			want.stored, want.repEncoded = nil, nil
			if !reflect.DeepEqual(got, want) {
				t.Errorf("read back %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestUpdateReplica: a replica decision reads back exactly as the
// record's latest version has it, when an update replaces it with a copy
// that notes the serving replica only (kept compactly from the last
// version), with a copy that changes more, with one the log cannot keep
// compactly, or leaves it as it was.
func TestUpdateReplica(t *testing.T) {
	decided := func() *ReplicaDecision {
		ru := picker.Term{Address: "10.0.0.2:8000", Cached: 64, InFlight: 3, Decode: 1.5, Cost: 900}
		return &ReplicaDecision{
			Chosen: "10.0.0.1:8000", Hosts: []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}, Reason: "prefix", PromptBlocks: 4,
			Terms:    picker.Term{Address: "10.0.0.1:8000", Cached: 256, InFlight: 1, Awaiting: 12, Decode: 0.5, Cost: 300, Saturated: true},
			RunnerUp: &ru, Lost: "more_work",
		}
	}
	for _, tc := range []struct {
		name   string
		first  func() *ReplicaDecision
		update func(d ReplicaDecision) *ReplicaDecision // d: a copy of the stored one
	}{
		{"served noted on a copy", decided, func(d ReplicaDecision) *ReplicaDecision { d.Served = "chosen"; return &d }},
		{"served and more changed", decided, func(d ReplicaDecision) *ReplicaDecision { d.Served, d.Reason = "other", "load"; return &d }},
		{"a runner-up of other terms", decided, func(d ReplicaDecision) *ReplicaDecision {
			ru := *d.RunnerUp
			ru.Cost++
			d.Served, d.RunnerUp = "chosen", &ru
			return &d
		}},
		{"a host list too long to keep compactly", func() *ReplicaDecision {
			d := decided()
			d.Hosts = append(d.Hosts, "10.0.0.4:8000")
			return d
		}, func(d ReplicaDecision) *ReplicaDecision { d.Served = "chosen"; return &d }},
		{"left as it was", decided, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLog(8, 0)
			r := &Record{RequestID: "req-1", Chosen: "c1", Replica: tc.first()}
			l.Add(r)
			r = l.Update(r, func(r *Record) {
				r.Status, r.Complete = 200, true
				if tc.update != nil {
					r.Replica = tc.update(*r.Replica)
				}
			})
			got, ok := l.Get("req-1")
			if !ok {
				t.Fatal("the record is not found")
			}
			if !reflect.DeepEqual(got.Replica, r.Replica) {
				t.Errorf("read back %+v\nwant %+v", got.Replica, r.Replica)
			}
		})
	}
}

// TestEncodeHintedSame: a record is encoded the same whatever entry hints
// its codes — none, one of equal values, one of other values, one with
// a replica decision or without.
func TestEncodeHintedSame(t *testing.T) {
	rd := func(chosen string) *ReplicaDecision {
		return &ReplicaDecision{
			Chosen: chosen, Hosts: []string{chosen, "10.0.0.9:8000"}, Reason: "load", Terms: picker.Term{Address: chosen},
			RunnerUp: &picker.Term{Address: "10.0.0.9:8000"}, Lost: "tie",
		}
	}
	l := NewLog(8, 0)
	for _, r := range []*Record{
		{RequestID: "a", Source: "edge-us", Method: "POST", Model: "m1", Chosen: "c1", Reason: "weighted", Replica: rd("10.0.0.1:8000")},
		{RequestID: "b", Source: "edge-eu", Method: "GET", Model: "m2", Chosen: "c2", Reason: "session", PriorityFrom: "header"},
		{RequestID: "c", Source: "edge-us", Method: "POST", Model: "m1", Chosen: "c2", Reason: "steered", Replica: rd("10.0.0.2:8000")},
	} {
		l.Add(r)
	}
	for _, r := range []*Record{
		{RequestID: "d", Source: "edge-us", Method: "POST", Model: "m1", Chosen: "c1", Reason: "weighted", Replica: rd("10.0.0.2:8000")},
		{RequestID: "e", Source: "edge-new", Method: "PUT", Model: "m3", Chosen: "c3", Reason: "redrawn", Replica: rd("10.0.0.3:8000")},
		{RequestID: "f", Source: "edge-eu", Method: "GET", Model: "m2", Chosen: "c2", Reason: "session"},
	} {
		want := encodeHinted(r, &l.in, nil, nil)
		for seq := uint64(1); seq <= 3; seq++ {
			if got := encodeHinted(r, &l.in, nil, l.load(seq)); !reflect.DeepEqual(got, want) {
				t.Errorf("record %s hinted by record %d: %+v\nwant %+v", r.RequestID, seq, got, want)
			}
		}
	}
}

// TestReplicaTiersCompact: a replica decision of every adapter tier the
// picker names is kept compactly and read back as it was.
func TestReplicaTiersCompact(t *testing.T) {
	for _, tier := range []string{"", picker.AdapterLoaded, picker.AdapterSpread, picker.AdapterSlotWait, picker.AdapterBusy, picker.AdapterCached, picker.AdapterSlot, picker.AdapterFull} {
		t.Run("tier "+tier, func(t *testing.T) {
			d := &ReplicaDecision{
				Chosen: "10.0.0.1:8000", Hosts: []string{"10.0.0.1:8000"}, Reason: "load", PromptBlocks: 1,
				Terms: picker.Term{Address: "10.0.0.1:8000", Cost: 10, Adapter: tier},
			}
			if _, ok := encodeReplica(d, &interner{}, nil); !ok {
				t.Fatalf("tier %q is not kept compactly", tier)
			}
			l := NewLog(8, 0)
			l.Add(&Record{RequestID: "req-1", Chosen: "c1", Replica: d})
			if got, ok := l.Get("req-1"); !ok || !reflect.DeepEqual(got.Replica, d) {
				t.Errorf("read back %+v, want %+v", got.Replica, d)
			}
		})
	}
}
