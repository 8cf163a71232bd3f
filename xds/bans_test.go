package xds_test

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/xds"
)

// memStore is the etcd store of an HA group at its network edge: a map,
// shared by the servers of a test as replicas share etcd.
type memStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

var _ xds.BanStore = (*memStore)(nil)

func newMemStore() *memStore { return &memStore{m: map[string][]byte{}} }

func (s *memStore) Put(_ context.Context, ns, key string, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[ns+"|"+key] = v
	return nil
}

func (s *memStore) List(_ context.Context, ns string) (map[string][]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]byte{}
	for k, v := range s.m {
		if rest, ok := strings.CutPrefix(k, ns+"|"); ok {
			out[rest] = v
		}
	}
	return out, false, nil
}

func (s *memStore) Delete(_ context.Context, ns, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, ns+"|"+key)
	return nil
}

func (s *memStore) get(k string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[k]
}

func (s *memStore) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.m))
}

// TestBansSharedAndKept: with a ban store (etcd in an HA group), a
// version one server bans is stored; another server (a replica, or the
// next process) reads it when it starts using the store and never serves
// it, and one that has it in force rolls back when its rollout loop reads
// it. The loop's clock is injected; its reads show that it ran.
func TestBansSharedAndKept(t *testing.T) {
	c, _ := demo(t)
	ws := versionsOf(t, c)
	ctx := context.Background()
	store := newMemStore()

	// Replica A: its only Envoy rejects the second routes: a quorum ban.
	a, connA, _ := startRollout(t, c)
	a.UseBans(ctx, store)
	if err := a.Publish(ctx, ws[0]); err != nil {
		t.Fatal(err)
	}
	good := routeVersion(t, a)
	env := connect(t, connA, &corev3.Node{Id: "e1", Cluster: "edge-us"}, func(typ, v string) bool {
		return typ == resource.RouteType && v != good
	})
	waitFor(t, func() bool { return env.has(resource.RouteType, good) && rolloutOf(t, a).LastGood["route"] == good })
	if err := a.Publish(ctx, ws[1]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(rolloutOf(t, a).Rejected) == 1 })
	bad := rolloutOf(t, a).Rejected[0].Version
	waitFor(t, func() bool { return len(store.keys()) == 1 }) // written by A's rollout loop
	var stored xds.RejectedVersion
	if err := json.Unmarshal(store.get("xds-bans|edge-us/route/"+bad), &stored); err != nil || stored.Version != bad || stored.By != "quorum" {
		t.Fatalf("store %v; want the ban of route %s by quorum", store.keys(), bad)
	}

	t.Run("a new process never serves a stored ban", func(t *testing.T) {
		b, _, _ := startRollout(t, c)
		b.UseBans(ctx, store)
		if err := b.Publish(ctx, ws[1]); err != nil {
			t.Fatal(err)
		}
		if snap, err := b.Snapshot("edge-us"); err == nil && snap.GetVersion(resource.RouteType) == bad {
			t.Errorf("a restarted server serves route %s, banned before it started", bad)
		}
		if st := rolloutOf(t, b); len(st.Rejected) != 1 || st.Rejected[0].Version != bad {
			t.Errorf("rollout %+v; want the stored ban listed", st)
		}
	})

	t.Run("stored entries are checked and bounded", func(t *testing.T) {
		odd := newMemStore()
		huge, _ := json.Marshal(xds.RejectedVersion{NACK: xds.NACK{Type: "route", Version: "v9", Message: strings.Repeat("x", 1<<20)}, By: "quorum"})
		_ = odd.Put(ctx, "xds-bans", "edge-us/route/v9", huge)
		bogus, _ := json.Marshal(xds.RejectedVersion{NACK: xds.NACK{Type: "secret", Version: "v1"}})
		_ = odd.Put(ctx, "xds-bans", "edge-us/secret/v1", bogus)
		_ = odd.Put(ctx, "xds-bans", "edge-us/route/v8", []byte("not json"))
		b, _, _ := startRollout(t, c)
		b.UseBans(ctx, odd)
		st := rolloutOf(t, b)
		if len(st.Rejected) != 1 || st.Rejected[0].Version != "v9" || len(st.Rejected[0].Message) > 2048 {
			t.Errorf("rejected %d entries; want only route v9, its message bounded", len(st.Rejected))
		}
	})

	t.Run("a replica with the version in force rolls back", func(t *testing.T) {
		clock := newFakeClock()
		reg := prometheus.NewRegistry()
		r, conn := serveXDS(t, xds.Options{Config: c, Registry: reg, Now: clock.Now})
		fresh := newMemStore()
		r.UseBans(ctx, fresh)
		if err := r.Publish(ctx, ws[0]); err != nil {
			t.Fatal(err)
		}
		e := connect(t, conn, &corev3.Node{Id: "e2", Cluster: "edge-us"}, nil)
		waitFor(t, func() bool { return e.has(resource.RouteType, good) && rolloutOf(t, r).LastGood["route"] == good })
		if err := r.Publish(ctx, ws[1]); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return e.has(resource.RouteType, bad) })
		// Another replica bans it.
		_ = fresh.Put(ctx, "xds-bans", "edge-us/route/"+bad, store.get("xds-bans|edge-us/route/"+bad))
		clock.advance(3 * time.Second)
		reads := clock.readCount()
		waitFor(t, func() bool { return clock.readCount() >= reads+2 })
		waitFor(t, func() bool { return routeVersion(t, r) == good && e.has(resource.RouteType, good) })
		if got := sample(t, reg, `ilb_xds_rollbacks_total{source="edge-us"}`); got != 1 {
			t.Errorf("rollbacks %v; want 1", got)
		}
	})
}
