package envoysim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
)

// TestMain fails the package when a goroutine started by envoysim is still
// running after every test has cleaned up.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := waitNoLeaks(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked by envoysim:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// waitNoLeaks waits until no goroutine runs envoysim code (other than the
// caller) and returns the stacks of the leaked ones otherwise.
func waitNoLeaks(limit time.Duration) string {
	deadline := time.Now().Add(limit)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "envoysim.") && !strings.Contains(g, "envoysim.waitNoLeaks") && !strings.Contains(g, "envoysim.TestMain") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("ENVOYSIM_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// cpLogger silences go-control-plane.
type cpLogger struct{}

func (cpLogger) Debugf(string, ...any) {}
func (cpLogger) Infof(string, ...any)  {}
func (cpLogger) Warnf(string, ...any)  {}
func (cpLogger) Errorf(string, ...any) {}

// clusterHash keys snapshots by node.cluster.
type clusterHash struct{}

func (clusterHash) ID(n *corev3.Node) string { return n.GetCluster() }

const testNodeCluster = "ilb-test"

// xdsServer is go-control-plane's ADS server with a snapshot cache,
// recording every DiscoveryRequest.
type xdsServer struct {
	cache cachev3.SnapshotCache
	addr  string
	opts  []grpc.ServerOption

	mu       sync.Mutex
	requests []*discoveryv3.DiscoveryRequest
	srv      *grpc.Server
	cancel   context.CancelFunc
	done     chan struct{}
}

// startXDS serves ADS on loopback; opts (e.g. grpc.Creds for TLS)
// configure the server, across restarts too.
func startXDS(t *testing.T, opts ...grpc.ServerOption) *xdsServer {
	t.Helper()
	x := &xdsServer{cache: cachev3.NewSnapshotCache(true, clusterHash{}, cpLogger{}), opts: opts}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x.addr = ln.Addr().String()
	x.serve(ln)
	t.Cleanup(x.stop)
	return x
}

func (x *xdsServer) serve(ln net.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, r *discoveryv3.DiscoveryRequest) error {
		x.mu.Lock()
		defer x.mu.Unlock()
		x.requests = append(x.requests, r)
		return nil
	}}
	srv := grpc.NewServer(x.opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(srv, serverv3.NewServer(ctx, x.cache, cb))
	done := make(chan struct{})
	x.mu.Lock()
	x.srv, x.cancel, x.done = srv, cancel, done
	x.mu.Unlock()
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
}

// stop shuts the server down (idempotent).
func (x *xdsServer) stop() {
	x.mu.Lock()
	srv, cancel, done := x.srv, x.cancel, x.done
	x.srv = nil
	x.mu.Unlock()
	if srv == nil {
		return
	}
	cancel()
	srv.Stop()
	<-done
}

// restart serves again on the same address.
func (x *xdsServer) restart(t *testing.T) {
	t.Helper()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", x.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	x.serve(ln)
}

func (x *xdsServer) set(t *testing.T, version string, res ...types.Resource) {
	t.Helper()
	// Every type gets a version, so that empty types are answered too.
	byType := map[resourcev3.Type][]types.Resource{
		resourcev3.ClusterType: {}, resourcev3.EndpointType: {}, resourcev3.ListenerType: {}, resourcev3.RouteType: {},
	}
	for _, r := range res {
		var typ string
		switch r.(type) {
		case *clusterv3.Cluster:
			typ = resourcev3.ClusterType
		case *endpointv3.ClusterLoadAssignment:
			typ = resourcev3.EndpointType
		case *listenerv3.Listener:
			typ = resourcev3.ListenerType
		case *routev3.RouteConfiguration:
			typ = resourcev3.RouteType
		default:
			t.Fatalf("unexpected resource %T", r)
		}
		byType[typ] = append(byType[typ], r)
	}
	snap, err := cachev3.NewSnapshot(version, byType)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), testNodeCluster, snap); err != nil {
		t.Fatal(err)
	}
}

// nacks returns the NACKs received for typeURL.
func (x *xdsServer) nacks(typeURL string) []*discoveryv3.DiscoveryRequest {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []*discoveryv3.DiscoveryRequest
	for _, r := range x.requests {
		if r.GetTypeUrl() == typeURL && r.GetErrorDetail() != nil {
			out = append(out, r)
		}
	}
	return out
}

// upstream is an HTTP server on loopback recording its requests.
type upstream struct {
	name string
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	method, path, host string
	header             http.Header
	body               string
}

