package test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/sim/loadgen"
)

// floodChildEnv makes this test binary a flooding child
// (TestFloodChild): the address to flood and how many connections.
const floodChildEnv = "ILB_FLOOD_CHILD"

// TestConnectionFloodAtScale (make soak-connections, ILB_SOAK=1) is the
// issue's attack at its own scale: 20,000 connections that never send a
// byte (no HTTP/2 preface: to gRPC, a handshake that never comes), from
// 253 loopback addresses, held by two child processes (each process's
// open-file limit is 20,000, this one's too), 10,000 on the ext_proc port
// and 10,000 on the xDS port, against ILB with its default
// listen.connections (derived from the open-file limit). While they are
// open: admin /healthz answers, a new xDS client is served, a new ext_proc
// client is served, and ordinary traffic through the edge-us Envoy keeps
// at least 95 % of the rate it had before the flood. Both rates are
// measured over the same number of requests, so this is a soak, not a
// unit test: it is not part of make test.
func TestConnectionFloodAtScale(t *testing.T) {
	if os.Getenv("ILB_SOAK") == "" {
		t.Skip("a soak: ILB_SOAK=1 (make soak-connections)")
	}
	s := startWorld(t, nil, func(c *config.Config) { c.Controller.Policy = config.PolicyProportional })
	us := envoyURL(t, s, "edge-us")
	rate := func(what string) float64 {
		began := time.Now()
		results, err := loadgen.Run(context.Background(), loadgen.Options{
			Targets: []loadgen.Target{{Source: "edge-us", URL: us}}, Models: []string{"llama-3.1-8b-instruct"},
			Concurrency: 4, MaxTokens: 4, Requests: 600, Seed: 4,
		})
		if err != nil {
			t.Fatal(err)
		}
		ok := 0
		for _, r := range results {
			if r.Err == nil && r.Status == http.StatusOK {
				ok++
			}
		}
		r := float64(ok) / time.Since(began).Seconds()
		t.Logf("%s: %d of %d requests served, %.0f/s", what, ok, len(results), r)
		return r
	}
	rate("warm-up")
	before := rate("before the flood")

	for _, port := range []string{s.App.ExtProcAddr(), s.App.XDSAddr()} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFloodChild$", "-test.v")
		cmd.Env = append(os.Environ(), floodChildEnv+"="+port+",10000")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		// The child says how many it holds once it has dialled them all.
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if n, ok := strings.CutPrefix(sc.Text(), "holding "); ok {
				t.Logf("%s: a child dialled %s connections", port, n)
				break
			}
		}
	}
	open := func(port string) float64 { return promValue(t, s, `ilb_connections_open{port="`+port+`"}`) }
	t.Logf("ILB holds ext_proc %v (limit %v), xDS %v (limit %v); %s",
		open("extproc"), promValue(t, s, `ilb_connections_limit{port="extproc"}`), open("xds"), promValue(t, s, `ilb_connections_limit{port="xds"}`), closedByLimits(t, s))
	checkLateClients(t, s)
	during := rate("during the flood")
	t.Logf("routing rate during the flood: %.2f of before", during/before)
	if during < 0.95*before {
		t.Errorf("routing kept %.0f/s of %.0f/s (%.0f %%) with 20,000 idle connections open; want at least 95 %%", during, before, 100*during/before)
	}
}

// TestFloodChild is the flooding child of TestConnectionFloodAtScale: it
// dials ILB_FLOOD_CHILD's count of connections to its address from
// 127.0.0.2–254, sends nothing, prints "holding N" and holds them until
// killed. Without the variable it is skipped.
func TestFloodChild(t *testing.T) {
	spec := os.Getenv(floodChildEnv)
	if spec == "" {
		t.Skip("the child of TestConnectionFloodAtScale")
	}
	addr, count, _ := strings.Cut(spec, ",")
	n, err := strconv.Atoi(count)
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	for i := range n {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%253))}, Timeout: 10 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			continue // refused or reset: ILB's limits at work
		}
		held = append(held, c)
	}
	fmt.Printf("holding %d\n", len(held))
	time.Sleep(time.Hour) // until killed
}
