package ha_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ilbproject/ilb/weights"
)

// TestKubeFailStatic: with the API server stopped every replica keeps
// serving the last version and says so, and no replica leads (the
// leader's renewals fail for two thirds of the lease); when it returns, a
// leader is elected and its publications are served again.
func TestKubeFailStatic(t *testing.T) {
	g := newKubeGroup(t)
	ms := []*member{g.start("a", memberOpts{}), g.start("b", memberOpts{}), g.start("c", memberOpts{})}
	w1 := routing(t, 5000, time.Now())
	publishViaLeader(t, ms, w1)
	serving(t, w1.Version(), ms...)

	lost := time.Now()
	g.kube.Stop()
	checkFailStatic(t, "kubernetes", w1.Version(), ms)
	t.Logf("API server down: every replica fail-static and no leader %s later", time.Since(lost).Round(time.Millisecond))

	back := time.Now()
	g.kube.Restart()
	w2 := routing(t, 8000, time.Now())
	publishViaLeader(t, ms, w2)
	serving(t, w2.Version(), ms...)
	t.Logf("API server back: a leader's new version served everywhere %s later", time.Since(back).Round(time.Millisecond))
	for _, m := range ms {
		if st := m.Status(); !st.EtcdReachable || st.FailStatic {
			t.Errorf("replica %s status after the API server returned: %+v", m.name, st)
		}
	}
}

// TestKubeObjects: what the group keeps in the API server is what the
// package doc and the chart's RBAC say: one Lease naming the leader,
// whose annotations hold the record in force and the history; a
// ConfigMap per demand share and per version chunk, labelled with the
// group; content the history no longer names is collected.
func TestKubeObjects(t *testing.T) {
	g := newKubeGroup(t)
	a := g.start("a", memberOpts{history: 2, demand: fixedDemand(nil)})
	var vs []string
	for i := range 4 {
		w := routing(t, uint32(1000*(i+1)), time.Now())
		publishViaLeader(t, []*member{a}, w)
		vs = append(vs, w.Version())
	}
	serving(t, vs[3], a)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	lease, err := g.kube.Client().CoordinationV1().Leases("ilb-ha").Get(ctx, "ilb-test", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := *lease.Spec.HolderIdentity; !strings.HasPrefix(h, "a_") || !strings.Contains(lease.Annotations["ilb.dev/current"], vs[3]) {
		t.Errorf("Lease: holder %q, current %s; want a_<instance> and %s", h, lease.Annotations["ilb.dev/current"], vs[3])
	}
	// The history is read back from the API server after an install, on
	// the replica's own goroutine: wait for it.
	waitFor(t, "the history of the last 2 versions, newest first", func() bool {
		got := a.Versions(10)
		return len(got) == 2 && got[0].Version == vs[3] && got[1].Version == vs[2]
	})
	waitFor(t, "the content of versions out of the history collected", func() bool {
		return g.contentObjects(t, vs[0]) == 0 && g.contentObjects(t, vs[1]) == 0 && g.contentObjects(t, vs[3]) == 1
	})
	waitFor(t, "a's demand share", func() bool {
		cms, err := g.kube.Client().CoreV1().ConfigMaps("ilb-ha").List(ctx, metav1.ListOptions{LabelSelector: "ilb.dev/ha-group=ilb-test,ilb.dev/object=demand"})
		return err == nil && len(cms.Items) == 1 && cms.Items[0].Name == "ilb-test-demand-a"
	})
}

// TestKubeVersionEncodings: one version stored twice, from two
// computations (another computed time: other bytes), the first left
// without its chunk 0 (a collection cut short): every replica serves the
// version published again, read from its own chunks. Each encoding has
// ConfigMaps of its own, named after its hash, and the record names the
// one it publishes. Whichever replica leads publishes: on a loaded
// machine the API server can answer a Lease renewal too late, and the
// term ends (met in a loaded test run), which is not what this test is
// about.
func TestKubeVersionEncodings(t *testing.T) {
	g := newKubeGroup(t)
	a, b := g.start("a", memberOpts{}), g.start("b", memberOpts{})
	ms := []*member{a, b}
	big := func(computed time.Time) *weights.Weights { return bigRouting(t, 3, computed) }
	v1 := big(time.Unix(1000, 0))
	publishViaLeader(t, ms, v1)
	serving(t, v1.Version(), a, b)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cms := g.kube.Client().CoreV1().ConfigMaps("ilb-ha")
	list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "ilb.dev/version=" + v1.Version()})
	if err != nil || len(list.Items) < 2 {
		t.Fatalf("version %s: %d ConfigMaps (err %v), want several chunks", v1.Version(), len(list.Items), err)
	}
	for _, cm := range list.Items {
		if strings.HasSuffix(cm.Name, "-0") {
			if err := cms.Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	other := routing(t, 4000, time.Now())
	publishViaLeader(t, ms, other)
	serving(t, other.Version(), a, b)
	again := big(time.Unix(2000, 0)) // the same routing: the same version, other bytes
	if again.Version() != v1.Version() {
		t.Fatalf("versions %s and %s: the routing is the same", again.Version(), v1.Version())
	}
	publishViaLeader(t, ms, again)
	serving(t, v1.Version(), a, b)
	for _, m := range []*member{a, b} {
		if got := m.Current().Computed(); !got.Equal(time.Unix(2000, 0)) {
			t.Errorf("replica %s serves the encoding computed at %v, want the one published last", m.name, got)
		}
	}
	if !strings.Contains(string(g.current(t)), `"content":"`) {
		t.Errorf("the record %s names no content", g.current(t))
	}
}