// startUpstream starts an upstream answering with handler (nil: 200 with
// "x-upstream: name" and body "hello from name"). h2c makes it serve
// prior-knowledge HTTP/2 only.
func startUpstream(t *testing.T, name string, h2c bool, handler http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{name: name}
	if handler == nil {
		handler = func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("x-upstream", name)
			_, _ = io.WriteString(w, "hello from "+name)
		}
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, recorded{method: r.Method, path: r.RequestURI, host: r.Host, header: r.Header.Clone(), body: string(body)})
		u.mu.Unlock()
		handler(w, r)
	}))
	if h2c {
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		srv.Config.Protocols = p
	}
	srv.Start()
	u.srv = srv
	t.Cleanup(srv.Close)
	return u
}

func (u *upstream) addr() string { return u.srv.Listener.Addr().String() }

func (u *upstream) requests() []recorded {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]recorded(nil), u.reqs...)
}

func (u *upstream) last(t *testing.T) recorded {
	t.Helper()
	r := u.requests()
	if len(r) == 0 {
		t.Fatalf("upstream %s got no request", u.name)
	}
	return r[len(r)-1]
}

// harness wires an xDS server, an ext_proc fake, upstreams and envoysim.
type harness struct {
	t       *testing.T
	xds     *xdsServer
	proc    *fakeProcessor
	env     *Envoy
	ups     map[string]*upstream
	version int
}

func newHarness(t *testing.T, handler procHandler) *harness {
	t.Helper()
	return &harness{t: t, xds: startXDS(t), proc: startProcessor(t, handler), ups: map[string]*upstream{}}
}

// upstream starts a named upstream; the cluster of the same name points at it.
func (h *harness) upstream(name string, handler http.HandlerFunc) *upstream {
	u := startUpstream(h.t, name, false, handler)
	h.ups[name] = u
	return u
}

// clusters returns a STATIC cluster per upstream.
func (h *harness) clusters() []types.Resource {
	var out []types.Resource
	for name, u := range h.ups {
		out = append(out, staticCluster(name, false, u.addr()))
	}
	return out
}

// push publishes a new snapshot version.
func (h *harness) push(res ...types.Resource) string {
	h.version++
	v := "v" + strconv.Itoa(h.version)
	h.xds.set(h.t, v, res...)
	return v
}

// start runs envoysim with the standard bootstrap and waits until ready.
func (h *harness) start(rand func() uint64) {
	h.t.Helper()
	h.env = startEnvoy(h.t, testBootstrap(h.xds.addr, h.proc.addr), rand)
}

func startEnvoy(t *testing.T, b *bootstrapv3.Bootstrap, rand func() uint64) *Envoy {
	t.Helper()
	return startEnvoyOpts(t, Options{Bootstrap: b, Rand: rand})
}

// startOpts runs envoysim with the standard bootstrap and opts (Bootstrap
// and Logger are filled in) and waits until ready.
func (h *harness) startOpts(opts Options) {
	h.t.Helper()
	if opts.Bootstrap == nil {
		opts.Bootstrap = testBootstrap(h.xds.addr, h.proc.addr)
	}
	h.env = startEnvoyOpts(h.t, opts)
}

func startEnvoyOpts(t *testing.T, opts Options) *Envoy {
	t.Helper()
	opts.Logger = testLogger()
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := e.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	return e
}

// url returns the URL of path on the named listener.
func (h *harness) url(listener, path string) string {
	addr, ok := h.env.ListenerAddr(listener)
	if !ok {
		h.t.Fatalf("listener %s not bound", listener)
	}
	return "http://" + addr + path
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// response is what a test client saw.
type response struct {
	status int
	header http.Header
	body   string
}

// do sends a request and reads the whole response.
func do(t *testing.T, method, url string, header map[string]string, body string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header["User-Agent"] = []string{""} // no default User-Agent
	for k, v := range header {
		if strings.EqualFold(k, "host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	return send(t, req)
}

// send sends req without keep-alive (within 10 s) and reads the whole
// response.
func send(t *testing.T, req *http.Request) response {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// counter is a deterministic Rand returning start, start+1, ...
func counter(start uint64) func() uint64 {
	var n atomic.Uint64
	n.Store(start)
	return func() uint64 { return n.Add(1) - 1 }
}

// constant is a Rand always returning v.
func constant(v uint64) func() uint64 { return func() uint64 { return v } }
