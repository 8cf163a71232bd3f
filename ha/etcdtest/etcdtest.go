// Package etcdtest runs a real etcd cluster for tests: N members of the
// etcd server binary (Debian's etcd-server, /usr/bin/etcd) on 127.0.0.1,
// each with its own client and peer port and its data in the test's
// temporary directory. A test can kill a member and start it again with
// its data (to lose and regain quorum); everything stops when the test
// ends.
//
// The binary is $ILB_ETCD, else /usr/bin/etcd, else etcd on PATH. When
// there is none the test fails and says how to install it: HA tests are
// not optional (.ci/run installs etcd-server).
package etcdtest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// StartTimeout bounds the wait for a new cluster, or a restarted member,
// to answer healthy. It is generous: on a loaded two-core machine an
// etcd member can take seconds to elect a leader.
const StartTimeout = 60 * time.Second

// Cluster is a running etcd cluster. Its methods may be called from the
// test goroutine only.
type Cluster struct {
	t       testing.TB
	bin     string
	dir     string
	token   string
	tls     *TLS
	members []*Member
}

// TLS makes the members serve their client URLs over https and require a
// client certificate (etcd's --client-cert-auth). Peers talk plain HTTP
// on loopback.
type TLS struct {
	// CertFile and KeyFile are the members' certificate (valid for
	// 127.0.0.1) and key; CAFile the CAs of the client certificates.
	CertFile, KeyFile, CAFile string
	// Client is what Cluster's own health checks and Client present.
	Client *tls.Config
}

// Member is one etcd server of a Cluster.
type Member struct {
	Name string
	// ClientURL is where clients reach the member (http://127.0.0.1:port).
	ClientURL string
	peerURL   string
	dataDir   string
	logPath   string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the current process has exited
	err  error         // its exit status, once done
}

// Binary returns the etcd server binary the tests run, or an error that
// says how to install one.
func Binary() (string, error) {
	if p := os.Getenv("ILB_ETCD"); p != "" {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd", nil
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	return "", errors.New("etcd is not installed: the HA tests run a real etcd cluster; install Debian's etcd-server " +
		"(apt-get install etcd-server, as .ci/run does) or set ILB_ETCD to an etcd 3.4+ server binary")
}

// Start runs an n-member cluster (n >= 1) and returns once every member
// answers healthy. It skips the test if etcd is missing (fails it with
// ILB_REQUIRE_ETCD=1), and fails it if the cluster does not come up within
// StartTimeout, printing the members' logs.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartTLS(t, n, nil)
}

// StartTLS is Start with the members' client URLs over TLS (nil: plain).
func StartTLS(t testing.TB, n int, tc *TLS) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("etcdtest: want at least one member, got %d", n)
	}
	bin, err := Binary()
	if err != nil {
		// As the dashboard's browser test does without chromium: skipped
		// where etcd is not installed, required where CI installed it.
		if os.Getenv("ILB_REQUIRE_ETCD") != "1" {
			t.Skipf("%v (ILB_REQUIRE_ETCD=1 makes this a failure; .ci/run sets it)", err)
		}
		t.Fatal(err)
	}
	// A port found free can be taken before etcd binds it: then the
	// cluster starts again on other ports.
	for attempt := 1; ; attempt++ {
		c := &Cluster{t: t, bin: bin, dir: t.TempDir(), token: fmt.Sprintf("ilb-test-%d", time.Now().UnixNano()), tls: tc}
		err := c.launch(n)
		if err == nil {
			return c
		}
		c.stop()
		if !strings.Contains(c.logs(), "address already in use") || attempt == 3 {
			t.Fatalf("etcdtest: %v\n%s", err, c.logs())
		}
		t.Logf("etcdtest: a port was taken (%v): starting again on other ports", err)
	}
}

