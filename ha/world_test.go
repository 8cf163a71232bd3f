package ha_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/ha"
	"github.com/ilbproject/ilb/ha/etcdtest"
	"github.com/ilbproject/ilb/internal/logtest"
	"github.com/ilbproject/ilb/weights"
)

const world = `
regions: [{name: us}, {name: eu}]
network:
  - {from: us, to: eu, rtt_ms: 80, egress_usd_per_gb: 0.05}
  - {from: eu, to: us, rtt_ms: 80, egress_usd_per_gb: 0.05}
sources:
  - {name: edge-us, region: us}
  - {name: edge-eu, region: eu}
models: [{name: m1}, {name: m2}]
profiles: [{name: p, capacity_per_replica: 100}]
clusters:
  - {name: us-a, region: us, engine: vllm, models: [m1, m2], profile: p, endpoints: ["10.0.0.1:80"]}
  - {name: eu-a, region: eu, engine: vllm, models: [m1, m2], profile: p, endpoints: ["10.1.0.1:80"]}
controller: {tick: 200ms}
ha:
  lease_ttl: 2s
  dial_timeout: 3s
  key_prefix: /ilb-test/
`

// within bounds every wait of these tests: far above what any step takes
// on a loaded machine, so it only ends a test that is stuck.
const within = 90 * time.Second

// group is an etcd cluster and the replicas of one ILB on it.
type group struct {
	t    testing.TB
	etcd *etcdtest.Cluster
	cfg  *config.Config
}

func newGroup(t testing.TB, members int) *group {
	t.Helper()
	c, err := config.Decode([]byte(world))
	if err != nil {
		t.Fatal(err)
	}
	e := etcdtest.Start(t, members)
	c.HA.Endpoints = e.Endpoints()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return &group{t: t, etcd: e, cfg: c}
}

// client is an etcd client of the group's cluster, closed at the end of
// the test.
func (g *group) client() *clientv3.Client {
	g.t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: g.etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 3 * time.Second,
	})
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// member is one running replica with a sink that records what it
// installs and a Lead that reports its terms.
type member struct {
	*ha.Replica
	name   string
	cli    *clientv3.Client
	reg    *prometheus.Registry
	sink   *sink
	logs   *logtest.Buffer
	cancel context.CancelFunc
	done   chan error
	runErr error // what Run returned
	// terms receives the context of each term this replica leads.
	terms chan context.Context
}

type memberOpts struct {
	demand  ha.DemandFunc
	history int
	// lead, if set, runs as Lead after the term is reported.
	lead func(ctx context.Context, m *member)
}

// start runs a replica named name until Stop or the end of the test.
func (g *group) start(name string, mo memberOpts) *member {
	g.t.Helper()
	m := &member{
		name: name, cli: g.client(), reg: prometheus.NewRegistry(), sink: &sink{}, logs: &logtest.Buffer{},
		done: make(chan error, 1), terms: make(chan context.Context, 16),
	}
	r, err := ha.New(ha.Options{
		Config: g.cfg, Client: m.cli, Name: name, Sinks: []weights.Sink{m.sink}, Demand: mo.demand,
		HistorySize: mo.history, Probe: 100 * time.Millisecond, Registry: m.reg,
		Logger: slog.New(slog.NewTextHandler(m.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Lead: func(ctx context.Context) error {
			m.terms <- ctx
			if mo.lead != nil {
				mo.lead(ctx, m)
				return nil
			}
			<-ctx.Done()
			return nil
		},
	})
	if err != nil {
		g.t.Fatal(err)
	}
	m.Replica = r
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() { m.done <- r.Run(ctx) }()
	g.t.Cleanup(func() {
		m.stop()
		if m.runErr != nil {
			g.t.Errorf("replica %s: Run: %v", name, m.runErr)
		}
		if g.t.Failed() {
			g.t.Logf("--- replica %s log:\n%s", name, m.logs.String())
		}
	})
	return m
}

// stop ends the replica the clean way (resign, revoke) and waits for Run.
func (m *member) stop() {
	if m.cancel == nil {
		return
	}
	m.cancel()
	m.runErr = <-m.done
	m.cancel = nil
}

// crash cuts the replica off etcd without a goodbye: its client closes,
// its lease is left to expire.
func (m *member) crash() {
	_ = m.cli.Close()
	m.stop()
}

// sink records the versions a replica installs.
type sink struct {
	mu   sync.Mutex
	seen []*weights.Weights
	// refuse, when set, makes Prepare fail.
	refuse error
}

func (s *sink) Prepare(_ context.Context, w *weights.Weights) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse != nil {
		return nil, s.refuse
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.seen = append(s.seen, w)
	}, nil
}

func (s *sink) versions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.seen))
	for i, w := range s.seen {
		out[i] = w.Version()
	}
	return out
}

var _ weights.Sink = (*sink)(nil)

// waitFor polls cond until it holds; after within, the test fails.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// leaderOf waits until exactly one of ms leads and returns it.
func leaderOf(t testing.TB, ms ...*member) *member {
	t.Helper()
	var l *member
	waitFor(t, "one leader", func() bool {
		l = nil
		n := 0
		for _, m := range ms {
			if m.Leading() {
				l, n = m, n+1
			}
		}
		return n == 1
	})
	return l
}

// serving waits until every replica of ms serves version v.
func serving(t testing.TB, v string, ms ...*member) {
	t.Helper()
	for _, m := range ms {
		waitFor(t, fmt.Sprintf("replica %s serves %s", m.name, v), func() bool {
			w := m.Current()
			return w != nil && w.Version() == v
		})
	}
}

// cells1 is a routing of the world: edge-us sends share of m1 to us-a
// (in basis points), the rest to eu-a.
func routing(t testing.TB, share uint32, computed time.Time) *weights.Weights {
	t.Helper()
	targets := []weights.Target{{Cluster: "us-a", Weight: share}, {Cluster: "eu-a", Weight: weights.Total - share}}
	if share == weights.Total {
		targets = targets[:1]
	}
	w, err := weights.New("test", computed, []weights.Cell{
		{Source: "edge-us", Model: "m1", Targets: targets},
		{Source: "edge-eu", Model: "m1", Targets: []weights.Target{{Cluster: "eu-a", Weight: weights.Total}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// publish publishes w through m's Publisher (m must lead).
func publish(t testing.TB, m *member, w *weights.Weights) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	commit, err := m.Publisher().Prepare(ctx, w)
	if err != nil {
		t.Fatalf("replica %s publishes %s: %v", m.name, w.Version(), err)
	}
	commit()
}

func isRefusal(err error) bool {
	return errors.Is(err, ha.ErrNotLeader) || errors.Is(err, ha.ErrFenced)
}

// gz is s gzip'd.
func gz(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func withPrefixCount() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()}
}
