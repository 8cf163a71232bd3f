package ha_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ilbproject/ilb/ha"
	"github.com/ilbproject/ilb/internal/promtest"
	"github.com/ilbproject/ilb/weights"
)

// TestDeposedLeaderIsFenced: a leader whose election key is gone (its
// lease expired while it was cut off, say) and that has not noticed yet
// writes a publication: etcd refuses it, content included, and every
// replica keeps serving the new leader's version.
func TestDeposedLeaderIsFenced(t *testing.T) {
	eachBackend(t, 3, func(t *testing.T, g *group) {
		a, b := g.start("a", memberOpts{}), g.start("b", memberOpts{})
		old := leaderOf(t, a, b)
		stale := old.StaleTerm()
		if stale == nil {
			t.Fatal("the leader has no term")
		}
		w1 := routing(t, 5000, time.Now())
		publish(t, old, w1)
		serving(t, w1.Version(), a, b)

		// Depose the leader: delete its election key, as etcd does when
		// its lease expires; or write the Lease as the other replica does
		// when it takes an expired one.
		next := without([]*member{a, b}, old)[0]
		g.depose(t, old, next)
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		leaderOf(t, next)
		w2 := routing(t, 7000, time.Now())
		publish(t, next, w2)
		serving(t, w2.Version(), a, b)

		w3 := routing(t, 9000, time.Now())
		if err := stale(ctx, w3); !errors.Is(err, ha.ErrFenced) {
			t.Fatalf("the deposed leader's publication: err = %v, want ErrFenced", err)
		}
		if _, err := old.Publisher().Prepare(ctx, w3); err == nil || !isRefusal(err) {
			t.Fatalf("the deposed leader's Publisher: err = %v, want a refusal", err)
		}
		if cur := g.current(t); !bytes.Contains(cur, []byte(w2.Version())) {
			t.Fatalf("current = %s; want the new leader's %s", cur, w2.Version())
		}
		// etcd refuses the content with the record (one transaction). In
		// Kubernetes the content, addressed by its hash, may be written
		// before the record is refused: no record names it, so no replica
		// installs it, and the next leader's collection deletes it.
		if n := g.contentObjects(t, w3.Version()); g.kube == nil && n != 0 {
			t.Fatalf("the fenced version's content: %d keys, want none", n)
		}
		serving(t, w2.Version(), a, b)
		// The deposed replica learns it from its election key's watch (or its
		// Lease renewal), on its
		// own goroutine: wait for that, then read its gauge.
		waitFor(t, "the deposed replica to know it no longer leads", func() bool { return !old.Leading() })
		promtest.Check(t, old.reg, "ilb_ha_leader", nil, 0)
	})
}

