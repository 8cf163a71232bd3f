package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const (
	testModel   = "sim-model"
	testModel2  = "sim-model-b"
	testReplica = "us-east-a/0"
	testCluster = "us-east-a"
	waitLimit   = 10 * time.Second // failure deadline, never a pacing delay
)

// testNow is the fixed clock of test servers.
func testNow() time.Time { return time.Unix(1700000000, 0) }

// testOptions are valid options around backend b (nil: zero-delay FixedBackend).
func testOptions(b Backend) Options {
	if b == nil {
		b = NewFixedBackend(FixedTiming{}) // zero delays
	}
	return Options{
		Name: testReplica, Cluster: testCluster, Models: []string{testModel, testModel2},
		Backend: b, Now: testNow,
	}
}

// startServer serves opts on a loopback port until the test ends, and
// checks that Serve then returns nil.
func startServer(t *testing.T, opts Options) string {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve returned %v after shutdown, want nil", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// listen opens a loopback listener.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return ln
}

// send does one request with ctx and returns the open response; the
// exchange fails after waitLimit, so a stuck server fails the test.
func send(ctx context.Context, t *testing.T, method, url, body string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, waitLimit)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp
}

// post posts body in the background and delivers the status code, or 0
// and the error; safe to use from any goroutine.
func post(ctx context.Context, url, body string) <-chan result {
	out := make(chan result, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			out <- result{err: err}
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- result{err: err}
			return
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out <- result{code: resp.StatusCode, err: err}
	}()
	return out
}

type result struct {
	code int
	err  error
}

// wantOK waits for r and fails unless it is a 200.
func wantOK(t *testing.T, r <-chan result) {
	t.Helper()
	select {
	case res := <-r:
		if res.err != nil || res.code != http.StatusOK {
			t.Errorf("request: status %d, err %v; want 200", res.code, res.err)
		}
	case <-time.After(waitLimit):
		t.Fatal("request did not finish")
	}
}

// reply is a response read to the end.
type reply struct {
	StatusCode int
	Header     http.Header
}

// call does one request and returns the response with its whole body.
func call(t *testing.T, method, url, body string) (reply, []byte) {
	t.Helper()
	resp := send(t.Context(), t, method, url, body)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return reply{StatusCode: resp.StatusCode, Header: resp.Header}, b
}

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
}

// readEvent reads one SSE event and returns its data; io.EOF at the end.
func readEvent(r *bufio.Reader) (string, error) {
	var data []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && len(data) == 0 {
				return "", io.EOF
			}
			return "", errors.Join(errors.New("truncated event"), err)
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			return strings.Join(data, "\n"), nil
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			data = append(data, d)
		}
	}
}

// gate is a FixedTiming.Sleep that blocks every sleeper until step or open.
type gate struct {
	ch      chan struct{}
	entered chan struct{} // one signal per Sleep call
}

func newGate() *gate { return &gate{ch: make(chan struct{}), entered: make(chan struct{}, 1024)} }

func (g *gate) sleep(ctx context.Context, _ time.Duration) error {
	g.entered <- struct{}{}
	select {
	case <-g.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// step lets exactly one sleeper go.
func (g *gate) step(t *testing.T) {
	t.Helper()
	select {
	case g.ch <- struct{}{}:
	case <-time.After(waitLimit):
		t.Fatal("step: no request is sleeping")
	}
}

// waitEntered waits until n more Sleep calls have begun.
func (g *gate) waitEntered(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-g.entered:
		case <-time.After(waitLimit):
			t.Fatal("no request entered Sleep")
		}
	}
}

// observedBackend signals every successful Generate call (after which the
// FixedBackend has admitted or queued the request).
type observedBackend struct {
	Backend
	generated chan GenRequest
}

func observe(b Backend) *observedBackend {
	return &observedBackend{Backend: b, generated: make(chan GenRequest, 64)}
}

func (o *observedBackend) Generate(ctx context.Context, req GenRequest) (<-chan Token, error) {
	ch, err := o.Backend.Generate(ctx, req)
	if err == nil {
		o.generated <- req
	}
	return ch, err
}

func (o *observedBackend) waitGenerated(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-o.generated:
		case <-time.After(waitLimit):
			t.Fatal("Generate was not called")
		}
	}
}

// promSample is one parsed sample: a gauge or counter value, or a
// histogram's sample count.
type promSample struct {
	labels map[string]string
	value  float64
}

// scrape fetches /metrics and parses it with expfmt.
func scrape(t *testing.T, base string) map[string][]promSample {
	t.Helper()
	resp, body := call(t, http.MethodGet, base+"/metrics", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: status %d: %s", resp.StatusCode, body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	out := map[string][]promSample{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			ps := promSample{labels: map[string]string{}}
			for _, lp := range m.GetLabel() {
				ps.labels[lp.GetName()] = lp.GetValue()
			}
			switch {
			case m.Gauge != nil:
				ps.value = m.GetGauge().GetValue()
			case m.Counter != nil:
				ps.value = m.GetCounter().GetValue()
			case m.Histogram != nil:
				ps.value = float64(m.GetHistogram().GetSampleCount())
			}
			out[name] = append(out[name], ps)
		}
	}
	return out
}

// sample returns the value of the metric name whose labels include want;
// ok is false if there is none.
func sample(ms map[string][]promSample, name string, want map[string]string) (float64, bool) {
next:
	for _, s := range ms[name] {
		for k, v := range want {
			if s.labels[k] != v {
				continue next
			}
		}
		return s.value, true
	}
	return 0, false
}
