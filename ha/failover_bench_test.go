package ha_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkFailover measures a failover on a real 3-member etcd and on a
// real Kubernetes API server: from the crash of the leader (cut off its
// backend, its lease left to expire) until a survivor leads (s/elected,
// and elected-s/TTL: the time past the lease duration, the goal for
// Kubernetes being within 1 s), and until every surviving replica serves
// the version the new leader published when elected (s/failover, and
// TTLs/failover: the goal within 2). Run with -benchtime Nx for N
// failovers.
func BenchmarkFailover(b *testing.B) {
	b.Run("etcd", func(b *testing.B) { benchFailover(b, newGroup(b, 3)) })
	b.Run("kubernetes", func(b *testing.B) { benchFailover(b, newKubeGroup(b)) })
}

func benchFailover(b *testing.B, g *group) {
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
	var total, elected time.Duration
	for b.Loop() {
		l := leaderOf(b, ms...)
		waitFor(b, "the leader's version installed", func() bool { return installedOwn(l) })
		serving(b, l.Current().Version(), ms...)
		crashed := time.Now()
		l.crash()
		rest := without(ms, l)
		nl := leaderOf(b, rest...)
		elected += time.Since(crashed)
		waitFor(b, "the new leader's version installed", func() bool { return installedOwn(nl) })
		serving(b, nl.Current().Version(), rest...)
		total += time.Since(crashed)
		rest = append(rest, next())
		ms = rest
	}
	per := total.Seconds() / float64(b.N)
	b.ReportMetric(per, "s/failover")
	ttl := g.cfg.HA.LeaseTTL.Std().Seconds()
	b.ReportMetric(per/ttl, "TTLs/failover")
	el := elected.Seconds() / float64(b.N)
	b.ReportMetric(el, "s/elected")
	b.ReportMetric(el-ttl, "elected-s/TTL")
}

// installedOwn: m serves the version in force, and m published it.
func installedOwn(m *member) bool {
	st := m.Status()
	return st.Installed != "" && st.Installed == st.Published && st.PublishedBy == m.name && m.Leading()
}
