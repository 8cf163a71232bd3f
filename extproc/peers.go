package extproc

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc/peer"
)

// peerStreams counts the open streams of each peer, so that one peer
// cannot hold every stream extproc.max_streams allows: a stream past
// extproc.max_streams_per_peer for its peer is refused. A peer is what
// Options.PeerOf names (ILB: the verified identity and IP address, or the
// IP address); entries go when their last stream ends, so the map holds
// at most max_streams entries. Safe for concurrent use.
type peerStreams struct {
	mu    sync.Mutex
	limit int
	open  map[string]int
}

func newPeerStreams(limit int) *peerStreams {
	return &peerStreams{limit: limit, open: map[string]int{}}
}

// hold counts a new stream of p, unless p holds limit already: then it
// returns false and how many p holds.
func (ps *peerStreams) hold(p string) (bool, int) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	n := ps.open[p]
	if n >= ps.limit {
		return false, n
	}
	ps.open[p] = n + 1
	return true, n + 1
}

// release ends a stream of p counted by hold.
func (ps *peerStreams) release(p string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.open[p]--; ps.open[p] <= 0 {
		delete(ps.open, p)
	}
}

// peerAddr is the default Options.PeerOf: the IP address of the stream's
// peer ("" when unknown).
func peerAddr(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	if a, ok := p.Addr.(*net.TCPAddr); ok && a != nil {
		// The host part of a.String() without building host:port first.
		host := ""
		if len(a.IP) > 0 {
			host = a.IP.String()
		}
		if a.Zone != "" {
			host += "%" + a.Zone
		}
		return host
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		return p.Addr.String()
	}
	return host
}
