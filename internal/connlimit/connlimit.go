package connlimit

import (
	"net"
	"sync"
	"time"
)

// Limits of a Group.
type Limits struct {
	// Max is the most connections the group's listeners hold at once
	// (> 0).
	Max int
	// PerPeer is the most from one IP address (> 0).
	PerPeer int
	// OnRefuse, if set, is called (without the group's lock) for every
	// connection closed by the limits: "peer" (its peer held PerPeer),
	// "full" (Max reached, nothing idle to shed), "shed" (an idle
	// connection closed to make room).
	OnRefuse func(reason string)
	// Now is the clock of idleness; nil: time.Now.
	Now func() time.Time
}

// Group counts the connections of the listeners it wraps.
type Group struct {
	lim    Limits
	mu     sync.Mutex
	conns  map[*conn]struct{}
	byPeer map[string]int
	byAddr map[string]*conn // remote address -> connection, for Stats
}

// New returns a group with lim.
func New(lim Limits) *Group {
	if lim.Now == nil {
		lim.Now = time.Now
	}
	return &Group{lim: lim, conns: map[*conn]struct{}{}, byPeer: map[string]int{}, byAddr: map[string]*conn{}}
}

// Wrap returns ln counting its connections in g.
func (g *Group) Wrap(ln net.Listener) net.Listener { return &listener{Listener: ln, g: g} }

// Open is how many connections the group holds.
func (g *Group) Open() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.conns)
}

type listener struct {
	net.Listener
	g *Group
}

// Accept returns the next connection the limits admit; refused ones are
// closed here.
func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err //nolint:wrapcheck // the listener's error, as net/http and grpc expect it
		}
		if tc := l.g.admit(c); tc != nil {
			return tc, nil
		}
	}
}

// admit counts c, or closes it (and reports why).
func (g *Group) admit(c net.Conn) *conn {
	peer := hostOf(c.RemoteAddr())
	now := g.lim.Now()
	var shed *conn
	var refused string
	g.mu.Lock()
	switch {
	case g.byPeer[peer] >= g.lim.PerPeer:
		refused = "peer"
	case len(g.conns) >= g.lim.Max:
		shed = g.idlest()
		if shed == nil {
			refused = "full"
		} else {
			g.remove(shed) // counted out now: its Close below does not count twice
		}
	}
	var tc *conn
	if refused == "" {
		tc = &conn{Conn: c, g: g, peer: peer, addr: c.RemoteAddr().String(), since: now}
		g.conns[tc] = struct{}{}
		g.byPeer[peer]++
		g.byAddr[tc.addr] = tc
	}
	g.mu.Unlock()
	if shed != nil {
		g.report("shed") // before the close its peer sees
		_ = shed.Conn.Close()
	}
	if refused != "" {
		g.report(refused)
		_ = c.Close()
	}
	return tc
}

// idlest is the connection without streams idle longest, or nil. Called
// under mu. O(connections), only at the cap.
func (g *Group) idlest() *conn {
	var best *conn
	for c := range g.conns {
		if c.streams > 0 {
			continue
		}
		if best == nil || c.since.Before(best.since) {
			best = c
		}
	}
	return best
}

// remove uncounts c. Called under mu; idempotent.
func (g *Group) remove(c *conn) {
	if _, ok := g.conns[c]; !ok {
		return
	}
	delete(g.conns, c)
	if g.byPeer[c.peer]--; g.byPeer[c.peer] <= 0 {
		delete(g.byPeer, c.peer)
	}
	if g.byAddr[c.addr] == c {
		delete(g.byAddr, c.addr)
	}
}

func (g *Group) report(reason string) {
	if g.lim.OnRefuse != nil {
		g.lim.OnRefuse(reason)
	}
}

// conn is a counted connection. streams and since are guarded by the
// group's lock.
type conn struct {
	net.Conn
	g       *Group
	peer    string
	addr    string
	streams int       // gRPC streams open on it (Stats)
	since   time.Time // when it was accepted or its last stream ended
	once    sync.Once
}

// Close uncounts the connection and closes it.
func (c *conn) Close() error {
	c.once.Do(func() {
		c.g.mu.Lock()
		c.g.remove(c)
		c.g.mu.Unlock()
	})
	return c.Conn.Close() //nolint:wrapcheck // the connection's own error
}

// hostOf is the IP address of addr ("" when it has none).
func hostOf(addr net.Addr) string {
	if addr == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return host
}

// SetActive marks the connection from remote address addr as carrying a
// request (true) or idle (false): for HTTP servers, from
// http.Server.ConnState (see ConnState).
func (g *Group) SetActive(addr string, active bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.byAddr[addr]; c != nil {
		if active {
			c.streams = 1
		} else {
			c.streams = 0
			c.since = g.lim.Now()
		}
	}
}
