package ha_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/ha"
)

// TestStore: values put by one replica are read by another; names and
// sizes are bounded; only the leader's PutIfLeader is applied.
func TestStore(t *testing.T) {
	eachBackend(t, 1, func(t *testing.T, g *group) {
		a, b := g.start("a", memberOpts{}), g.start("b", memberOpts{})
		l := leaderOf(t, a, b)
		f := without([]*member{a, b}, l)[0]
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		if err := a.Store().Put(ctx, "xds-bans", "edge-us/eds/v1", []byte("nack quorum")); err != nil {
			t.Fatal(err)
		}
		if err := l.Store().PutIfLeader(ctx, "rollout", "edge-us", []byte(`{"stable":"v1"}`)); err != nil {
			t.Fatal(err)
		}
		if err := f.Store().PutIfLeader(ctx, "rollout", "edge-us", []byte("follower")); !errors.Is(err, ha.ErrNotLeader) {
			t.Fatalf("a follower's PutIfLeader: err = %v, want ErrNotLeader", err)
		}
		if v, ok, err := b.Store().Get(ctx, "xds-bans", "edge-us/eds/v1"); err != nil || !ok || string(v) != "nack quorum" {
			t.Fatalf("Get = %q, %v, %v", v, ok, err)
		}
		if v, ok, err := b.Store().Get(ctx, "rollout", "edge-us"); err != nil || !ok || string(v) != `{"stable":"v1"}` {
			t.Fatalf("Get = %q, %v, %v; want the leader's value", v, ok, err)
		}
		if _, ok, err := b.Store().Get(ctx, "xds-bans", "absent"); err != nil || ok {
			t.Fatalf("Get of an absent key: ok %v, err %v", ok, err)
		}
		all, more, err := b.Store().List(ctx, "xds-bans")
		if err != nil || more || len(all) != 1 || string(all["edge-us/eds/v1"]) != "nack quorum" {
			t.Fatalf("List = %v, %v, %v", all, more, err)
		}
		if err := b.Store().Delete(ctx, "xds-bans", "edge-us/eds/v1"); err != nil {
			t.Fatal(err)
		}
		if all, _, err := a.Store().List(ctx, "xds-bans"); err != nil || len(all) != 0 {
			t.Fatalf("after Delete, List = %v, %v", all, err)
		}
		bad := []struct{ name, ns, key string }{
			{"empty namespace", "", "k"},
			{"slash in namespace", "a/b", "k"},
			{"empty key", "ns", ""},
			{"leading slash", "ns", "/k"},
			{"double slash", "ns", "a//b"},
			{"trailing slash", "ns", "a/"},
			{"space", "ns", "a b"},
			{"long key", "ns", strings.Repeat("k", 129)},
		}
		for _, tt := range bad {
			t.Run(tt.name, func(t *testing.T) {
				if err := a.Store().Put(ctx, tt.ns, tt.key, nil); err == nil {
					t.Fatalf("Put(%q, %q) accepted", tt.ns, tt.key)
				}
			})
		}
		if err := a.Store().Put(ctx, "ns", "big", make([]byte, ha.MaxStoreValue+1)); err == nil {
			t.Fatal("a value over MaxStoreValue was accepted")
		}
	})
}

// TestLargeVersion: a version whose content takes several etcd
// transactions is published and served whole.
func TestLargeVersion(t *testing.T) {
	eachBackend(t, 3, func(t *testing.T, g *group) {
		a, b := g.start("a", memberOpts{}), g.start("b", memberOpts{})
		l := leaderOf(t, a, b)
		big := bigRouting(t, 1, time.Now())
		publish(t, l, big)
		serving(t, big.Version(), a, b)
		f := without([]*member{a, b}, l)[0]
		if got := f.Current(); len(got.Cells()) != len(big.Cells()) {
			t.Fatalf("the follower serves %d cells, want %d", len(got.Cells()), len(big.Cells()))
		}
		n := g.contentObjects(t, big.Version())
		if n < 3 {
			t.Fatalf("the content takes %d objects; want several chunks (>= 3)", n)
		}
		t.Logf("%d cells: %d objects", len(big.Cells()), n)
	})
}
