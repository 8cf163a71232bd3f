package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// sseServer answers every chat completion with a stream: a first event at
// once, then the rest once hold returns.
func sseServer(t *testing.T, hold func(r *http.Request)) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = fmt.Fprint(w, "data: {\"system_fingerprint\":\"c/0\"}\n\n")
		w.(http.Flusher).Flush()
		hold(r)
		_, _ = fmt.Fprint(w, "data: {}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(s.Close)
	return s
}

func TestOpenLoop(t *testing.T) {
	for _, tc := range []struct {
		name string
		// maxInFlight and requests shape the run; hold is what the server
		// does between the first event and the rest, until release closes
		// once every arrival was handled.
		maxInFlight, requests int
		hold                  func(r *http.Request, release <-chan struct{})
		cutRun                bool // end the run once a first event is sent
		// want: results answered, dropped, cut by the end of the run.
		answered, dropped, cut int
	}{
		{
			name: "every arrival answered, first token timed", maxInFlight: 64, requests: 20,
			hold:     func(*http.Request, <-chan struct{}) {},
			answered: 20,
		},
		{
			name: "arrivals past the bound are dropped, not queued", maxInFlight: 1, requests: 3,
			// The one request in flight is held until every arrival was
			// handled: the other two find no slot.
			hold:     func(_ *http.Request, release <-chan struct{}) { <-release },
			answered: 1, dropped: 2,
		},
		{
			name: "a request the end of the run cuts is returned with its error", maxInFlight: 4, requests: 1,
			hold:   func(r *http.Request, _ <-chan struct{}) { <-r.Context().Done() },
			cutRun: true,
			cut:    1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			srv := sseServer(t, func(r *http.Request) { tc.hold(r, release) })
			client := srv.Client()
			if tc.cutRun { // the client's first token came: end the run
				client.Transport = cutAfterFirstRead{next: client.Transport, cut: cancel}
			}
			var handled atomic.Int64
			var once sync.Once
			o := Options{
				Targets: []Target{{Source: "s", URL: srv.URL}}, Models: []string{"m"}, StreamShare: 1,
				Rate: 1e5, MaxInFlight: tc.maxInFlight, Requests: tc.requests, Seed: 1, Client: client,
				handled: func(bool) {
					n := int(handled.Add(1))
					if n == tc.requests {
						once.Do(func() { close(release) })
					}
				},
			}
			results, err := Run(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			var answered, dropped, cut int
			for _, r := range results {
				switch {
				case errors.Is(r.Err, ErrOverflow):
					dropped++
				case r.Err != nil:
					cut++
					if r.TTFT <= 0 || r.Events != 1 {
						t.Errorf("cut request: TTFT %v after %d events; want its first token timed", r.TTFT, r.Events)
					}
				default:
					answered++
					if r.Status != http.StatusOK || r.Events != 3 || r.TTFT <= 0 || r.TTFT > r.Latency || r.Replica != "c/0" {
						t.Errorf("answered request: %+v; want 200, 3 events, 0 < TTFT <= latency, replica c/0", r)
					}
				}
			}
			if answered != tc.answered || dropped != tc.dropped || cut != tc.cut {
				t.Errorf("answered %d, dropped %d, cut %d; want %d, %d, %d", answered, dropped, cut, tc.answered, tc.dropped, tc.cut)
			}
		})
	}
}

// cutAfterFirstRead is a client transport that calls cut once a
// response's body gave its first bytes: the run ends after the client
// read its first event.
type cutAfterFirstRead struct {
	next http.RoundTripper
	cut  func()
}

func (c cutAfterFirstRead) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil {
		resp.Body = &cutBody{ReadCloser: resp.Body, cut: c.cut}
	}
	return resp, err
}

type cutBody struct {
	io.ReadCloser
	cut func()
}

func (b *cutBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.cut()
	}
	return n, err
}
