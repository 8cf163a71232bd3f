package connlimit_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ilbproject/ilb/internal/connlimit"
)

// served runs an accept loop on a wrapped loopback listener and returns
// its address and the connections it accepted (kept open).
func served(t *testing.T, g *connlimit.Group) (string, func() []net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wl := g.Wrap(ln)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := wl.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = wl.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String(), func() []net.Conn {
		mu.Lock()
		defer mu.Unlock()
		return append([]net.Conn(nil), conns...)
	}
}

// dialFrom connects to addr from the loopback address ip.
func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedByServer reports whether the server closed c (a read sees EOF or
// a reset rather than blocking).
func closedByServer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF) || err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestLimits: per peer, then in total; at the total, the connection idle
// longest is shed for a new one, and one marked active never is.
func TestLimits(t *testing.T) {
	var mu sync.Mutex
	reasons := map[string]int{}
	clock := time.Unix(1000, 0)
	g := connlimit.New(connlimit.Limits{
		Max: 4, PerPeer: 2,
		OnRefuse: func(r string) { mu.Lock(); reasons[r]++; mu.Unlock() },
		Now:      func() time.Time { mu.Lock(); defer mu.Unlock(); clock = clock.Add(time.Second); return clock },
	})
	addr, accepted := served(t, g)
	wait := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for g.Open() != n || len(accepted()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("open %d, accepted %d; want %d", g.Open(), len(accepted()), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	a1 := dialFrom(t, "127.0.0.2", addr)
	wait(1)
	dialFrom(t, "127.0.0.2", addr)
	wait(2)
	third := dialFrom(t, "127.0.0.2", addr) // past the peer's 2
	if !closedByServer(third) {
		t.Fatal("a peer's third connection was not closed")
	}
	// Mark the first connection active (it serves a request).
	g.SetActive(accepted()[0].RemoteAddr().String(), true)
	dialFrom(t, "127.0.0.3", addr)
	dialFrom(t, "127.0.0.4", addr)
	wait(4)
	// Full: the idlest (the second, accepted before 127.0.0.3's and
	// 127.0.0.4's) is shed for a new one, never the active first.
	dialFrom(t, "127.0.0.5", addr)
	if !closedByServer(accepted()[1]) {
		t.Error("the idle connection accepted longest ago was not shed")
	}
	if err := a1.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err == nil {
		if _, err := a1.Read(make([]byte, 1)); !isTimeout(err) {
			t.Errorf("the active connection was closed: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if reasons["peer"] != 1 || reasons["shed"] != 1 || reasons["full"] != 0 {
		t.Errorf("refusals %v; want one peer and one shed", reasons)
	}
}

// TestFullWithoutIdle: when every connection is active, a new one is
// closed (reason full).
func TestFullWithoutIdle(t *testing.T) {
	var full int
	var mu sync.Mutex
	g := connlimit.New(connlimit.Limits{Max: 1, PerPeer: 1, OnRefuse: func(r string) {
		mu.Lock()
		defer mu.Unlock()
		if r == "full" {
			full++
		}
	}})
	addr, accepted := served(t, g)
	dialFrom(t, "127.0.0.2", addr)
	deadline := time.Now().Add(10 * time.Second)
	for len(accepted()) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("not accepted")
		}
		time.Sleep(time.Millisecond)
	}
	g.SetActive(accepted()[0].RemoteAddr().String(), true)
	late := dialFrom(t, "127.0.0.3", addr)
	if !closedByServer(late) {
		t.Fatal("a connection past the limit was not closed")
	}
	mu.Lock()
	defer mu.Unlock()
	if full != 1 {
		t.Errorf("full refusals %d; want 1", full)
	}
}
