package ha_test

import (
	"context"
	"testing"
	"time"

	"github.com/ilbproject/ilb/internal/promtest"
)

// TestOneLeaderPublishesEveryoneServes: of three replicas exactly one
// leads; what it publishes every replica installs (the leader too,
// through etcd); a follower cannot publish.
func TestOneLeaderPublishesEveryoneServes(t *testing.T) {
	eachBackend(t, 3, func(t *testing.T, g *group) {
		ms := []*member{g.start("a", memberOpts{}), g.start("b", memberOpts{}), g.start("c", memberOpts{})}
		l := leaderOf(t, ms...)
		w1 := routing(t, 5000, time.Now())
		publish(t, l, w1)
		serving(t, w1.Version(), ms...)
		w2 := routing(t, 8000, time.Now())
		publish(t, l, w2)
		serving(t, w2.Version(), ms...)

		for _, m := range ms {
			if m == l {
				continue
			}
			if _, err := m.Publisher().Prepare(context.Background(), routing(t, 1000, time.Now())); !isRefusal(err) {
				t.Errorf("follower %s published: err = %v, want ErrNotLeader", m.name, err)
			}
			if got := m.sink.versions(); len(got) < 2 || got[len(got)-1] != w2.Version() {
				t.Errorf("follower %s installed %v; want the leader's versions ending with %s", m.name, got, w2.Version())
			}
			promtest.Check(t, m.reg, "ilb_ha_leader", nil, 0)
			if st := m.Status(); st.LeaderName != l.name || !st.EtcdReachable || st.Installed != w2.Version() || st.Published != w2.Version() {
				t.Errorf("follower %s status = %+v", m.name, st)
			}
		}
		promtest.Check(t, l.reg, "ilb_ha_leader", nil, 1)
		promtest.Check(t, l.reg, "ilb_ha_publishes_total", map[string]string{"outcome": "published"}, 2)
		promtest.Check(t, l.reg, "ilb_ha_etcd_reachable", nil, 1)
	})
}

// TestFailover: when the leader dies without a word (its lease left to
// expire) another replica is elected and its publications are served by
// every survivor; a leader that stops cleanly hands over at once (its
// lease revoked). Each handover is logged with the time it took.
func TestFailover(t *testing.T) {
	eachBackend(t, 3, func(t *testing.T, g *group) {
		// Each leader publishes, when elected, a routing of its own.
		shares := map[string]uint32{"a": 1000, "b": 2000, "c": 3000}
		lead := func(ctx context.Context, m *member) {
			commit, err := m.Publisher().Prepare(ctx, routing(t, shares[m.name], time.Now()))
			if err == nil {
				commit()
			}
			<-ctx.Done()
		}
		ms := []*member{g.start("a", memberOpts{lead: lead}), g.start("b", memberOpts{lead: lead}), g.start("c", memberOpts{lead: lead})}
		first := leaderOf(t, ms...)
		serving(t, routing(t, shares[first.name], time.Time{}).Version(), ms...)

		// The leader crashes: the others wait for its lease to expire.
		crashed := time.Now()
		first.crash()
		rest := without(ms, first)
		second := leaderOf(t, rest...)
		serving(t, routing(t, shares[second.name], time.Time{}).Version(), rest...)
		t.Logf("crash of leader %s: %s led and its version was served by every survivor %s later (lease TTL %s)",
			first.name, second.name, time.Since(crashed).Round(time.Millisecond), g.cfg.HA.LeaseTTL)
		if st := second.Status(); !st.Leader || st.LeaderName != second.name {
			t.Errorf("new leader's status = %+v", st)
		}

		// The new leader stops cleanly: the last replica leads at once.
		stopped := time.Now()
		second.stop()
		third := without(rest, second)[0]
		leaderOf(t, third)
		serving(t, routing(t, shares[third.name], time.Time{}).Version(), third)
		t.Logf("clean stop of leader %s: %s led and served its version %s later", second.name, third.name, time.Since(stopped).Round(time.Millisecond))
		promtest.Check(t, third.reg, "ilb_ha_elections_won_total", nil, 1)
	})
}

func without(ms []*member, x *member) []*member {
	var out []*member
	for _, m := range ms {
		if m != x {
			out = append(out, m)
		}
	}
	return out
}
