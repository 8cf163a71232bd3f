package ha_test

import (
	"testing"
	"time"

	"github.com/ilbproject/ilb/ha"
	"github.com/ilbproject/ilb/internal/promtest"
	"github.com/ilbproject/ilb/weights"
)

// fixedDemand is a replica's metered demand: the same rates every call.
func fixedDemand(d weights.Demand) ha.DemandFunc {
	return func(now time.Time) (weights.Demand, time.Time) { return d, now }
}

var (
	usM1 = weights.DemandKey{Source: "edge-us", Model: "m1", Priority: weights.Standard}
	euM2 = weights.DemandKey{Source: "edge-eu", Model: "m2", Priority: weights.Critical}
)

// TestDemandIsShared: every replica shares its demand under its lease
// and the sum is the leader's demand; a replica that dies stops counting
// when its lease expires, one that stops cleanly at once; a stream with
// an unknown source is left out and counted.
func TestDemandIsShared(t *testing.T) {
	eachBackend(t, 3, func(t *testing.T, g *group) {
		a := g.start("a", memberOpts{demand: fixedDemand(weights.Demand{usM1: {RequestsPerSecond: 1, CostPerSecond: 100}})})
		b := g.start("b", memberOpts{demand: fixedDemand(weights.Demand{usM1: {RequestsPerSecond: 2, CostPerSecond: 200}})})
		c := g.start("c", memberOpts{demand: fixedDemand(weights.Demand{
			euM2: {RequestsPerSecond: 3, CostPerSecond: 300},
			{Source: "nowhere", Model: "m1", Priority: weights.Standard}: {RequestsPerSecond: 9, CostPerSecond: 900},
		})})
		ms := []*member{a, b, c}
		l := leaderOf(t, ms...)
		sums := func(want weights.Demand) func() bool {
			return func() bool {
				d, at := l.Demand()
				if len(d) != len(want) || time.Since(at) > g.cfg.Controller.StaleAfter.Std() {
					return false
				}
				for k, r := range want {
					if d[k] != r {
						return false
					}
				}
				return true
			}
		}
		waitFor(t, "the leader sums every replica's demand", sums(weights.Demand{
			usM1: {RequestsPerSecond: 3, CostPerSecond: 300}, euM2: {RequestsPerSecond: 3, CostPerSecond: 300},
		}))
		if st := l.Status(); st.Replicas != 3 {
			t.Errorf("status counts %d replicas, want 3", st.Replicas)
		}
		if v, _ := promtest.Value(t, l.reg, "ilb_ha_demand_refused_total", nil); v < 1 {
			t.Errorf("ilb_ha_demand_refused_total = %v; want the stream of an unknown source counted", v)
		}

		// A follower dies: its share goes when its lease expires.
		dead := c
		if l == c {
			dead = a
		}
		crashed := time.Now()
		dead.crash()
		want := weights.Demand{usM1: {RequestsPerSecond: 3, CostPerSecond: 300}}
		if dead == a {
			want = weights.Demand{usM1: {RequestsPerSecond: 2, CostPerSecond: 200}, euM2: {RequestsPerSecond: 3, CostPerSecond: 300}}
		}
		waitFor(t, "the dead replica's demand stops counting", sums(want))
		t.Logf("the demand of replica %s, crashed, stopped counting %s later (lease TTL %s)", dead.name, time.Since(crashed).Round(time.Millisecond), g.cfg.HA.LeaseTTL)
		promtest.Check(t, l.reg, "ilb_ha_replicas", nil, 2)
	})
}

// TestDemandOfNoReplica: with no share the demand is fresh but empty;
// once every share is gone it is dated by the last one, so the
// controller holds its weights.
func TestDemandOfNoReplica(t *testing.T) {
	g := newGroup(t, 1)
	a := g.start("a", memberOpts{})
	if d, at := a.Demand(); len(d) != 0 || time.Since(at) > time.Minute {
		t.Fatalf("no share: demand %v at %s; want none, now", d, at)
	}
	b := g.start("b", memberOpts{demand: fixedDemand(weights.Demand{usM1: {RequestsPerSecond: 1, CostPerSecond: 100}})})
	waitFor(t, "b's share", func() bool { d, _ := a.Demand(); return d[usM1].CostPerSecond == 100 })
	_, last := a.Demand()
	b.stop()
	waitFor(t, "b's share gone", func() bool { d, _ := a.Demand(); return len(d) == 0 })
	if _, at := a.Demand(); at.Before(last) {
		t.Fatalf("with every share gone the demand is dated %s; want the last share's date, not before %s", at, last)
	}
}

// TestShareEncoding: a share round-trips; bad ones are refused.
func TestShareEncoding(t *testing.T) {
	s := ha.NewShare("r1", weights.Demand{usM1: {RequestsPerSecond: 1.5, CostPerSecond: 0.1 + 0.2}, euM2: {}}, 1500*time.Millisecond)
	if len(s.Streams) != 1 || s.AgeMs != 1500 {
		t.Fatalf("share = %+v; want one stream (zero demand left out), age 1500 ms", s)
	}
	b, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ha.DecodeShare(b)
	if err != nil || got.Replica != "r1" || len(got.Streams) != 1 || got.Streams[0] != s.Streams[0] {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, s)
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"not gzip", []byte(`{"replica":"x"}`)},
		{"unknown field", gz(t, `{"replica":"x","age_ms":0,"streams":[],"extra":1}`)},
		{"negative age", gz(t, `{"replica":"x","age_ms":-5,"streams":[]}`)},
		{"unknown priority", gz(t, `{"replica":"x","age_ms":0,"streams":[{"s":"edge-us","m":"m1","p":"urgent","rps":1,"cost":1}]}`)},
		{"trailing data", gz(t, `{"replica":"x","age_ms":0,"streams":[]} {}`)},
		{"too large", make([]byte, 2<<20)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ha.DecodeShare(tt.data); err == nil {
				t.Fatal("decoded; want an error")
			}
		})
	}
}
