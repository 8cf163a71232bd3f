package extproc_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/extproc"
)

// TestUnansweredRecords: a record never claims an answer the client did
// not get. When the stream ends before the response headers came back
// (the client went away, or Envoy stopped waiting and went on without
// ILB), before ILB could decide, or when ILB answered after Envoy's
// message_timeout, the record is complete and says so.
func TestUnansweredRecords(t *testing.T) {
	chat := reqBody(`{"model":"llama3-8b","messages":[{"role":"user","content":"hi"}]}`)
	unknown := reqBody(`{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`)
	for _, tc := range []struct {
		name    string
		timeout config.Duration // envoy.message_timeout; 0: the default
		msgs    []*extprocv3.ProcessingRequest
		reason  string
		status  int
		why     string
	}{
		{"decided, the stream ended before the response", 0, []*extprocv3.ProcessingRequest{post("/v1/chat/completions"), chat}, "weighted", 0, "the stream ended before the response headers"},
		{"the stream ended before the body", 0, []*extprocv3.ProcessingRequest{post("/v1/chat/completions")}, "undecided", 0, "while ILB waited for the request body"},
		{"routed after Envoy's message timeout", 1, []*extprocv3.ProcessingRequest{post("/v1/chat/completions"), chat}, "weighted", 0, "past Envoy's message_timeout"},
		{"refused after Envoy's message timeout", 1, []*extprocv3.ProcessingRequest{post("/v1/chat/completions"), unknown}, "model_not_found", 0, "past Envoy's message_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startWith(t, true, func(o *extproc.Options) {
				if tc.timeout != 0 {
					c := *o.Config
					c.Envoy.MessageTimeout = tc.timeout
					o.Config = &c
				}
			})
			playAndEnd(t, h, "edge-us", tc.msgs...)
			rec, ok := h.srv.Decisions().Get("req-1")
			if !ok {
				t.Fatal("no record")
			}
			if !rec.Complete || rec.Reason != tc.reason || rec.Status != tc.status || !strings.Contains(rec.Unanswered, tc.why) {
				t.Errorf("record complete %v reason %q status %d unanswered %q; want complete, %q, %d, %q", rec.Complete, rec.Reason, rec.Status, rec.Unanswered, tc.reason, tc.status, tc.why)
			}
		})
	}
}

// playAndEnd plays msgs on one stream as source, stopping after an
// ImmediateResponse, then ends the stream as Envoy does (whether or not
// response headers were sent). It returns once the server's end of the
// stream, and what it runs on the way out, is done.
func playAndEnd(t *testing.T, h *harness, source string, msgs ...*extprocv3.ProcessingRequest) {
	t.Helper()
	st, _ := openStream(t, h, source)
	for _, m := range msgs {
		resp, err := exchangeOne(t, st, m)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetImmediateResponse() != nil {
			break
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v", err)
	}
}
