package ha_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkFailover measures a failover on a real 3-member etcd: from the
// crash of the leader (its client closed, its lease left to expire) until
// every surviving replica serves the version the new leader published
// when elected. It reports the time per failover in seconds and in lease
// TTLs (the goal: within 2). Run with -benchtime Nx for N failovers.
func BenchmarkFailover(b *testing.B) {
	g := newGroup(b, 3)
	var elections atomic.Uint32
	lead := func(ctx context.Context, m *member) {
		// A routing of its own per term: the new leader's version is new.
		w := routing(b, 100+elections.Add(1)%9800, time.Now())
		if commit, err := m.Publisher().Prepare(ctx, w); err == nil {
			commit()
		}
		<-ctx.Done()
	}
	names := 0
	next := func() *member {
		names++
		return g.start(fmt.Sprintf("r%d", names), memberOpts{lead: lead})
	}
	ms := []*member{next(), next(), next()}
	var total time.Duration
	for b.Loop() {
		l := leaderOf(b, ms...)
		waitFor(b, "the leader's version installed", func() bool { return installedOwn(l) })
		serving(b, l.Current().Version(), ms...)
		crashed := time.Now()
		l.crash()
		rest := without(ms, l)
		nl := leaderOf(b, rest...)
		waitFor(b, "the new leader's version installed", func() bool { return installedOwn(nl) })
		serving(b, nl.Current().Version(), rest...)
		total += time.Since(crashed)
		rest = append(rest, next())
		ms = rest
	}
	per := total.Seconds() / float64(b.N)
	b.ReportMetric(per, "s/failover")
	b.ReportMetric(per/g.cfg.HA.LeaseTTL.Std().Seconds(), "TTLs/failover")
}

// installedOwn: m serves the version in force, and m published it.
func installedOwn(m *member) bool {
	st := m.Status()
	return st.Installed != "" && st.Installed == st.Published && st.PublishedBy == m.name && m.Leading()
}
