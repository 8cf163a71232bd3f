package test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"

	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/sim/stack"
)

// TestExtProcFailures runs each way ext_proc can fail — never reachable,
// stopped while serving, stalled past the message timeout — under both
// fail modes: the fail-open source (edge-us) is served by its fallback
// route, the default model's weights over the clusters that serve every
// model; the fail-closed one (edge-eu) gets a 503 with a JSON body that
// says why.
func TestExtProcFailures(t *testing.T) {
	s := startStack(t, nil)
	tests := []struct {
		name string
		// broken returns an ext_proc address that is now failing.
		broken func(t *testing.T, s *stack.Stack, envoys func(addr string) (open, closed stack.Envoy)) (open, closed stack.Envoy)
	}{
		{"unreachable", func(t *testing.T, _ *stack.Stack, envoys func(string) (stack.Envoy, stack.Envoy)) (stack.Envoy, stack.Envoy) {
			return envoys(deadAddr(t))
		}},
		{"stopped while serving", func(t *testing.T, s *stack.Stack, envoys func(string) (stack.Envoy, stack.Envoy)) (stack.Envoy, stack.Envoy) {
			addr, stop := ownExtProc(t, s)
			open, closed := envoys(addr)
			if resp, _ := chat(t, open.URL, "qwen-7b", nil); resp.StatusCode != http.StatusOK || resp.Header.Get("x-request-id") == "" {
				t.Fatalf("before the stop: %d", resp.StatusCode)
			}
			stop()
			return open, closed
		}},
		{"stalled past message_timeout", func(t *testing.T, _ *stack.Stack, envoys func(string) (stack.Envoy, stack.Envoy)) (stack.Envoy, stack.Envoy) {
			return envoys(stalledExtProc(t))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			open, closed := tt.broken(t, s, func(addr string) (stack.Envoy, stack.Envoy) {
				o, err := s.StartEnvoy(ctx, "edge-us", addr)
				if err != nil {
					t.Fatal(err)
				}
				c, err := s.StartEnvoy(ctx, "edge-eu", addr)
				if err != nil {
					t.Fatal(err)
				}
				return o, c
			})
			for range 3 {
				resp, body := chat(t, open.URL, "qwen-7b", nil)
				served := servedBy(resp, body)
				if resp.StatusCode != http.StatusOK || (served != "us-east-vllm" && served != "eu-west-vllm") {
					t.Errorf("fail-open: %d from %q: %s; want 200 from a cluster serving every model", resp.StatusCode, served, body)
				}
			}
			resp, body := chat(t, closed.URL, "llama3-8b", nil)
			var e apiError
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("fail-closed body %q is not JSON: %v", body, err)
			}
			if resp.StatusCode != http.StatusServiceUnavailable || e.Error.Code != "routing_unavailable" ||
				!strings.Contains(e.Error.Message, `source "edge-eu" is fail-closed`) || resp.Header.Get("x-ilb-reason") != "routing_unavailable" {
				t.Errorf("fail-closed: %d %+v reason %q; want 503 routing_unavailable", resp.StatusCode, e.Error, resp.Header.Get("x-ilb-reason"))
			}
			if st := open.Sim.Stats().ExtProc; st.StreamsFailed+st.MessageTimeouts == 0 || st.FailureModeAllowed == 0 {
				t.Errorf("envoysim saw no ext_proc failure: %+v", st)
			}
		})
	}
}

// TestForgedRouteHeadersWithExtProcDown sends ILB's internal routing
// headers from a client while ext_proc is down, the one case where only
// Envoy's early header mutation stands between the client and a route of
// its choosing. The forgery names a cluster that does not serve the model,
// a model route and a draw that would pin one cluster: none may take
// effect, so the fallback route serves, spread over its clusters.
func TestForgedRouteHeadersWithExtProcDown(t *testing.T) {
	s := startStack(t, nil)
	e, err := s.StartEnvoy(context.Background(), "edge-us", deadAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	forged := map[string]string{
		"x-ilb-route-cluster": "us-west-sglang", // serves llama only
		"x-ilb-route-model":   "qwen2.5-7b-instruct",
		"x-ilb-route-draw":    "0", // would always pick the first cluster
	}
	served := map[string]int{}
	for range 40 {
		resp, body := chat(t, e.URL, "qwen-7b", forged)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		served[servedBy(resp, body)]++
	}
	if served["us-west-sglang"] > 0 || served["us-east-vllm"] == 0 || served["eu-west-vllm"] == 0 {
		t.Errorf("served %v; want the fallback's random spread over us-east-vllm and eu-west-vllm", served)
	}
}

// ownExtProc runs a second ext_proc service on the stack's weights, and
// returns its address and a function that stops it.
func ownExtProc(t *testing.T, s *stack.Stack) (string, func()) {
	t.Helper()
	srv, err := extproc.New(extproc.Options{Config: s.Config})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Publish(context.Background(), s.App.Controller.Current()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	return ln.Addr().String(), stop
}

// stalledProcessor accepts ext_proc streams and never answers, as a hung
// service would.
type stalledProcessor struct {
	extprocv3.UnimplementedExternalProcessorServer
}

var _ extprocv3.ExternalProcessorServer = (*stalledProcessor)(nil)

func (stalledProcessor) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	<-stream.Context().Done()
	return nil
}

func stalledExtProc(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(g, stalledProcessor{})
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
