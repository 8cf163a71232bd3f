package admin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/admin"
	"github.com/ilbproject/ilb/decision"
)

// fill plays the requests every decisions test reads: two served (one
// where Envoy served another cluster), one rejected by ILB.
func fill(t *testing.T, h *harness) {
	t.Helper()
	h.request(t, "edge-us", "r-us", chat("qwen2.5-7b-instruct"), "")
	h.request(t, "edge-eu", "r-eu", chat("llama-3.1-8b-instruct"), "elsewhere")
	h.request(t, "edge-us", "r-bad", chat("no-such-model"), "")
}

func getBody(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestDecisionsQuery(t *testing.T) {
	h := startExtProc(t)
	fill(t, h)
	us, _ := h.srv.Decisions().Get("r-us")
	srv := httptest.NewServer(admin.Handler(admin.Options{Decisions: h.srv.Decisions()}))
	defer srv.Close()
	tests := []struct {
		name   string
		query  string
		status int
		ids    []string // newest first
		errSub string
	}{
		{"all", "", 200, []string{"r-bad", "r-eu", "r-us"}, ""},
		{"limit", "limit=2", 200, []string{"r-bad", "r-eu"}, ""},
		{"source", "source=edge-us", 200, []string{"r-bad", "r-us"}, ""},
		{"model", "model=llama-3.1-8b-instruct", 200, []string{"r-eu"}, ""},
		{"chosen cluster", "cluster=" + us.Chosen, 200, []string{"r-us"}, ""},
		{"served cluster", "cluster=elsewhere", 200, []string{"r-eu"}, ""},
		{"reason", "reason=model_not_found", 200, []string{"r-bad"}, ""},
		{"filters combine, limit after filtering", "source=edge-us&reason=weighted&limit=1", 200, []string{"r-us"}, ""},
		{"unknown value matches nothing", "source=edge-mars", 200, []string{}, ""},
		{"bad limit", "limit=x", 400, nil, `limit \"x\"`},
		{"limit out of range", "limit=0", 400, nil, `limit \"0\"`},
		{"bad follow", "follow=maybe", 400, nil, `follow \"maybe\"`},
		{"bad before", "before=x", 400, nil, `before \"x\" is not a record sequence number`},
		{"a huge bad value is echoed as an excerpt", "limit=" + strings.Repeat("x", 100000), 400, nil, `…(+99954 bytes)\" is not a number`},
		{"before pages back", "before=3", 200, []string{"r-eu", "r-us"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := getBody(t, srv.URL+"/debug/decisions?"+tt.query)
			if status != tt.status {
				t.Fatalf("status %d; want %d: %s", status, tt.status, body)
			}
			if tt.errSub != "" {
				if len(body) > 1024 {
					t.Errorf("error body of %d bytes; want a bounded one", len(body))
				}
				if !strings.Contains(body, tt.errSub) {
					t.Errorf("error %s lacks %q", body, tt.errSub)
				}
				return
			}
			var recs []decision.Record
			if err := json.Unmarshal([]byte(body), &recs); err != nil {
				t.Fatalf("%v: %s", err, body)
			}
			ids := []string{}
			for _, r := range recs {
				ids = append(ids, r.RequestID)
			}
			if !slices.Equal(ids, tt.ids) {
				t.Errorf("ids %v; want %v", ids, tt.ids)
			}
		})
	}
}

// TestDecisionsPages: a page stops at its limit or at MaxPageBytes, and a
// Link header leads to the next page until every record was seen once.
func TestDecisionsPages(t *testing.T) {
	h := startExtProc(t)
	// 60 unknown-model requests whose model names are 4 MiB: each record
	// keeps a bounded excerpt, so pages stay small.
	huge := strings.Repeat("m", 4<<20)
	for i := range 60 {
		h.request(t, "edge-us", "r-"+strconv.Itoa(i), chat(huge), "")
	}
	srv := httptest.NewServer(admin.Handler(admin.Options{Decisions: h.srv.Decisions()}))
	defer srv.Close()
	next := srv.URL + "/debug/decisions?limit=25&reason=model_not_found"
	var seen []string
	for pages := 0; next != ""; pages++ {
		if pages > 5 {
			t.Fatal("more pages than records")
		}
		resp, err := http.Get(next)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %v", next, resp.StatusCode, err)
		}
		if len(b) > admin.MaxPageBytes {
			t.Errorf("page of %d bytes; want <= %d", len(b), admin.MaxPageBytes)
		}
		var recs []decision.Record
		if err := json.Unmarshal(b, &recs); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			seen = append(seen, r.RequestID)
		}
		next = ""
		if l := resp.Header.Get("Link"); l != "" {
			u := strings.TrimSuffix(strings.TrimPrefix(l, "<"), `>; rel="next"`)
			next = srv.URL + u
		}
	}
	if len(seen) != 60 || seen[0] != "r-59" || seen[59] != "r-0" {
		t.Errorf("pages gave %d records (%v ... ); want r-59 ... r-0 once each", len(seen), seen[:min(3, len(seen))])
	}
}