// TestVersionsAreImmutable: a version's content is written once; a
// second publication of the same routing names the first content, and a
// content that does not hash to its version is never served.
func TestVersionsAreImmutable(t *testing.T) {
	g := newGroup(t, 3)
	a, b := g.start("a", memberOpts{}), g.start("b", memberOpts{})
	l := leaderOf(t, a, b)
	cli := g.client()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	t1 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w1 := routing(t, 5000, t1)
	publish(t, l, w1)
	metaKey := g.cfg.HA.KeyPrefix + "versions/" + w1.Version() + "/meta"
	first, err := cli.Get(ctx, metaKey)
	if err != nil || len(first.Kvs) != 1 {
		t.Fatalf("meta of %s: %v, %v", w1.Version(), first, err)
	}
	w2 := routing(t, 6000, time.Now())
	publish(t, l, w2)
	serving(t, w2.Version(), a, b)

	// The same routing again, computed later with another status.
	again := routing(t, 5000, t1.Add(time.Hour)).WithStatus("computed again")
	if again.Version() != w1.Version() {
		t.Fatalf("same routing, versions %s and %s", again.Version(), w1.Version())
	}
	publish(t, l, again)
	serving(t, w1.Version(), a, b)
	second, err := cli.Get(ctx, metaKey)
	if err != nil || len(second.Kvs) != 1 || second.Kvs[0].ModRevision != first.Kvs[0].ModRevision || second.Kvs[0].Version != 1 {
		t.Fatalf("meta of %s was rewritten: revision %d then %+v", w1.Version(), first.Kvs[0].ModRevision, second.Kvs)
	}
	follower := without([]*member{a, b}, l)[0]
	if got := follower.Current(); !got.Computed().Equal(t1) {
		t.Errorf("follower serves content computed %s; want the first content's %s", got.Computed(), t1)
	}

	// Content under a version it does not hash to, and a version whose
	// chunk was altered, pointed at as the version in force.
	forge := func(version string, w *weights.Weights, alter bool) {
		t.Helper()
		doc, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		var blob bytes.Buffer
		zw := gzip.NewWriter(&blob)
		_, _ = zw.Write(doc)
		_ = zw.Close()
		sum := sha256.Sum256(blob.Bytes())
		meta := fmt.Sprintf(`{"encoding":"json+gzip","chunks":1,"size":%d,"sha256":%q}`, blob.Len(), hex.EncodeToString(sum[:]))
		chunk := blob.Bytes()
		if alter {
			chunk = append([]byte(nil), chunk...)
			chunk[len(chunk)/2] ^= 0xff
		}
		rec := fmt.Sprintf(`{"version":%q,"seq":999,"published":%q,"leader":"rogue","config":"x","policy":"test","computed":%q}`,
			version, time.Now().Format(time.RFC3339Nano), time.Now().Format(time.RFC3339Nano))
		p := g.cfg.HA.KeyPrefix
		if _, err := cli.Txn(ctx).Then(
			clientv3.OpPut(p+"versions/"+version+"/meta", meta), clientv3.OpPut(p+"versions/"+version+"/c/000000", string(chunk)),
			clientv3.OpPut(p+"current", rec),
		).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for i, tc := range []struct {
		name    string
		version string
		alter   bool
	}{
		{"content of another version", "0123456789abcdef", false},
		{"altered chunk", w2.Version(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.alter { // a fresh version key, so the content is read
				tc.version = routing(t, 4000, time.Now()).Version()
			}
			forge(tc.version, w2, tc.alter)
			for _, m := range []*member{a, b} {
				waitFor(t, "replica "+m.name+" refuses the forged version", func() bool {
					v, _ := promtest.Value(t, m.reg, "ilb_ha_installs_total", map[string]string{"outcome": "refused"})
					return v >= float64(i+1) && m.Status().Published == tc.version
				})
				if got := m.Current().Version(); got != w1.Version() {
					t.Fatalf("replica %s serves %s after a forged version; want %s kept", m.name, got, w1.Version())
				}
			}
		})
	}
	// The leader's next publication is served again.
	w3 := routing(t, 3000, time.Now())
	publish(t, l, w3)
	serving(t, w3.Version(), a, b)
}

// TestLeaderAgainRepublishes: a replica that leads again after another
// published meanwhile, and whose controller keeps computing the version
// it published in its earlier term (an unchanged tick: Refresh, not
// Prepare), publishes that version again: the version in force is what
// the leader computes.
func TestLeaderAgainRepublishes(t *testing.T) {
	eachBackend(t, 1, func(t *testing.T, g *group) {
		a, b := g.start("a", memberOpts{}), g.start("b", memberOpts{})
		first := leaderOf(t, a, b)
		second := without([]*member{a, b}, first)[0]
		w1 := routing(t, 5000, time.Now())
		publish(t, first, w1)
		serving(t, w1.Version(), a, b)

		// first is deposed (its election key deleted), second leads and
		// publishes, then stops: first leads again.
		g.depose(t, first, second)
		leaderOf(t, second)
		w2 := routing(t, 6000, time.Now())
		publish(t, second, w2)
		serving(t, w2.Version(), a, b)
		second.stop()
		leaderOf(t, first)

		first.Publisher().Refresh(w1)
		serving(t, w1.Version(), first)
	})
}

// depose deletes m's election key, as etcd does when m's lease expires.
