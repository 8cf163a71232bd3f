package ha_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/ha"
	"github.com/ilbproject/ilb/internal/promtest"
	"github.com/ilbproject/ilb/weights"
)

// TestFailStatic: with one etcd member of three down nothing changes;
// with two down every replica keeps serving the last version and says so,
// and no replica leads; when the members return, a leader is elected and
// its publications are served again.
func TestFailStatic(t *testing.T) {
	g := newGroup(t, 3)
	ms := []*member{g.start("a", memberOpts{}), g.start("b", memberOpts{}), g.start("c", memberOpts{})}
	w1 := routing(t, 5000, time.Now())
	publish(t, leaderOf(t, ms...), w1)
	serving(t, w1.Version(), ms...)

	l1 := leaderOf(t, ms...)
	g.etcd.Kill(0)
	w2 := routing(t, 6000, time.Now())
	l2 := leaderOf(t, ms...)
	publish(t, l2, w2)
	serving(t, w2.Version(), ms...)
	flaps := 0
	for _, m := range ms {
		flaps += strings.Count(m.logs.String(), "HA backend unreachable")
	}
	t.Logf("one member of three down: leader %s then %s; %d replica(s) saw etcd unreachable meanwhile", l1.name, l2.name, flaps)

	lost := time.Now()
	g.etcd.Kill(1)
	checkFailStatic(t, "etcd", w2.Version(), ms)
	t.Logf("two members of three down: every replica fail-static and no leader %s later", time.Since(lost).Round(time.Millisecond))

	back := time.Now()
	g.etcd.Restart(0)
	g.etcd.Restart(1)
	g.etcd.WaitHealthy()
	for _, m := range ms {
		waitFor(t, "replica "+m.name+" reaches etcd again", func() bool { return m.Status().EtcdReachable })
	}
	w3 := routing(t, 7000, time.Now())
	publishViaLeader(t, ms, w3)
	serving(t, w3.Version(), ms...)
	t.Logf("members back: a leader's new version served everywhere %s later", time.Since(back).Round(time.Millisecond))
	for _, m := range ms {
		if !strings.Contains(m.logs.String(), "HA backend reachable again") {
			t.Errorf("replica %s did not log that etcd is back", m.name)
		}
	}
}

// TestHistorySurvivesRestarts: the history of published versions is kept
// in etcd, bounded, with the content of the versions it names only; new
// replicas started after every old one stopped read the same history and
// serve the version in force before any leader publishes.
func TestHistorySurvivesRestarts(t *testing.T) {
	g := newGroup(t, 3)
	old := []*member{g.start("a", memberOpts{history: 4}), g.start("b", memberOpts{history: 4})}
	l := leaderOf(t, old...)
	var published []*weights.Weights
	for i := range 6 {
		w := routing(t, uint32(1000*(i+1)), time.Now())
		publish(t, l, w)
		published = append(published, w)
	}
	last := published[len(published)-1]
	serving(t, last.Version(), old...)
	want := []string{published[5].Version(), published[4].Version(), published[3].Version(), published[2].Version()}
	var before []controller.VersionSummary
	for _, m := range old {
		waitFor(t, "replica "+m.name+" lists the last 4 versions", func() bool { return slices.Equal(summaryVersions(m.Versions(10)), want) })
		before = m.Versions(10)
	}
	// Only the content of listed versions stays.
	cli := g.client()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	waitFor(t, "the content of unlisted versions collected", func() bool {
		resp, err := cli.Get(ctx, g.cfg.HA.KeyPrefix+"versions/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return false
		}
		var vs []string
		for _, kv := range resp.Kvs {
			if v, ok := strings.CutSuffix(strings.TrimPrefix(string(kv.Key), g.cfg.HA.KeyPrefix+"versions/"), "/meta"); ok {
				vs = append(vs, v)
			}
		}
		slices.Sort(vs)
		w := slices.Clone(want)
		slices.Sort(w)
		return slices.Equal(vs, w)
	})

	for _, m := range old {
		m.stop()
	}
	fresh := []*member{g.start("c", memberOpts{history: 4}), g.start("d", memberOpts{history: 4})}
	serving(t, last.Version(), fresh...)
	for _, m := range fresh {
		waitFor(t, "replica "+m.name+" reads the history", func() bool { return len(m.Versions(10)) == len(want) })
		got := m.Versions(10)
		for i := range got {
			if got[i].Version != before[i].Version || !got[i].Published.Equal(before[i].Published) || len(got[i].Cells) != len(before[i].Cells) ||
				len(controller.Diff(got[i], before[i])) != 0 {
				t.Errorf("replica %s, history entry %d = %+v; want %+v", m.name, i, got[i], before[i])
			}
		}
	}
}

