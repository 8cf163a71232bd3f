package stack

import (
	"context"
	"io"
	"net"
	"sync"
)

// cutProxy forwards TCP connections from its own loopback address to a
// backend until cut: then it resets every connection it carries (linger
// 0: the peer sees a reset, as when a process is killed) and refuses new
// ones. Envoys reach an ILB replica through two of them (xDS, ext_proc),
// so the stack can crash a replica in the eyes of its Envoys.
type cutProxy struct {
	ln      net.Listener
	backend string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	cut   bool
	wg    sync.WaitGroup
}

func newCutProxy(ctx context.Context, backend string) (*cutProxy, error) {
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &cutProxy{ln: ln, backend: backend, conns: map[net.Conn]struct{}{}}
	p.wg.Go(func() { p.accept(ctx) })
	context.AfterFunc(ctx, p.reset)
	return p, nil
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept(ctx context.Context) {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // cut, or the stack stopped
		}
		up, err := new(net.Dialer).DialContext(ctx, "tcp", p.backend)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, up) {
			return
		}
		p.wg.Go(func() {
			var both sync.WaitGroup
			both.Go(func() { pipe(c, up) })
			both.Go(func() { pipe(up, c) })
			both.Wait()
			_, _ = c.Close(), up.Close()
			p.mu.Lock()
			delete(p.conns, c)
			delete(p.conns, up)
			p.mu.Unlock()
		})
	}
}

// track registers a connection pair, false when the proxy is cut.
func (p *cutProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// pipe copies src to dst; at src's end it half-closes dst, and on an
// error closes both (the pair's owner forgets them once both ends are
// done).
func pipe(dst, src net.Conn) {
	if _, err := io.Copy(dst, src); err == nil {
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
			return
		}
	}
	_, _ = dst.Close(), src.Close()
}

// reset cuts the proxy: the listener closes and every connection is reset.
func (p *cutProxy) reset() {
	p.mu.Lock()
	p.cut = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	_ = p.ln.Close()
	for c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}
