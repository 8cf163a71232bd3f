package envoysim

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
)

// TestRouteIdleTimeout: with ILB's route (timeout 0s disables the route
// timeout, idle_timeout set), a stream without bytes in either direction for
// idle_timeout gets ActiveStream::onIdleTimeout: before response headers a
// "stream timeout" local reply, 504 when the request was fully received and
// 408 when it was not; after them a stream reset. Streaming bytes keep the
// stream alive past idle_timeout.
func TestRouteIdleTimeout(t *testing.T) {
	h := newHarness(t, nil)
	h.upstream("a", func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		pause := func(d time.Duration) bool {
			select {
			case <-time.After(d):
				return true
			case <-ctx.Done():
				return false
			}
		}
		switch r.URL.Path {
		case "/stall":
			pause(5 * time.Second)
		case "/stall-after-headers":
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "first")
			w.(http.Flusher).Flush()
			pause(5 * time.Second)
		case "/slow-stream":
			for range 4 { // 4 × 80 ms > the 200 ms idle timeout, but never idle for 200 ms
				_, _ = io.WriteString(w, "tick ")
				w.(http.Flusher).Flush()
				if !pause(80 * time.Millisecond) {
					return
				}
			}
		case "/read-body":
			_, _ = io.ReadAll(r.Body)
		}
	})
	r := ilbRoute("a")
	r.GetRoute().IdleTimeout = durationpb.New(200 * time.Millisecond)
	h.push(append(h.clusters(), httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"}, r)))...)
	h.start(nil)

	for _, c := range []struct {
		path, body string
		status     int
		wantErr    bool
	}{
		{path: "/stall", status: 504, body: "stream timeout"},
		{path: "/stall-after-headers", status: 200, body: "first", wantErr: true},
		{path: "/slow-stream", status: 200, body: "tick tick tick tick "},
	} {
		t.Run(c.path, func(t *testing.T) {
			resp, err := doErr("GET", h.url("main", c.path), "")
			if resp.status != c.status || resp.body != c.body || (err != nil) != c.wantErr {
				t.Errorf("got %d %q err %v, want %d %q (error %v)", resp.status, resp.body, err, c.status, c.body, c.wantErr)
			}
		})
	}
	t.Run("incomplete request body", func(t *testing.T) {
		addr, _ := h.env.ListenerAddr("main")
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, _ = io.WriteString(conn, "POST /read-body HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello")
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 408") {
			t.Errorf("status line %q, %v: want 408 for an incomplete request", line, err)
		}
	})
	if n := h.env.Stats().StreamIdleTimeouts; n != 3 {
		t.Errorf("StreamIdleTimeouts = %d, want 3", n)
	}
}
