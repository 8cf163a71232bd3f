package signals

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// writeTargets writes a discovery file with a distinct modification time,
// so a change is seen even within the file system's time granularity.
func writeTargets(t *testing.T, path string, at time.Time, lines ...string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
}

func fileCluster(path string) string {
	return fmt.Sprintf("  - {name: c1, region: r1, engine: vllm, models: [m1], profile: p1, discovery: {type: file, file: %q, refresh: 5s}}\n", path)
}

func TestFileDiscovery(t *testing.T) {
	a, b := newFakeReplica(t, "vllm.txt"), newFakeReplica(t, "vllm.txt")
	path := filepath.Join(t.TempDir(), "replicas")
	mtime := time.Unix(1700000000, 0)
	writeTargets(t, path, mtime, "# the fleet", "", a.addr()+"   # first")
	h := newHarness(t, Options{Config: testConfig(t, fileCluster(path), baseSignals)})
	if n := len(h.m.Snapshot().Replicas); n != 0 {
		t.Fatalf("%d replicas before the first discovery", n)
	}
	h.step(0)
	h.wantState(a.addr(), StateReady) // found by the first discovery: already serving

	// A replica that appears later ramps up.
	writeTargets(t, path, mtime.Add(time.Second), a.addr(), b.addr())
	h.step(5 * time.Second)
	if r := h.wantState(b.addr(), StateWarming); r.Reason != "health probe ok" || len(r.Transitions) != 1 || r.Transitions[0].From != StateStarting {
		t.Errorf("new replica: %+v", r)
	}

	// The draining flag drains; clearing it starts the replica again.
	writeTargets(t, path, mtime.Add(2*time.Second), a.addr()+" draining", b.addr())
	s := h.step(5 * time.Second)
	if r := h.wantState(a.addr(), StateDraining); r.Reason != "discovery: draining" || r.Ramp != 0 {
		t.Errorf("draining: %+v", r)
	}
	if st := s.ClusterStates(h.m.cfg)["c1"]; st.Draining != 1 || st.Ready != 0 || len(st.Warming) != 1 {
		t.Errorf("cluster state %+v", st)
	}
	writeTargets(t, path, mtime.Add(3*time.Second), a.addr(), b.addr())
	h.step(5 * time.Second)
	if r := h.replica(a.addr()); r.State != StateWarming || r.Transitions[len(r.Transitions)-2].Reason != "discovery: no longer draining" {
		t.Errorf("undrained: %+v", r)
	}

	// A replica that leaves drains for one refresh, then goes.
	writeTargets(t, path, mtime.Add(4*time.Second), a.addr())
	h.step(5 * time.Second)
	if r := h.wantState(b.addr(), StateDraining); r.Reason != "discovery: removed" {
		t.Errorf("removed: %+v", r)
	}
	h.step(4 * time.Second)
	h.wantState(b.addr(), StateDraining)
	s = h.step(time.Second)
	if len(s.Endpoints("c1")) != 1 || s.Endpoints("c1")[0].Address != a.addr() {
		t.Errorf("after removal: %+v", s.Endpoints("c1"))
	}

	// An unreadable file keeps the last replicas and says why.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	s = h.step(5 * time.Second)
	if c := s.Clusters["c1"]; !strings.Contains(c.DiscoveryError, "no such file") || len(s.Replicas) != 1 {
		t.Errorf("after a discovery error: %+v, %d replicas", c, len(s.Replicas))
	}
}

func TestParseTargets(t *testing.T) {
	got, err := parseTargets([]byte("a:1\n  b:2 draining # old\n#c:3\na:1 draining\n"))
	want := []Target{{Address: "a:1", Draining: true}, {Address: "b:2", Draining: true}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, %v; want %+v", got, err, want)
	}
	_, err = parseTargets([]byte("a:1\nnoport\nb:2 maybe\n"))
	if err == nil || !strings.Contains(err.Error(), `line 2: "noport" is not host:port`) || !strings.Contains(err.Error(), `line 3: unexpected "maybe"`) {
		t.Errorf("error %v", err)
	}
}

func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

func TestDNSDiscoveryA(t *testing.T) {
	f := newFakeReplica(t, "vllm.txt")
	res := &fakeResolver{hosts: map[string][]string{"vllm.svc.local": {"127.0.0.1"}}}
	c := testConfig(t, fmt.Sprintf("  - {name: c1, region: r1, engine: vllm, models: [m1], profile: p1, discovery: {type: dns, name: vllm.svc.local, port: %d, refresh: 5s}}\n", port(t, f.addr())), baseSignals)
	h := newHarness(t, Options{Config: c, Resolver: res})
	h.step(0)
	h.wantState(f.addr(), StateReady)

	res.fail(errDNS)
	s := h.step(5 * time.Second)
	h.wantState(f.addr(), StateReady)
	if got := s.Clusters["c1"].DiscoveryError; got != "dns vllm.svc.local: i/o timeout" {
		t.Errorf("discovery error %q", got)
	}

	res.fail(nil)
	res.hosts["vllm.svc.local"] = nil
	s = h.step(5 * time.Second)
	if r := h.wantState(f.addr(), StateDraining); r.Reason != "discovery: removed" || s.Clusters["c1"].DiscoveryError != "" {
		t.Errorf("removed: %+v", r)
	}
}