// Launch runs an n-member cluster outside a test (the lab's ha-demo),
// its data and logs under dir, and returns once every member answers
// healthy; Close stops it. Only Endpoints and Close may be called on it.
func Launch(dir string, n int) (*Cluster, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		c := &Cluster{bin: bin, dir: filepath.Join(dir, fmt.Sprint(attempt)), token: fmt.Sprintf("ilb-demo-%d", time.Now().UnixNano())}
		if err := os.MkdirAll(c.dir, 0o700); err != nil {
			return nil, err
		}
		err := c.launch(n)
		if err == nil {
			return c, nil
		}
		c.stop()
		if !strings.Contains(c.logs(), "address already in use") || attempt == 3 {
			return nil, fmt.Errorf("etcd: %w\n%s", err, c.logs())
		}
	}
}

// Close stops every member of a cluster from Launch and waits for them.
func (c *Cluster) Close() { c.stop() }

// launch starts n new members and waits for them to be healthy; the
// caller stops them on error.
func (c *Cluster) launch(n int) error {
	ports, err := freePorts(2 * n)
	if err != nil {
		return err
	}
	var initial []string
	scheme := "http"
	if c.tls != nil {
		scheme = "https"
	}
	for i := range n {
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			ClientURL: fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[2*i]),
			peerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
		}
		m.dataDir = filepath.Join(c.dir, m.Name)
		m.logPath = filepath.Join(c.dir, m.Name+".log")
		c.members = append(c.members, m)
		initial = append(initial, m.Name+"="+m.peerURL)
	}
	if c.t != nil {
		c.t.Cleanup(c.stop)
	}
	for _, m := range c.members {
		if err := c.run(m, strings.Join(initial, ",")); err != nil {
			return fmt.Errorf("start %s: %w", m.Name, err)
		}
	}
	return c.healthy()
}

// Endpoints are the client URLs of every member, running or not.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.ClientURL
	}
	return out
}

// Members returns the members in order.
func (c *Cluster) Members() []*Member { return c.members }

// Kill stops member i at once (SIGKILL, no clean shutdown) and waits for
// its process to exit. Its data stays for Restart.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	m := c.members[i]
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil {
		c.t.Fatalf("etcdtest: %s is not running", m.Name)
	}
	_ = cmd.Process.Kill()
	<-done
	m.mu.Lock()
	m.cmd = nil
	m.mu.Unlock()
}

// Restart starts member i again with its data and ports after Kill. It
// does not wait for the member to be healthy (alone it cannot be: it
// needs a quorum); see WaitHealthy.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	m := c.members[i]
	m.mu.Lock()
	running := m.cmd != nil
	m.mu.Unlock()
	if running {
		c.t.Fatalf("etcdtest: %s is already running", m.Name)
	}
	if err := c.run(m, ""); err != nil {
		c.t.Fatalf("etcdtest: restart %s: %v", m.Name, err)
	}
}

// WaitHealthy waits until every running member answers /health with
// "true" (it has a leader and no alarm), failing the test after
// StartTimeout or when a member's process exits.
func (c *Cluster) WaitHealthy() {
	c.t.Helper()
	if err := c.healthy(); err != nil {
		c.t.Fatalf("etcdtest: %v\n%s", err, c.logs())
	}
}

func (c *Cluster) healthy() error {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	for _, m := range c.members {
		m.mu.Lock()
		running, done := m.cmd != nil, m.done
		m.mu.Unlock()
		if !running {
			continue
		}
		if err := m.waitHealthy(ctx, done, c.clientTLS()); err != nil {
			return fmt.Errorf("%s is not healthy: %w", m.Name, err)
		}
	}
	return nil
}

