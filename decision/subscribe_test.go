package decision

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// recv returns the records s delivers until none comes for a while.
func recv(t *testing.T, s *Subscription) []string {
	t.Helper()
	var ids []string
	for {
		select {
		case d, ok := <-s.Records():
			if !ok {
				return ids
			}
			ids = append(ids, d.Record.RequestID)
		case <-time.After(50 * time.Millisecond):
			return ids
		}
	}
}

func TestLogSubscribeFilters(t *testing.T) {
	tests := []struct {
		name string
		f    Filter
		want []string
	}{
		{"no filter: every completed record once", Filter{}, []string{"rejected", "served", "other"}},
		{"source", Filter{Source: "edge-eu"}, []string{"other"}},
		{"model", Filter{Model: "m1"}, []string{"rejected", "served"}},
		{"chosen cluster", Filter{Cluster: "a"}, []string{"served"}},
		{"served cluster", Filter{Cluster: "b"}, []string{"served", "other"}},
		{"reason", Filter{Reason: "shed"}, []string{"rejected"}},
		{"unknown value matches nothing", Filter{Source: "edge-mars"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLog(10, 0)
			l.Add(&Record{RequestID: "before", Source: "edge-us", Complete: true})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := l.Subscribe(ctx, tt.f, 0)
			l.Add(&Record{RequestID: "rejected", Source: "edge-us", Model: "m1", Reason: "shed", Complete: true})
			served := &Record{RequestID: "served", Source: "edge-us", Model: "m1", Reason: "weighted", Chosen: "a"}
			l.Add(served) // decided: not sent yet
			other := &Record{RequestID: "other", Source: "edge-eu", Model: "m2", Reason: "steered", Chosen: "c"}
			l.Add(other)
			l.Add(&Record{RequestID: "never-completes", Source: "edge-us", Model: "m1", Chosen: "a"})
			served = l.Update(served, func(r *Record) { r.ServedCluster, r.Complete = "b", true })
			l.Update(served, func(r *Record) { r.Status = 200 }) // already complete: not sent again
			l.Update(other, func(r *Record) { r.ServedCluster, r.Complete = "b", true })
			got := recv(t, s)
			if len(got) != len(tt.want) {
				t.Fatalf("got %v; want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v; want %v", got, tt.want)
				}
			}
		})
	}
}

func TestLogFind(t *testing.T) {
	l := NewLog(4, 0)
	for i := range 6 {
		l.Add(&Record{RequestID: "r" + strconv.Itoa(i), Source: []string{"x", "y"}[i%2]})
	}
	got := l.Find(Filter{Source: "x"}, 10)
	if len(got) != 2 || got[0].RequestID != "r4" || got[1].RequestID != "r2" {
		t.Errorf("Find(source x) = %v; want r4, r2 (r0 was evicted)", got)
	}
	if got := l.Find(Filter{Source: "y"}, 1); len(got) != 1 || got[0].RequestID != "r5" {
		t.Errorf("Find(source y, 1) = %v; want r5", got)
	}
}

func TestLogSubscribeSlowReaderDrops(t *testing.T) {
	l := NewLog(10, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := l.Subscribe(ctx, Filter{}, 2)
	for i := range 5 {
		l.Add(&Record{RequestID: "r" + strconv.Itoa(i), Complete: true}) // never blocks
	}
	if n := s.Dropped(); n != 3 {
		t.Errorf("Dropped = %d; want 3", n)
	}
	if n := s.Dropped(); n != 0 {
		t.Errorf("Dropped again = %d; want 0 (reset)", n)
	}
	if got := recv(t, s); len(got) != 2 || got[0] != "r0" || got[1] != "r1" {
		t.Errorf("kept %v; want the first two", got)
	}
}

// TestLogSubscribeCancel: a cancelled subscription is closed and
// forgotten while writers keep writing; run with -race.
func TestLogSubscribeCancel(t *testing.T) {
	l := NewLog(100, 0)
	var writers sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		writers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := &Record{RequestID: strconv.Itoa(w) + "-" + strconv.Itoa(i)}
				l.Add(r)
				l.Update(r, func(r *Record) { r.Complete = true })
			}
		})
	}
	var readers sync.WaitGroup
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		s := l.Subscribe(ctx, Filter{}, 4)
		readers.Go(func() {
			for range s.Records() { // ends when cancelled
			}
		})
		time.Sleep(time.Millisecond)
		cancel()
	}
	readers.Wait()
	close(stop)
	writers.Wait()
	if n := len(l.subscriptions()); n != 0 {
		t.Errorf("%d subscriptions left after cancel", n)
	}
}

// TestLogSubscribeDropPlacement: records dropped while the buffer is full
// come after the buffered ones; the next delivery carries their count,
// so a reader can place the gap exactly.
func TestLogSubscribeDropPlacement(t *testing.T) {
	l := NewLog(10, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := l.Subscribe(ctx, Filter{}, 2)
	for _, id := range []string{"r0", "r1", "r2", "r3"} { // r2, r3 dropped
		l.Add(&Record{RequestID: id, Complete: true})
	}
	first := <-s.Records()
	l.Add(&Record{RequestID: "r4", Complete: true}) // room again
	var got []string
	for _, d := range []Delivery{first, <-s.Records(), <-s.Records()} {
		got = append(got, d.Record.RequestID+"+"+strconv.FormatUint(d.DroppedBefore, 10))
	}
	if want := "r0+0 r1+0 r4+2"; strings.Join(got, " ") != want {
		t.Errorf("deliveries %v; want %s (the gap of 2 between r1 and r4)", got, want)
	}
}

// TestLogTally counts records by reason after a point, and the ones
// evicted before they could be counted.
func TestLogTally(t *testing.T) {
	l := NewLog(3, 0)
	start := l.Tally(TallyStart)
	if start.Through != 0 || start.Records != 0 {
		t.Fatalf("empty log: %+v", start)
	}
	for i, reason := range []string{"weighted", "shed", "weighted"} {
		l.Add(&Record{RequestID: "a" + strconv.Itoa(i), Reason: reason})
	}
	t1 := l.Tally(start.Through)
	if t1.Through != 3 || t1.Records != 3 || t1.ByReason["weighted"] != 2 || t1.ByReason["shed"] != 1 || t1.Lost != 0 {
		t.Errorf("after 3: %+v", t1)
	}
	for i := range 5 { // 5 more into a log of 3: 2 evicted uncounted
		l.Add(&Record{RequestID: "b" + strconv.Itoa(i), Reason: "overloaded"})
	}
	t2 := l.Tally(t1.Through)
	if t2.Through != 8 || t2.Records != 3 || t2.ByReason["overloaded"] != 3 || t2.Lost != 2 {
		t.Errorf("after 5 more: %+v", t2)
	}
	if t3 := l.Tally(t2.Through); t3.Records != 0 || t3.Lost != 0 {
		t.Errorf("nothing new: %+v", t3)
	}
}

// TestTallyRouted: every routed reason counts as routed, balanced
// included; refusals do not.
func TestTallyRouted(t *testing.T) {
	l := NewLog(16, 0)
	for i, reason := range []string{"weighted", "session", "redrawn", "balanced", "steered", "shed", "overloaded", "no_capacity", "model_not_found"} {
		l.Add(&Record{RequestID: "r" + strconv.Itoa(i), Reason: reason})
	}
	if got := l.Tally(0); got.Routed() != 5 || got.Records != 9 {
		t.Errorf("routed %d of %d; want 5 of 9 (%v)", got.Routed(), got.Records, got.ByReason)
	}
}