func TestDNSDiscoverySRV(t *testing.T) {
	a, b := newFakeReplica(t, "vllm.txt"), newFakeReplica(t, "sglang.txt")
	res := &fakeResolver{
		hosts: map[string][]string{"a.vllm.svc.local": {"127.0.0.1"}, "b.vllm.svc.local": {"127.0.0.1"}},
		srv: map[string][]*net.SRV{"vllm.svc.local": {
			{Target: "a.vllm.svc.local.", Port: uint16(port(t, a.addr()))},
			{Target: "b.vllm.svc.local.", Port: uint16(port(t, b.addr()))},
		}},
	}
	c := testConfig(t, "  - {name: c1, region: r1, engine: vllm, models: [m1], profile: p1, discovery: {type: dns, name: vllm.svc.local, srv: true, refresh: 5s}}\n", baseSignals)
	h := newHarness(t, Options{Config: c, Resolver: res})
	s := h.step(0)
	h.wantState(a.addr(), StateReady)
	r := h.wantState(b.addr(), StateReady)
	if r.Metrics.Problems == nil { // an SGLang exposition read with the vLLM mapping
		t.Errorf("problems %+v", r.Metrics)
	}
	if len(s.Endpoints("c1")) != 2 {
		t.Fatalf("endpoints %+v", s.Endpoints("c1"))
	}

	res.fail(errDNS)
	s = h.step(5 * time.Second)
	if got := s.Clusters["c1"].DiscoveryError; got != "dns srv vllm.svc.local: i/o timeout" || len(s.Endpoints("c1")) != 2 {
		t.Errorf("discovery error %q, endpoints %d: the last targets must stay", got, len(s.Endpoints("c1")))
	}
	h.wantState(a.addr(), StateReady)
}

// TestFileDiscoveryKeepsTargetsOnABadFile: a discovery file that becomes
// empty (an in-place rewrite caught between truncate and write), only
// whitespace or unparsable keeps the last targets and says why; a file of
// comment lines only is an explicit empty list and drains every replica.
func TestFileDiscoveryKeepsTargetsOnABadFile(t *testing.T) {
	tests := []struct {
		name    string
		content string
		err     string // substring of the cluster's DiscoveryError; "" drains
	}{
		{"truncated to 0 bytes", "", "is empty (0 bytes): want host:port lines, or a comment line such as \"# no replicas\" to drain every replica on purpose"},
		{"only whitespace", " \n\t\n\n", "is only whitespace (5 bytes)"},
		{"unparsable", "10.0.0.1:8000\nnot-an-address\n", `line 2: "not-an-address" is not host:port`},
		{"comment lines only: drain", "# no replicas\n# (scaled to zero)\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := newFakeReplica(t, "vllm.txt"), newFakeReplica(t, "vllm.txt")
			path := filepath.Join(t.TempDir(), "replicas")
			mtime := time.Unix(1700000000, 0)
			writeTargets(t, path, mtime, a.addr(), b.addr())
			h := newHarness(t, Options{Config: testConfig(t, fileCluster(path), baseSignals)})
			h.step(0)
			h.wantState(a.addr(), StateReady)

			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(path, mtime.Add(time.Second), mtime.Add(time.Second)); err != nil {
				t.Fatal(err)
			}
			s := h.step(5 * time.Second)
			c := s.Clusters["c1"]
			if tt.err == "" {
				if c.DiscoveryError != "" {
					t.Errorf("discovery error %q", c.DiscoveryError)
				}
				for _, f := range []*fakeReplica{a, b} {
					if r := h.wantState(f.addr(), StateDraining); r.Reason != "discovery: removed" {
						t.Errorf("%s: %q", f.addr(), r.Reason)
					}
				}
				return
			}
			if !strings.Contains(c.DiscoveryError, tt.err) || !strings.Contains(c.DiscoveryError, path) {
				t.Errorf("discovery error %q; want the file and %q", c.DiscoveryError, tt.err)
			}
			h.wantState(a.addr(), StateReady)
			h.wantState(b.addr(), StateReady)
			s = h.step(5 * time.Second) // still bad: still kept
			if s.Clusters["c1"].Ready != 2 {
				t.Errorf("second refresh: %+v", s.Clusters["c1"])
			}
			writeTargets(t, path, mtime.Add(2*time.Second), a.addr(), b.addr())
			if s = h.step(5 * time.Second); s.Clusters["c1"].DiscoveryError != "" || s.Clusters["c1"].Ready != 2 {
				t.Errorf("rewritten: %+v", s.Clusters["c1"])
			}
		})
	}
}

// TestParseTargetsBoundsItsErrors: a file of junk gives an error of a
// bounded size that names the first bad lines.
func TestParseTargetsBoundsItsErrors(t *testing.T) {
	long := strings.Repeat("x", 10000)
	data := long + ":80\n" + strings.Repeat(long+"\n", 1000)
	_, err := parseTargets([]byte(data))
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if len(msg) > 2000 || !strings.Contains(msg, "line 1: address \"xxxx") || !strings.Contains(msg, "(10003 bytes) is longer than 300 bytes") ||
		!strings.Contains(msg, "and 996 more bad lines") {
		t.Errorf("error (%d bytes): %.600s", len(msg), msg)
	}
}
