package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/ilbproject/ilb/app"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/ha/etcdtest"
	"github.com/ilbproject/ilb/internal/promtest"
)

// haApp is one `ilb serve` replica of an HA group.
type haApp struct {
	*app.App
	name   string
	cancel context.CancelFunc
}

func (h *haApp) stop(t *testing.T) {
	t.Helper()
	if h.cancel == nil {
		return
	}
	h.cancel()
	if err := h.Wait(); err != nil {
		t.Errorf("replica %s: %v", h.name, err)
	}
	h.cancel = nil
}

func startHA(t *testing.T, endpoints []string, name string) *haApp {
	t.Helper()
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Signals.Disabled = true
	c.Listen = config.Listen{XDS: "127.0.0.1:0", ExtProc: "127.0.0.1:0", Admin: "127.0.0.1:0"}
	c.Controller.Tick = config.Duration(200 * time.Millisecond)
	h := config.DefaultHA()
	h.Endpoints, h.Replica, h.LeaseTTL, h.DialTimeout = endpoints, name, config.Duration(2*time.Second), config.Duration(3*time.Second)
	c.HA = &h
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.Start(ctx, app.Options{Config: c})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &haApp{App: a, name: name, cancel: cancel}
	t.Cleanup(func() { r.stop(t) })
	// As without ha:, the controller has weights once Start returns (ilb
	// serve prints them), and the replica serves some.
	if a.Controller.Current() == nil || a.HA.Current() == nil {
		t.Fatalf("replica %s started without weights: controller %v, served %v", name, a.Controller.Current(), a.HA.Current())
	}
	return r
}

// healthz is GET /healthz of a.
func healthz(t *testing.T, a *haApp) (status string, leader bool, version string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+a.AdminAddr()+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Status  string `json:"status"`
		Version string `json:"weights_version"`
		HA      struct {
			Leader bool `json:"leader"`
		} `json:"ha"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz answered %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Status, out.HA.Leader, out.Version
}

// xdsVersions are the versions of a's xDS snapshot of source, per type.
func xdsVersions(t *testing.T, a *haApp, source string) []string {
	t.Helper()
	s, err := a.XDS.Snapshot(source)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, typ := range []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType} {
		out = append(out, s.GetVersion(typ))
	}
	return out
}

// TestServeAsReplicas: three `ilb serve` replicas on one etcd: one leads
// (its controller publishes), every replica serves the published version
// to its Envoys (the same xDS versions) and says who leads at /healthz;
// when the leader stops, another leads and serves the same.
func TestServeAsReplicas(t *testing.T) {
	e := etcdtest.Start(t, 3)
	apps := []*haApp{startHA(t, e.Endpoints(), "ilb-0"), startHA(t, e.Endpoints(), "ilb-1"), startHA(t, e.Endpoints(), "ilb-2")}
	leader := waitLeader(t, apps)
	agree(t, leader, apps)
	for _, a := range apps {
		status, leads, v := healthz(t, a)
		if status != "ok" || leads != (a == leader) || v != leader.HA.Current().Version() {
			t.Errorf("replica %s /healthz: status %q, leader %v, version %s; want ok, %v, %s", a.name, status, leads, v, a == leader, leader.HA.Current().Version())
		}
	}
	waitUntil(t, "the leader sees every replica's demand share", func() bool {
		v, _ := promtest.Value(t, leader.Registry, "ilb_ha_replicas", nil)
		return v == 3
	})

	leader.stop(t)
	rest := slices.DeleteFunc(slices.Clone(apps), func(a *haApp) bool { return a == leader })
	next := waitLeader(t, rest)
	agree(t, next, rest)
	if cur := next.Controller.Current(); cur == nil || cur.Version() != next.HA.Current().Version() {
		t.Errorf("the new leader's controller has %v; want the version in force %s", cur, next.HA.Current().Version())
	}
}

// waitLeader waits until exactly one of apps leads and its controller
// has computed.
func waitLeader(t *testing.T, apps []*haApp) *haApp {
	t.Helper()
	var l *haApp
	waitUntil(t, "one leader", func() bool {
		l = nil
		n := 0
		for _, a := range apps {
			if a.HA.Leading() {
				l, n = a, n+1
			}
		}
		return n == 1 && l.Controller.Current() != nil
	})
	return l
}

// agree waits until every replica serves the leader's version, with the
// same xDS versions for every source.
func agree(t *testing.T, leader *haApp, apps []*haApp) {
	t.Helper()
	waitUntil(t, "every replica serves the leader's version", func() bool {
		want := leader.Controller.Current().Version()
		for _, a := range apps {
			if cur := a.HA.Current(); cur == nil || cur.Version() != want {
				return false
			}
		}
		return true
	})
	for _, src := range leader.Config.Sources {
		want := xdsVersions(t, leader, src.Name)
		for _, a := range apps {
			if got := xdsVersions(t, a, src.Name); !slices.Equal(got, want) {
				t.Errorf("replica %s serves %s xDS versions %v; the leader %s serves %v", a.name, src.Name, got, leader.name, want)
			}
		}
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 90s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
