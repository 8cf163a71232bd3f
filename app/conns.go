package app

import (
	"context"
	"log/slog"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/internal/connlimit"
)

// conns are the connection groups of ILB's ports (config.Connections).
type conns struct {
	extproc, xds, admin *connlimit.Group
}

// fdLimit is the process's open-file limit (Go raises the soft limit to
// the hard one at start); 0 when unknown.
func fdLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 0
	}
	return int(rl.Cur)
}

// newConns builds the groups from c (counts of 0 derived from the
// open-file limit), with their metrics on reg, and logs the limits.
func newConns(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, c config.Connections) *conns {
	f := fdLimit()
	if f == 0 {
		f = 1 << 16
	}
	pick := func(v, share int) int {
		if v > 0 {
			return v
		}
		return max(share, 16)
	}
	ext, xd, adm := pick(c.ExtProc, f*45/100), pick(c.XDS, f*25/100), pick(c.Admin, min(f*5/100, 1024))
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ilb_connections_refused_total",
		Help: "Connections closed by listen.connections, by port and reason: peer (its IP address held per_peer), full (the port's limit reached, nothing idle to shed), shed (an idle connection closed to make room).",
	}, []string{"port", "reason"})
	limit := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ilb_connections_limit",
		Help: "The most connections a port holds (listen.connections, or derived from the open-file limit).",
	}, []string{"port"})
	reg.MustRegister(refused, limit)
	group := func(port string, most int) *connlimit.Group {
		per := c.PerPeer
		if per <= 0 {
			per = max(most/8, 64)
		}
		for _, r := range []string{"peer", "full", "shed"} {
			refused.WithLabelValues(port, r)
		}
		g := connlimit.New(connlimit.Limits{Max: most, PerPeer: min(per, most), OnRefuse: func(r string) { refused.WithLabelValues(port, r).Inc() }})
		limit.WithLabelValues(port).Set(float64(most))
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ilb_connections_open", Help: "Connections open on a port.", ConstLabels: prometheus.Labels{"port": port},
		}, func() float64 { return float64(g.Open()) }))
		log.InfoContext(ctx, "connection limits", "port", port, "max", most, "per_peer", min(per, most))
		return g
	}
	return &conns{extproc: group("extproc", ext), xds: group("xds", xd), admin: group("admin", adm)}
}

// connOptions are the gRPC server options of a port counted by g: its
// stats handler (which connections carry streams) and the handshake
// bound.
func connOptions(g *connlimit.Group, c config.Connections) []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StatsHandler(g.Stats()), grpc.ConnectionTimeout(c.Handshake())}
}
