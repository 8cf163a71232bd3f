package extproc_test

import (
	"flag"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ilbproject/ilb/internal/promtest"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// TestMetricsGolden: the exposition of ext_proc's metrics after a routed
// request whose response came back, a refused one (404) and one whose
// stream ended before its response, compared with a golden file (the
// decision-time histogram, wall-clock, is left out).
func TestMetricsGolden(t *testing.T) {
	h := start(t, true)
	chat := reqBody(`{"model":"llama3-8b","messages":[{"role":"user","content":"hi"}]}`)
	// Each exchange ends as Envoy ends it (the stream closed), so the open
	// streams gauge is 0 whatever the timing.
	for _, ex := range []struct {
		source string
		msgs   []*extprocv3.ProcessingRequest
	}{
		{"edge-us", []*extprocv3.ProcessingRequest{
			post("/v1/chat/completions", "x-request-id", "routed"), chat,
			respHeaders(":status", "200", "x-ilb-served-cluster", "us-east-vllm", "x-ilb-weights-version", h.w.Version()),
		}},
		{"edge-us", []*extprocv3.ProcessingRequest{post("/v1/chat/completions", "x-request-id", "refused"), reqBody(`{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`)}},
		{"edge-eu", []*extprocv3.ProcessingRequest{post("/v1/chat/completions", "x-request-id", "gone"), chat}},
	} {
		playAndEnd(t, h, ex.source, ex.msgs...)
	}
	promtest.Golden(t, promtest.Exposition(t, promtest.Without(h.reg, "ilb_extproc_decision_duration_seconds")), "testdata/metrics.golden", *update)
}
