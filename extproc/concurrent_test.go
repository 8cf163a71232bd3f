package extproc_test

import (
	"strconv"
	"sync"
	"testing"

	"github.com/ilbproject/ilb/extproc/extproctest"
)

// TestConcurrentStreams plays requests on many streams at once through
// real gRPC (run with -race: the answers ILB shares between streams, the
// decision log, the cached counters): every request is decided, answered
// and completed in the log.
func TestConcurrentStreams(t *testing.T) {
	h := start(t, true)
	const streams, each = 8, 25
	var wg sync.WaitGroup
	for g := range streams {
		wg.Go(func() {
			for i := range each {
				id := "c-" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
				answers := extproctest.Play(t, h.client, extproctest.Exchange{
					Source: "edge-us", RequestID: id, Body: extproctest.Chat("llama3-8b"),
					Served: "us-east-vllm", Version: h.w.Version(),
				})
				if len(answers) != 3 || answers[2].GetResponseHeaders() == nil {
					t.Errorf("%s: answers %v; want headers, body and response headers answered", id, answers)
				}
			}
		})
	}
	wg.Wait()
	for g := range streams {
		for i := range each {
			id := "c-" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
			if rec, ok := h.srv.Decisions().Get(id); !ok || !rec.Complete || rec.Status != 200 || rec.Chosen == "" {
				t.Errorf("%s: record %+v, %v; want a complete, routed record", id, rec, ok)
			}
		}
	}
}
