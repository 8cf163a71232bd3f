package connlimit

import (
	"context"

	"google.golang.org/grpc/stats"
)

// Stats is a grpc stats handler (grpc.StatsHandler) that tells the group
// which of its connections carry streams: a connection with an open
// stream is never shed for a new one.
func (g *Group) Stats() stats.Handler { return statsHandler{g: g} }

type statsHandler struct{ g *Group }

var _ stats.Handler = statsHandler{}

type connKey struct{}

// TagConn keeps the connection's remote address in its context.
func (h statsHandler) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	if info.RemoteAddr == nil {
		return ctx
	}
	return context.WithValue(ctx, connKey{}, info.RemoteAddr.String())
}

func (statsHandler) HandleConn(context.Context, stats.ConnStats) {}

func (statsHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

// HandleRPC counts a stream on its connection at its start and end.
func (h statsHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	var d int
	switch s.(type) {
	case *stats.Begin:
		d = 1
	case *stats.End:
		d = -1
	default:
		return
	}
	addr, _ := ctx.Value(connKey{}).(string)
	g := h.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.byAddr[addr]; c != nil {
		c.streams += d
		if c.streams <= 0 {
			c.streams = 0
			c.since = g.lim.Now()
		}
	}
}
