package xdsload

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// Server is a running server role in a child process (see Serve): the
// CPU and memory it reports are ILB's alone, not the load generator's.
type Server struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *json.Decoder
	Addr  string
	warns atomic.Int64 // warning lines it logged
	// LastWarn is the last warning line it logged.
	lastWarn atomic.Value
}

// StartServer starts cmd (which must run Serve on its stdin and stdout)
// and waits for its address.
func StartServer(cmd *exec.Cmd) (*Server, error) {
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	errs, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("xdsload: start the server: %w", err)
	}
	s := &Server{cmd: cmd, in: in, out: json.NewDecoder(out)}
	go func() {
		lines := bufio.NewScanner(errs)
		lines.Buffer(make([]byte, 64<<10), 1<<20)
		for lines.Scan() {
			s.warns.Add(1)
			s.lastWarn.Store(lines.Text())
		}
	}()
	var r Reply
	if err := s.out.Decode(&r); err != nil {
		s.Stop()
		return nil, fmt.Errorf("xdsload: the server did not start: %w", err)
	}
	if r.Error != "" || r.Addr == "" {
		s.Stop()
		return nil, fmt.Errorf("xdsload: the server did not start: %s", r.Error)
	}
	s.Addr = r.Addr
	return s, nil
}

// Do sends one command and reads its reply.
func (s *Server) Do(cmd string) (Reply, error) {
	if _, err := io.WriteString(s.in, cmd+"\n"); err != nil {
		return Reply{}, fmt.Errorf("xdsload: %s: %w", cmd, err)
	}
	var r Reply
	if err := s.out.Decode(&r); err != nil {
		return Reply{}, fmt.Errorf("xdsload: %s: %w", cmd, err)
	}
	if r.Error != "" {
		return r, fmt.Errorf("xdsload: %s: %s", cmd, r.Error)
	}
	return r, nil
}

// Warnings is how many warning lines the server logged, and the last.
func (s *Server) Warnings() (int64, string) {
	last, _ := s.lastWarn.Load().(string)
	return s.warns.Load(), last
}

// Stop ends the server.
func (s *Server) Stop() {
	s.in.Close()
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// Result is one run of the benchmark: N Envoys of one mode.
type Result struct {
	Mode    Mode
	Streams int
	// Connect is from the first dial until the last Envoy held all four
	// types.
	Connect time.Duration
	// Publish and EDS are, per change, from the command until the last
	// Envoy acknowledged the new version (routes; endpoints).
	Publish, EDS []time.Duration
	// CPU is ILB's CPU time: to serve every Envoy its configuration at
	// connect, and per weights version / EDS change (mean).
	CPUConnect, CPUPublish, CPUEDS time.Duration
	// HeapPerEnvoy and RSSPerEnvoy are what the connected Envoys added
	// to ILB's heap in use and resident set (after a GC), per Envoy.
	HeapPerEnvoy, RSSPerEnvoy float64
	// Warnings is how many lines ILB logged at WARN or above.
	Warnings int64
	LastWarn string
}

// RunOptions of one benchmark run.
type RunOptions struct {
	Streams int
	Mode    Mode
	Sources []string
	// Changes is how many weights versions, and EDS changes, are timed.
	Changes int
	// Timeout bounds each wait.
	Timeout time.Duration
	// HeapProfile, when set, is where the server writes its heap profile
	// once every Envoy has its configuration.
	HeapProfile string
}

// Run measures one fleet against a fresh server.
func Run(ctx context.Context, spawn func() *exec.Cmd, o RunOptions) (Result, error) {
	res := Result{Mode: o.Mode, Streams: o.Streams}
	srv, err := StartServer(spawn())
	if err != nil {
		return res, err
	}
	defer srv.Stop()
	before, err := srv.Do("gc")
	if err != nil {
		return res, err
	}
	fleet, err := StartFleet(ctx, FleetOptions{Addr: srv.Addr, Streams: o.Streams, Sources: o.Sources, Mode: o.Mode, IDPrefix: "envoy"})
	if err != nil {
		return res, err
	}
	defer fleet.Close()
	wctx, cancel := context.WithTimeout(ctx, o.Timeout)
	last, err := fleet.WaitFull(wctx)
	cancel()
	if err != nil {
		return res, fmt.Errorf("connect: %w", err)
	}
	res.Connect = last.Sub(fleet.Started)
	after, err := srv.Do("gc")
	if err != nil {
		return res, err
	}
	if o.HeapProfile != "" {
		if _, err := srv.Do("heap " + o.HeapProfile); err != nil {
			return res, err
		}
	}
	res.CPUConnect = time.Duration(after.CPUNanos - before.CPUNanos)
	res.HeapPerEnvoy = (float64(after.HeapInuse) - float64(before.HeapInuse)) / float64(o.Streams)
	res.RSSPerEnvoy = (float64(after.RSS) - float64(before.RSS)) / float64(o.Streams)
	for _, kind := range []struct {
		cmd, typ string
		out      *[]time.Duration
		cpu      *time.Duration
	}{{"publish", resource.RouteType, &res.Publish, &res.CPUPublish}, {"endpoints", resource.EndpointType, &res.EDS, &res.CPUEDS}} {
		start, err := srv.Do("stats")
		if err != nil {
			return res, err
		}
		for range o.Changes {
			t0 := time.Now()
			r, err := srv.Do(kind.cmd)
			if err != nil {
				return res, err
			}
			wctx, cancel := context.WithTimeout(ctx, o.Timeout)
			last, err := fleet.WaitVersion(wctx, kind.typ, r.Versions)
			cancel()
			if err != nil {
				return res, fmt.Errorf("%s: %w", kind.cmd, err)
			}
			*kind.out = append(*kind.out, last.Sub(t0))
		}
		end, err := srv.Do("stats")
		if err != nil {
			return res, err
		}
		*kind.cpu = time.Duration((end.CPUNanos - start.CPUNanos) / int64(max(o.Changes, 1)))
	}
	res.Warnings, res.LastWarn = srv.Warnings()
	return res, fleet.Err()
}

// Wave is the server's state after one wave of new Envoys left.
type Wave struct {
	Wave, Nodes, Connected int
	HeapInuse, RSS         uint64
}

// RunWaves connects waves of Envoys with new node ids one after another,
// each leaving before the next comes, and reports what the server keeps
// after each.
func RunWaves(ctx context.Context, spawn func() *exec.Cmd, o RunOptions, waves int, report func(Wave)) error {
	srv, err := StartServer(spawn())
	if err != nil {
		return err
	}
	defer srv.Stop()
	for w := 1; w <= waves; w++ {
		fleet, err := StartFleet(ctx, FleetOptions{Addr: srv.Addr, Streams: o.Streams, Sources: o.Sources, Mode: o.Mode, IDPrefix: fmt.Sprintf("wave%d", w)})
		if err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, o.Timeout)
		_, err = fleet.WaitFull(wctx)
		cancel()
		fleet.Close()
		if err != nil {
			return fmt.Errorf("wave %d: %w", w, err)
		}
		// The server sees the streams close asynchronously: wait until it
		// counts none connected.
		var r Reply
		for {
			if r, err = srv.Do("gc"); err != nil {
				return err
			}
			if r.Connected == 0 || ctx.Err() != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		report(Wave{Wave: w, Nodes: r.Nodes, Connected: r.Connected, HeapInuse: r.HeapInuse, RSS: r.RSS})
	}
	return nil
}

// ParseCounts reads "100,1000,10000".
func ParseCounts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%d", &n); err != nil || n < 1 {
			return nil, fmt.Errorf("stream count %q: want a positive integer", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no stream count")
	}
	return out, nil
}
