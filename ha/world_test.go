package ha_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/ha"
	"github.com/ilbproject/ilb/ha/etcdtest"
	"github.com/ilbproject/ilb/internal/kubetest"
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

// group is an etcd cluster, or a Kubernetes API server, and the replicas
// of one ILB on it.
type group struct {
	t    testing.TB
	etcd *etcdtest.Cluster // nil with kube
	kube *kubetest.Server  // nil with etcd
	cfg  *config.Config
}

// kubeWorld is world's ha: section for a Kubernetes API server.
const kubeWorld = `
ha:
  lease_ttl: 2s
  dial_timeout: 3s
  kubernetes: {namespace: ilb-ha, lease: ilb-test}
`

// newKubeGroup is a group on a real kube-apiserver (internal/kubetest),
// in namespace ilb-ha.
func newKubeGroup(t testing.TB) *group {
	t.Helper()
	etcdPart, _, _ := strings.Cut(world, "ha:")
	w := etcdPart + strings.TrimPrefix(kubeWorld, "\n")
	c, err := config.Decode([]byte(w))
	if err != nil {
		t.Fatal(err)
	}
	k := kubetest.Start(t)
	k.Namespace(t, "ilb-ha")
	return &group{t: t, kube: k, cfg: c}
}

// eachBackend runs f as a subtest on a group of each backend: a 1- or
// 3-member etcd cluster (members), and a Kubernetes API server.
func eachBackend(t *testing.T, members int, f func(t *testing.T, g *group)) {
	t.Run("etcd", func(t *testing.T) { f(t, newGroup(t, members)) })
	t.Run("kubernetes", func(t *testing.T) { f(t, newKubeGroup(t)) })
}

// options are the backend's part of a replica's options: its own client,
// cut by the returned function.
func (g *group) options(o ha.Options) (ha.Options, func()) {
	if g.kube == nil {
		cli := g.client()
		o.Client = cli
		return o, func() { _ = cli.Close() }
	}
	var cut atomic.Bool
	rc := g.kube.Config()
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if cut.Load() {
				return nil, errors.New("cut off")
			}
			return rt.RoundTrip(req)
		})
	}
	o.Kube = rc
	return o, func() { cut.Store(true) }
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

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
	cut    func() // cuts the replica off its backend
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
		name: name, reg: prometheus.NewRegistry(), sink: &sink{}, logs: &logtest.Buffer{},
		done: make(chan error, 1), terms: make(chan context.Context, 16),
	}
	o, cut := g.options(ha.Options{
		Config: g.cfg, Name: name, Sinks: []controller.Sink{m.sink}, Demand: mo.demand,
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
	m.cut = cut
	r, err := ha.New(o)
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

// crash cuts the replica off its backend without a goodbye: its lease
// (etcd's, or the Kubernetes Lease) is left to expire.
func (m *member) crash() {
	m.cut()
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

var _ controller.Sink = (*sink)(nil)

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

// publishViaLeader publishes w through whichever replica leads, and again
// through the next leader when a leader's term ends before its
// publication: just after the backend came back, a backend slow to
// answer can end a term within a renewal, and the publication is then
// refused, as it must be (TestKubeFailStatic met it on a loaded machine:
// the Lease's renewals timed out one second after the API server's
// return). A failure other than a refusal, or no publication within the
// bound, fails the test.
func publishViaLeader(t testing.TB, ms []*member, w *weights.Weights) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		m := leaderOf(t, ms...)
		ctx, cancel := context.WithTimeout(context.Background(), within)
		commit, err := m.Publisher().Prepare(ctx, w)
		cancel()
		if err == nil {
			commit()
			return
		}
		if !isRefusal(err) || time.Now().After(deadline) {
			t.Fatalf("replica %s publishes %s: %v", m.name, w.Version(), err)
		}
		t.Logf("replica %s's term ended before it published %s (%v): again through the next leader", m.name, w.Version(), err)
	}
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

// depose ends m's term behind its back: etcd deletes its election key
// (as when its lease expires); Kubernetes writes the Lease as next does
// when it takes an expired one (next then renews it in a term of its
// own).
func (g *group) depose(t *testing.T, m, next *member) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if g.kube != nil {
		leases := g.kube.Client().CoordinationV1().Leases("ilb-ha")
		l, err := leases.Get(ctx, g.cfg.HA.Kubernetes.Lease, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *l.Spec.HolderIdentity != m.HolderIdentity() {
			t.Fatalf("the Lease names %s, want %s", *l.Spec.HolderIdentity, m.name)
		}
		n := *l.Spec.LeaseTransitions + 1
		id := next.HolderIdentity()
		l.Spec.HolderIdentity, l.Spec.LeaseTransitions = &id, &n
		if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	cli := g.client()
	keys, err := cli.Get(ctx, g.cfg.HA.KeyPrefix+"election/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	deleted := 0
	for _, kv := range keys.Kvs {
		if string(kv.Value) == m.name {
			if _, err := cli.Delete(ctx, string(kv.Key)); err != nil {
				t.Fatal(err)
			}
			deleted++
		}
	}
	if deleted != 1 {
		t.Fatalf("found %d election keys of %s, want 1", deleted, m.name)
	}
}

// current is the record of the version in force as stored.
func (g *group) current(t *testing.T) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if g.kube != nil {
		l, err := g.kube.Client().CoordinationV1().Leases("ilb-ha").Get(ctx, g.cfg.HA.Kubernetes.Lease, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return []byte(l.Annotations["ilb.dev/current"])
	}
	cur, err := g.client().Get(ctx, g.cfg.HA.KeyPrefix+"current")
	if err != nil || len(cur.Kvs) != 1 {
		t.Fatalf("current: %v, %v", cur, err)
	}
	return cur.Kvs[0].Value
}

// contentObjects counts the stored objects of version v's content: etcd
// keys (meta and chunks) or ConfigMaps (one per chunk).
func (g *group) contentObjects(t *testing.T, v string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if g.kube != nil {
		l, err := g.kube.Client().CoreV1().ConfigMaps("ilb-ha").List(ctx, metav1.ListOptions{LabelSelector: "ilb.dev/version=" + v})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}
	n, err := g.client().Get(ctx, g.cfg.HA.KeyPrefix+"versions/"+v+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return int(n.Count)
}

// bigRouting is a routing of 30,000 cells (seeded), computed at computed:
// its content takes several chunks.
func bigRouting(t testing.TB, seed uint64, computed time.Time) *weights.Weights {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	cells := make([]weights.Cell, 0, 30000)
	for i := range cap(cells) {
		w := uint32(1 + rng.IntN(weights.Total-1))
		cells = append(cells, weights.Cell{
			Source: fmt.Sprintf("src-%05d", i), Model: fmt.Sprintf("model-%016x", rng.Uint64()),
			Targets: []weights.Target{{Cluster: fmt.Sprintf("c-%016x", rng.Uint64()), Weight: w}, {Cluster: fmt.Sprintf("c-%016x", rng.Uint64()), Weight: weights.Total - w}},
		})
	}
	w, err := weights.New("test", computed, cells)
	if err != nil {
		t.Fatal(err)
	}
	return w
}