// follow opens a decision stream; it returns once the server subscribed
// (the headers came).
func follow(ctx context.Context, t *testing.T, u string) (*http.Response, *bufio.Scanner) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("follow: %s, %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	return resp, bufio.NewScanner(resp.Body)
}

func TestDecisionsFollow(t *testing.T) {
	h := startExtProc(t)
	h.request(t, "edge-us", "r-old", chat("qwen2.5-7b-instruct"), "") // before: not streamed
	srv := httptest.NewServer(admin.Handler(admin.Options{Decisions: h.srv.Decisions()}))
	defer srv.Close() // blocks until every handler returned: no stream is left behind
	tests := []struct {
		name  string
		query string
		ids   []string
	}{
		{"everything, in completion order", "", []string{"r-us", "r-eu", "r-bad"}},
		{"source", "source=edge-us", []string{"r-us", "r-bad"}},
		{"served cluster", "cluster=elsewhere", []string{"r-eu"}},
		{"reason", "reason=model_not_found", []string{"r-bad"}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	streams := make([]*bufio.Scanner, len(tests))
	for i, tt := range tests {
		resp, sc := follow(ctx, t, srv.URL+"/debug/decisions?follow=1&"+tt.query)
		defer resp.Body.Close()
		streams[i] = sc
	}
	fill(t, h)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, want := range tt.ids {
				if !streams[i].Scan() {
					t.Fatalf("stream ended before %s: %v", want, streams[i].Err())
				}
				var r decision.Record
				if err := json.Unmarshal(streams[i].Bytes(), &r); err != nil {
					t.Fatalf("line %q: %v", streams[i].Text(), err)
				}
				if r.RequestID != want || !r.Complete {
					t.Errorf("got %s (complete %v); want %s, complete", r.RequestID, r.Complete, want)
				}
			}
		})
	}
}

// slowLog subscribes with a buffer of one record and, before the handler
// reads it, has ext_proc complete three: two are dropped.
type slowLog struct {
	*decision.Log
	before func()
}

func (s slowLog) Subscribe(ctx context.Context, f decision.Filter, _ int) *decision.Subscription {
	sub := s.Log.Subscribe(ctx, f, 1)
	s.before()
	return sub
}

func TestDecisionsFollowSlowReader(t *testing.T) {
	h := startExtProc(t)
	d := slowLog{Log: h.srv.Decisions(), before: func() { fill(t, h) }}
	srv := httptest.NewServer(admin.Handler(admin.Options{Decisions: d}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, sc := follow(ctx, t, srv.URL+"/debug/decisions?follow=1")
	defer resp.Body.Close()
	var lines []string
	for range 2 {
		if !sc.Scan() {
			t.Fatalf("stream ended: %v", sc.Err())
		}
		lines = append(lines, sc.Text())
	}
	if !strings.Contains(lines[0], `"request_id":"r-us"`) || lines[1] != `{"dropped":2}` {
		t.Errorf("lines %q; want r-us then {\"dropped\":2}", lines)
	}
	// Another record still comes through.
	h.request(t, "edge-eu", "r-later", chat("qwen2.5-7b-instruct"), "")
	if !sc.Scan() || !strings.Contains(sc.Text(), `"request_id":"r-later"`) {
		t.Errorf("after the drop: %q, %v", sc.Text(), sc.Err())
	}
}

// TestDecisionsFollowClientGoesAway: the handler ends when the client
// does (srv.Close waits for it), and the log keeps serving.
func TestDecisionsFollowClientGoesAway(t *testing.T) {
	h := startExtProc(t)
	srv := httptest.NewServer(admin.Handler(admin.Options{Decisions: h.srv.Decisions()}))
	for range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		resp, _ := follow(ctx, t, srv.URL+"/debug/decisions?follow=1")
		cancel()
		resp.Body.Close()
	}
	done := make(chan struct{})
	go func() { srv.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a follow handler outlived its client")
	}
	fill(t, h) // publishing to no one works
}
