package test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/sim/loadgen"
	"github.com/ilbproject/ilb/sim/stack"
)

// TestConnectionFlood: peers on 30 addresses (127.0.0.2–31) open 1,800
// connections to the ext_proc port and 1,800 to the xDS port and send
// nothing (no TLS ClientHello, no HTTP/2 preface), while ordinary traffic
// flows through the edge-us Envoy. With listen.connections (ext_proc 300,
// xDS 100, 40 per peer): each peer keeps at most 40, the ports at most
// their limits (idle ones shed for new ones, the rest closed), so the
// process's file descriptors are never exhausted; admin /healthz answers,
// a new xDS client is served, a new ext_proc client is served, and every
// ordinary request is routed (issue 24: 20,000 idle connections took the
// open-file limit and every port with it).
func TestConnectionFlood(t *testing.T) {
	s := startWorld(t, nil, func(c *config.Config) {
		c.Controller.Policy = config.PolicyProportional
		c.Listen.Connections = config.Connections{ExtProc: 300, XDS: 100, Admin: 50, PerPeer: 40, HandshakeTimeout: config.Duration(time.Minute)}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var flood sync.WaitGroup
	var mu sync.Mutex
	var held []net.Conn
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	}()
	for _, port := range []string{s.App.ExtProcAddr(), s.App.XDSAddr()} {
		for ip := 2; ip <= 31; ip++ {
			flood.Go(func() {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(ip))}}
				for range 60 {
					c, err := d.DialContext(ctx, "tcp", port)
					if err != nil {
						return
					}
					mu.Lock()
					held = append(held, c)
					mu.Unlock()
				}
			})
		}
	}
	results, err := loadgen.Run(context.Background(), loadgen.Options{
		Targets: []loadgen.Target{{Source: "edge-us", URL: envoyURL(t, s, "edge-us")}}, Models: []string{"llama-3.1-8b-instruct"},
		Concurrency: 4, MaxTokens: 4, Requests: 200, Seed: 4,
	})
	flood.Wait()
	if err != nil {
		t.Fatal(err)
	}
	ok := 0
	for _, r := range results {
		if r.Err == nil && r.Status == http.StatusOK {
			ok++
		}
	}
	if ok*100 < len(results)*95 {
		t.Errorf("%d of %d ordinary requests served during the flood; want at least 95%%", ok, len(results))
	}
	if n := promValue(t, s, `ilb_connections_open{port="extproc"}`); n > 300 {
		t.Errorf("%v ext_proc connections open; want at most 300", n)
	}
	if n := promValue(t, s, `ilb_connections_open{port="xds"}`); n > 100 {
		t.Errorf("%v xDS connections open; want at most 100", n)
	}
	checkLateClients(t, s)
	t.Logf("%d of %d requests served; %s", ok, len(results), closedByLimits(t, s))
}

// checkLateClients checks that, during a flood, admin /healthz answers, a
// new xDS client is served and a new ext_proc client is served.
func checkLateClients(t *testing.T, s *stack.Stack) {
	t.Helper()
	if resp, _ := do(t, http.MethodGet, "http://"+s.App.AdminAddr()+"/healthz", "", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("admin /healthz: %d", resp.StatusCode)
	}
	conn, err := grpc.NewClient(s.App.XDSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := subscribe(conn, "late-envoy", "edge-us"); err != nil {
		t.Errorf("a new xDS client during the flood: %v", err)
	}
	ec, err := grpc.NewClient(s.App.ExtProcAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	sctx, scancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), header.Source, "edge-us"), 30*time.Second)
	defer scancel()
	st, err := extprocv3.NewExternalProcessorClient(ec).Process(sctx)
	if err == nil {
		err = st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: headerMap(":method", "GET", ":path", "/v1/models", ":authority", "late"), EndOfStream: true,
		}}})
	}
	if err == nil {
		_, err = st.Recv()
	}
	if err != nil {
		t.Errorf("a new ext_proc client during the flood: %v", err)
	}
}

// closedByLimits says how many connections each port's limits closed,
// by reason.
func closedByLimits(t *testing.T, s *stack.Stack) string {
	t.Helper()
	var parts []string
	for _, port := range []string{"extproc", "xds"} {
		parts = append(parts, fmt.Sprintf("%s: peer %v full %v shed %v", port,
			promValue(t, s, `ilb_connections_refused_total{port="`+port+`",reason="peer"}`),
			promValue(t, s, `ilb_connections_refused_total{port="`+port+`",reason="full"}`),
			promValue(t, s, `ilb_connections_refused_total{port="`+port+`",reason="shed"}`)))
	}
	return "connections closed by the limits: " + strings.Join(parts, "; ")
}
