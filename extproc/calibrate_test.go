package extproc_test

import (
	"errors"
	"io"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/internal/promtest"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/route"
	"github.com/ilbproject/ilb/weights"
)

// TestFirstEventsCalibrateTheShed: the first event of each followed
// streaming response calibrates its cluster's first-token predictions
// (route.Calibration), and the planned shed tests the calibrated
// prediction: a sheddable request predicted past the TTFT target by the
// bound (2.4 s against 2 s), on a cluster whose first events came at
// 1 s, is routed with the plan waived; first events later than
// predicted, or responses that say nothing of the first token (a JSON
// body, an error), leave the bound as it is, and it is shed.
func TestFirstEventsCalibrateTheShed(t *testing.T) {
	// One serving replica per cluster, overloaded in the SLO's terms,
	// prefilling 24 ms a token: the ~100-token prompt's first token is
	// predicted at 2.4 s.
	c := late
	c.Serving, c.PrefillPerToken = 1, 0.024
	ls := &live.State{At: now, Clusters: map[string]live.Cluster{"us-east-vllm": c, "eu-west-vllm": c, "eu-west-tgi": c}}
	sse := []string{header.ServedCluster, "eu-west-vllm", "content-type", "text/event-stream"}
	js := []string{header.ServedCluster, "eu-west-vllm", "content-type", "application/json"}
	// Critical requests (never shed by this plan), streamed: followed, to
	// book their estimate past the provisional share (max_tokens 4096),
	// or to their first event only.
	long := `{"model":"qwen-7b","stream":true,"max_tokens":4096,"messages":[{"role":"user","content":"` + strings.Repeat("x", 400) + `"}]}`
	short := `{"model":"qwen-7b","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"` + strings.Repeat("x", 400) + `"}]}`
	tests := []struct {
		name   string
		body   string
		status string
		resp   []string      // response headers after :status
		after  time.Duration // the first event after the decision
		routed bool          // the sheddable request after 300 such
	}{
		{"first events at 1 s: calibrated, the shed is waived", long, "200", sse, time.Second, true},
		{"first events at 1 s of requests booked whole at the decision: calibrated, the shed is waived", short, "200", sse, time.Second, true},
		{"first events later than predicted: the bound stands, shed", long, "200", sse, 3 * time.Second, false},
		{"JSON bodies say nothing of the first token: shed", long, "200", js, time.Second, false},
		{"refused by the engine: shed", long, "503", sse, time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var clock atomic.Int64
			clock.Store(now.UnixNano())
			h := startWith(t, true, func(o *extproc.Options) { o.Now = func() time.Time { return time.Unix(0, clock.Load()) } })
			publishQwen(t, h, weights.ShedFractions{weights.Sheddable: 1})
			h.srv.SetLive(ls)
			for range 300 {
				clock.Store(now.UnixNano())
				st, cancel := openStream(t, h, "edge-us")
				exchange(t, st, post("/v1/chat/completions", header.Priority, "critical"))
				if a := exchange(t, st, reqBody(tt.body)); a.GetImmediateResponse() != nil {
					t.Fatalf("critical request refused: %v", a)
				}
				clock.Store(now.Add(tt.after).UnixNano())
				exchange(t, st, respHeaders(append([]string{":status", tt.status}, tt.resp...)...))
				exchange(t, st, respChunk(sseEvents(1), false))
				closeStream(t, st)
				cancel()
			}
			// The fixed draw sends every request to eu-west-vllm: its gauge
			// shows the calibration, the others' the bound.
			scale, _ := promtest.Value(t, h.reg, "ilb_extproc_first_token_scale", map[string]string{"cluster": "eu-west-vllm"})
			if (scale < 0.8) != tt.routed {
				t.Errorf("ilb_extproc_first_token_scale{cluster=eu-west-vllm} %v; want under 0.8: %v", scale, tt.routed)
			}
			promtest.Check(t, h.reg, "ilb_extproc_first_token_scale", map[string]string{"cluster": "us-east-vllm"}, 1)
			clock.Store(now.UnixNano())
			last := h.run(t, "edge-us", qwenRequest("sheddable")...)
			rec, _ := h.srv.Decisions().Get("req-1")
			if !tt.routed {
				refused(t, last[len(last)-1], 429, "shed")
				return
			}
			if ir := last[len(last)-1].GetImmediateResponse(); ir != nil {
				t.Fatalf("refused %v; want routed, the plan waived", ir)
			}
			// 300 first events at ~0.4 of their prediction take the scale
			// from 1 to 0.999^300 ≈ 0.74, which brings 2.4 s under 2 s.
			if s := rec.ShedWaivedScale; !(s >= route.MinFirstTokenScale && s < 0.8) || rec.ShedWaived != 1 ||
				math.Abs(rec.ShedWaivedFirstToken/s-2.4) > 0.2 || !(rec.ShedWaivedFirstToken <= 2) {
				t.Errorf("record shed_waived %g, first token %g s, scale %g; want 1, within 2 s, a scale under 0.8 of a ~2.4 s bound",
					rec.ShedWaived, rec.ShedWaivedFirstToken, rec.ShedWaivedScale)
			}
		})
	}
}

// exchange sends m on st and returns its answer.
func exchange(t *testing.T, st extprocv3.ExternalProcessor_ProcessClient, m *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	t.Helper()
	a, err := exchangeOne(t, st, m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// closeStream ends st and waits for the server to end it.
func closeStream(t *testing.T, st extprocv3.ExternalProcessor_ProcessClient) {
	t.Helper()
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := st.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			return
		}
	}
}
