// Package kubetest runs a real Kubernetes API server for tests: the
// kube-apiserver binary built from the Go module proxy (`make kube`, into
// .tools/kube) over a one-member etcd (Debian's etcd-server, through
// package etcdtest), on 127.0.0.1 with a serving certificate of its own
// CA, a static admin token (a user in system:masters), service-account
// token signing (so a test can act as a ServiceAccount) and RBAC. No
// controller manager or scheduler runs: what a test needs (EndpointSlices,
// Pods, their conditions) it writes itself.
//
// The binary is $ILB_KUBE_APISERVER, else .tools/kube/kube-apiserver at
// the module's root. Without it the test is skipped, or fails when
// ILB_REQUIRE_KUBE=1 (.ci/run builds it and sets that).
package kubetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ilbproject/ilb/ha/etcdtest"
)

// StartTimeout bounds the wait for the API server to answer ready. It
// takes 4-5 s on an idle two-core machine; a loaded one is slower.
const StartTimeout = 120 * time.Second

// Server is a running kube-apiserver. Its methods are for the test
// goroutine, except URL, CAFile and the config builders.
type Server struct {
	t        testing.TB
	bin      string
	dir      string
	etcd     *etcdtest.Cluster
	port     int
	url      string
	caFile   string
	caPEM    []byte
	adminTok string
	args     []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Binary returns the kube-apiserver the tests run, or an error that says
// how to build one.
func Binary() (string, error) {
	if p := os.Getenv("ILB_KUBE_APISERVER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("ILB_KUBE_APISERVER: %w", err)
		}
		return p, nil
	}
	if root, err := ModuleRoot(); err == nil {
		p := filepath.Join(root, ".tools", "kube", "kube-apiserver")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("kube-apiserver is not built: the Kubernetes tests run a real API server; " +
		"run `make kube` (it builds one from the Go module proxy into .tools/kube, about 5 minutes), or set ILB_KUBE_APISERVER")
}

// ModuleRoot is the nearest folder above the working directory with a
// go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = up
	}
}

// Start runs etcd and kube-apiserver on loopback and returns once the API
// server answers ready; both stop when the test ends. It skips the test
// without the binaries (fails it with ILB_REQUIRE_KUBE=1).
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv("ILB_REQUIRE_KUBE") != "1" {
			t.Skipf("%v (ILB_REQUIRE_KUBE=1 makes this a failure; .ci/run sets it)", err)
		}
		t.Fatal(err)
	}
	if _, err := etcdtest.Binary(); err != nil && os.Getenv("ILB_REQUIRE_KUBE") != "1" {
		t.Skipf("%v (the Kubernetes tests need etcd too)", err)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), etcd: etcdtest.Start(t, 1)}
	if err := s.writeFiles(); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	t.Cleanup(s.kill)
	for attempt := 1; ; attempt++ {
		port, err := FreePort()
		if err != nil {
			t.Fatalf("kubetest: %v", err)
		}
		s.port = port
		s.url = "https://127.0.0.1:" + strconv.Itoa(port)
		s.args = s.flags()
		err = s.launch()
		if err == nil {
			return s
		}
		s.kill()
		if !strings.Contains(s.log(), "address already in use") || attempt == 3 {
			t.Fatalf("kubetest: %v\n%s", err, s.tail())
		}
	}
}

// flags are kube-apiserver's command line on s's port and files.
func (s *Server) flags() []string {
	f := func(name string) string { return filepath.Join(s.dir, name) }
	return []string{
		"--etcd-servers=" + strings.Join(s.etcd.Endpoints(), ","),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(s.port),
		"--tls-cert-file=" + f("server.crt"),
		"--tls-private-key-file=" + f("server.key"),
		"--cert-dir=" + f("certs"),
		"--token-auth-file=" + f("tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-key-file=" + f("sa.pub"),
		"--service-account-signing-key-file=" + f("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.96.0.0/16",
		// No controller manager runs: the default ServiceAccount of a
		// namespace never appears, so this admission plugin would refuse
		// every Pod.
		"--disable-admission-plugins=ServiceAccount",
		// It refuses a loopback advertise address otherwise.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		"--enable-priority-and-fairness=false",
	}
}

// launch starts the process and waits for /readyz.
func (s *Server) launch() error {
	logf, err := os.OpenFile(filepath.Join(s.dir, "apiserver.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(s.bin, s.args...) //nolint:noctx // the process outlives this call: kill and the cleanup stop it
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return s.waitReady(done)
}

// waitReady polls /readyz with the admin token until it answers ok.
func (s *Server) waitReady(done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	cs, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		return err
	}
	rc := cs.Discovery().RESTClient()
	var last error
	for {
		body, err := rc.Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && strings.TrimSpace(string(body)) == "ok" {
			return nil
		}
		last = err
		select {
		case <-done:
			return errors.New("kube-apiserver exited")
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready within %s: %w", StartTimeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// URL is the API server's address, https://127.0.0.1:port.
func (s *Server) URL() string { return s.url }

// CAFile is the PEM file of the CA that signed the serving certificate.
func (s *Server) CAFile() string { return s.caFile }

// AdminToken is a bearer token of a user in system:masters.
func (s *Server) AdminToken() string { return s.adminTok }

// Config is a client configuration for the admin user.
func (s *Server) Config() *rest.Config { return s.restConfig(s.adminTok) }

// ConfigFor is a client configuration with the given bearer token.
func (s *Server) ConfigFor(token string) *rest.Config { return s.restConfig(token) }

func (s *Server) restConfig(token string) *rest.Config {
	return &rest.Config{
		Host: s.url, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.caPEM},
		QPS:             1000, Burst: 2000, UserAgent: "ilb-kubetest",
	}
}

// Client is a clientset of the admin user.
func (s *Server) Client() kubernetes.Interface {
	cs, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		s.t.Fatalf("kubetest: %v", err)
	}
	return cs
}

// Kubeconfig writes a kubeconfig file for the bearer token (the admin's
// when token is "") with one context, context, and returns its path.
func (s *Server) Kubeconfig(context, token string) string {
	if token == "" {
		token = s.adminTok
	}
	path := filepath.Join(s.dir, fmt.Sprintf("kubeconfig-%s-%d", context, time.Now().UnixNano()))
	data := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: u
  user:
    token: %s
contexts:
- name: %s
  context: {cluster: test, user: u}
current-context: %s
`, s.url, s.caFile, token, context, context)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		s.t.Fatalf("kubetest: %v", err)
	}
	return path
}

// Stop kills the API server (SIGKILL) and waits for it to exit; etcd keeps
// its data. Start it again with Restart.
func (s *Server) Stop() { s.kill() }

// Restart starts the API server again on the same port, over the same
// etcd, and waits until it is ready.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.launch(); err != nil {
		s.t.Fatalf("kubetest: restart: %v\n%s", err, s.tail())
	}
}

func (s *Server) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// log is the API server's whole log.
func (s *Server) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "apiserver.log"))
	return string(b)
}

// tail is the end of the log, for a failure message.
func (s *Server) tail() string {
	l := s.log()
	if len(l) > 8000 {
		l = "…" + l[len(l)-8000:]
	}
	return l
}

// FreePort returns a port the kernel just gave out on 127.0.0.1.
func FreePort() (int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
