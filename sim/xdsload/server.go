package xdsload

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
	"github.com/ilbproject/ilb/xds"
)

// Reply is what the server role answers to each command, one JSON
// object per line.
type Reply struct {
	Error string `json:"error,omitempty"`
	// Addr is the xDS listener's address (the first reply).
	Addr string `json:"addr,omitempty"`
	// Versions is, per source, the version of the type the command
	// changed (publish: routes; endpoints: endpoints).
	Versions map[string]string `json:"versions,omitempty"`
	// Stats.
	CPUNanos   int64  `json:"cpu_ns,omitempty"`
	HeapInuse  uint64 `json:"heap_inuse,omitempty"`
	RSS        uint64 `json:"rss,omitempty"`
	Goroutines int    `json:"goroutines,omitempty"`
	Nodes      int    `json:"nodes,omitempty"`
	Connected  int    `json:"connected,omitempty"`
}

// Serve is the server role of the xDS benchmark: ILB's xDS server (the
// product's xds.Server, nothing else) for cfg on 127.0.0.1, driven by one
// command per line of in, each answered by one Reply line on out:
//
//	publish    a new weights version (routes change); Versions: routes
//	endpoints  one replica's weight changes (EDS only); Versions: endpoints
//	gc         two garbage collections, memory returned to the OS, then stats
//	heap FILE  a garbage collection, then the heap profile written to FILE
//	stats      CPU time of this process so far, heap in use, RSS, goroutines,
//	           nodes ILB knows and how many are connected
//
// It stops when in ends or ctx is done. Logs go to logw (warnings only).
func Serve(ctx context.Context, cfg *config.Config, in io.Reader, out io.Writer, logw io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Every endpoint change is pushed at once: the benchmark times a push,
	// not envoy.eds_min_interval's batching.
	cfg.Envoy.EDSMinInterval = 0
	reg := prometheus.NewRegistry()
	srv, err := xds.New(ctx, xds.Options{
		Config: cfg, Registry: reg,
		Logger: slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("xdsload: listen: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	gen, err := newVersions(cfg)
	if err != nil {
		return err
	}
	eps := xds.StaticEndpoints(cfg)
	if err := srv.SetEndpoints(ctx, eps); err != nil {
		return err
	}
	if err := publish(ctx, srv, gen); err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	if err := enc.Encode(Reply{Addr: ln.Addr().String()}); err != nil {
		return err
	}
	lines := bufio.NewScanner(in)
	bump := 0
	for lines.Scan() {
		var r Reply
		cmd := strings.TrimSpace(lines.Text())
		if path, ok := strings.CutPrefix(cmd, "heap "); ok {
			r = heapProfile(path)
			if err := enc.Encode(r); err != nil {
				return err
			}
			continue
		}
		switch cmd {
		case "publish":
			if err := publish(ctx, srv, gen); err != nil {
				r.Error = err.Error()
				break
			}
			r.Versions = versionsOf(srv, cfg, resource.RouteType)
		case "endpoints":
			bump++
			eps = bumped(eps, bump)
			if err := srv.SetEndpoints(ctx, eps); err != nil {
				r.Error = err.Error()
				break
			}
			r.Versions = versionsOf(srv, cfg, resource.EndpointType)
		case "gc", "stats":
			if cmd == "gc" {
				// Twice: what sync.Pools keep survives one collection.
				runtime.GC()
				debug.FreeOSMemory()
			}
			r = stats(srv)
		default:
			r.Error = fmt.Sprintf("unknown command %q: want publish, endpoints, gc or stats", cmd)
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	cancel()
	return errors.Join(lines.Err(), <-done)
}

func versionsOf(srv *xds.Server, cfg *config.Config, typ string) map[string]string {
	out := map[string]string{}
	for _, src := range cfg.Sources {
		if snap, err := srv.Snapshot(src.Name); err == nil {
			out[src.Name] = snap.GetVersion(typ)
		}
	}
	return out
}

func stats(srv *xds.Server) Reply {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r := Reply{
		CPUNanos:  ru.Utime.Nano() + ru.Stime.Nano(),
		HeapInuse: ms.HeapInuse, RSS: rss(), Goroutines: runtime.NumGoroutine(),
	}
	r.Nodes, r.Connected = srv.NodeCounts()
	return r
}

// rss is this process's resident set in bytes (Linux), 0 if unknown.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, _ := strconv.ParseUint(f[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}

// bumped changes the weight of the first endpoint of the first cluster
// with endpoints: an EDS-only change, as a warming replica makes.
func bumped(eps xds.Endpoints, n int) xds.Endpoints {
	out := xds.Endpoints{}
	first := ""
	for name, list := range eps {
		out[name] = append([]xds.Endpoint(nil), list...)
		if len(list) > 0 && (first == "" || name < first) {
			first = name
		}
	}
	if first != "" {
		out[first][0].Weight = uint32(1 + n%xds.MaxWeight)
	}
	return out
}

// versionGen makes a new routing version on each call: proportional
// weights with a share that moves between the first two targets of every
// cell that has two.
type versionGen struct {
	base []weights.Cell
	n    int
}

func newVersions(cfg *config.Config) (*versionGen, error) {
	w, err := weights.Proportional{}.Compute(weights.Input{Config: cfg, Clusters: weights.StaticState(cfg)})
	if err != nil {
		return nil, fmt.Errorf("xdsload: proportional weights: %w", err)
	}
	return &versionGen{base: w.Cells()}, nil
}

func publish(ctx context.Context, srv *xds.Server, g *versionGen) error {
	w, err := g.next()
	if err != nil {
		return err
	}
	return srv.Publish(ctx, w)
}

func (g *versionGen) next() (*weights.Weights, error) {
	g.n++
	cells := make([]weights.Cell, len(g.base))
	for i, c := range g.base {
		c.Targets = append([]weights.Target(nil), c.Targets...)
		c.Explanation = nil
		if len(c.Targets) >= 2 {
			move := uint32(g.n % 997)
			move = min(move, c.Targets[0].Weight-1)
			c.Targets[0].Weight -= move
			c.Targets[1].Weight += move
		}
		cells[i] = c
	}
	w, err := weights.New("bench", time.Now(), cells)
	if err != nil {
		return nil, fmt.Errorf("xdsload: weights: %w", err)
	}
	return w, nil
}

func heapProfile(path string) Reply {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return Reply{Error: err.Error()}
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		return Reply{Error: err.Error()}
	}
	return Reply{}
}