// run starts m's process; initial is the initial cluster of a new
// cluster, "" to start from m's data.
func (c *Cluster) run(m *Member, initial string) error {
	args := []string{
		"--name", m.Name, "--data-dir", m.dataDir,
		"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.peerURL, "--initial-advertise-peer-urls", m.peerURL,
		// The default raft timing (100ms heartbeat, 1s election): shorter
		// ones make a loaded machine elect in a loop. Pre-vote keeps a
		// restarted member from deposing a working leader.
		"--heartbeat-interval", "100", "--election-timeout", "1000", "--pre-vote",
		"--logger", "zap", "--log-level", "warn", "--log-outputs", "stderr",
		"--enable-v2=false", "--quota-backend-bytes", fmt.Sprint(256 << 20),
	}
	if c.tls != nil {
		args = append(args, "--cert-file", c.tls.CertFile, "--key-file", c.tls.KeyFile, "--trusted-ca-file", c.tls.CAFile, "--client-cert-auth")
	}
	if initial != "" {
		args = append(args, "--initial-cluster", initial, "--initial-cluster-state", "new", "--initial-cluster-token", c.token)
	}
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, args...) //nolint:noctx // the member outlives any one context: Kill and the cleanup stop it
	cmd.Stdout, cmd.Stderr = logf, logf
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return err
	}
	done := make(chan struct{})
	m.mu.Lock()
	m.cmd, m.done, m.err = cmd, done, nil
	m.mu.Unlock()
	go func() { // owned by m: ends when the process exits (Kill, stop)
		err := cmd.Wait()
		_ = logf.Close()
		m.mu.Lock()
		m.err = err
		m.mu.Unlock()
		close(done)
	}()
	return nil
}

// waitHealthy polls m's /health until it says true, ctx ends or the
// process exits (done).
func (m *Member) waitHealthy(ctx context.Context, done <-chan struct{}, tc *tls.Config) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	defer client.CloseIdleConnections()
	backoff := 20 * time.Millisecond
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.ClientURL+"/health", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			var b bytes.Buffer
			_, _ = b.ReadFrom(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(b.String(), `"health":"true"`) {
				return nil
			}
			last = fmt.Errorf("/health answered %d %s", resp.StatusCode, strings.TrimSpace(b.String()))
		} else {
			last = err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last answer: %w)", ctx.Err(), last)
		case <-done:
			t.Stop()
			m.mu.Lock()
			defer m.mu.Unlock()
			return fmt.Errorf("the process exited: %w", m.err)
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// stop kills every member and waits for them; on a failed test it logs
// their output.
func (c *Cluster) stop() {
	if c.t != nil && c.t.Failed() {
		c.t.Log(c.logs())
	}
	for _, m := range c.members {
		m.mu.Lock()
		cmd, done := m.cmd, m.done
		m.cmd = nil
		m.mu.Unlock()
		if cmd != nil {
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

// logs returns the tail of every member's log.
func (c *Cluster) logs() string {
	var b strings.Builder
	for _, m := range c.members {
		data, err := os.ReadFile(m.logPath)
		if err != nil {
			fmt.Fprintf(&b, "--- %s: no log: %v\n", m.Name, err)
			continue
		}
		if len(data) > 8<<10 {
			data = data[len(data)-8<<10:]
		}
		fmt.Fprintf(&b, "--- %s (%s) log tail:\n%s\n", m.Name, m.ClientURL, data)
	}
	return b.String()
}

func (c *Cluster) clientTLS() *tls.Config {
	if c.tls == nil {
		return nil
	}
	return c.tls.Client
}

// freePorts returns n distinct loopback ports that were free a moment
// ago (the kernel's ephemeral ports; etcd binds them right after).
func freePorts(n int) ([]int, error) {
	var lc net.ListenConfig
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	out := make([]int, 0, n)
	for range n {
		ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// Client returns an etcd client of every member, closed when the test
// ends. Its calls retry on another member while one is down; bound them
// with a context.
func (c *Cluster) Client() *clientv3.Client {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		// etcd refuses pings more often than every 5s.
		DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 2 * time.Second,
		TLS: c.clientTLS(),
	})
	if err != nil {
		c.t.Fatalf("etcdtest: client: %v", err)
	}
	c.t.Cleanup(func() { _ = cli.Close() })
	return cli
}