func summaryVersions(vs []controller.VersionSummary) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Version
	}
	return out
}

// TestBootstrap: a replica starting before any publication serves what
// it computes alone, and says so; once a version is published, a new
// replica serves it from the start.
func TestBootstrap(t *testing.T) {
	eachBackend(t, 1, func(t *testing.T, g *group) {
		first := routing(t, 2500, time.Now())
		o, _ := g.options(ha.Options{Config: g.cfg, Name: "early", Sinks: []controller.Sink{&sink{}}})
		r, err := ha.New(o)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		if err := r.Bootstrap(ctx, func() (*weights.Weights, error) { return first, nil }); err != nil {
			t.Fatal(err)
		}
		if got := r.Current(); got.Version() != first.Version() || !strings.Contains(got.Status(), "holds no published version yet") {
			t.Fatalf("bootstrap serves %s (%q); want %s computed alone, saying why", got.Version(), got.Status(), first.Version())
		}

		a := g.start("a", memberOpts{})
		w := routing(t, 4500, time.Now())
		publish(t, leaderOf(t, a), w)
		o, _ = g.options(ha.Options{Config: g.cfg, Name: "late", Sinks: []controller.Sink{&sink{}}})
		late, err := ha.New(o)
		if err != nil {
			t.Fatal(err)
		}
		if err := late.Bootstrap(ctx, func() (*weights.Weights, error) { return nil, errors.New("must not be called") }); err != nil {
			t.Fatal(err)
		}
		if got := late.Current(); got.Version() != w.Version() {
			t.Fatalf("late replica serves %s; want the published %s", got.Version(), w.Version())
		}
	})
}

// checkFailStatic waits until every replica of ms says its backend
// (kind) is unreachable and none leads, then checks each serves version
// v, says so in its metrics and log, and cannot publish.
func checkFailStatic(t *testing.T, kind, v string, ms []*member) {
	t.Helper()
	for _, m := range ms {
		waitFor(t, "replica "+m.name+" reports "+kind+" unreachable", func() bool {
			st := m.Status()
			return !st.EtcdReachable && st.FailStatic && st.EtcdError != "" && st.Backend == kind
		})
	}
	waitFor(t, "no replica leads", func() bool { return !slices.ContainsFunc(ms, (*member).Leading) })
	for _, m := range ms {
		if got := m.Current().Version(); got != v {
			t.Errorf("replica %s serves %s without %s; want the last version %s", m.name, got, kind, v)
		}
		promtest.Check(t, m.reg, "ilb_ha_etcd_reachable", nil, 0)
		promtest.Check(t, m.reg, "ilb_ha_leader", nil, 0)
		if !strings.Contains(m.logs.String(), "HA backend unreachable: serving the last installed weights (fail static)") {
			t.Errorf("replica %s did not log that it is fail-static", m.name)
		}
		if _, err := m.Publisher().Prepare(context.Background(), routing(t, 7000, time.Now())); !errors.Is(err, ha.ErrNotLeader) {
			t.Errorf("replica %s published without %s: err = %v, want ErrNotLeader", m.name, kind, err)
		}
	}
}
