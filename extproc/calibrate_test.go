package extproc_test

import (
	"context"
	"errors"
	"io"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/metadata"

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
	tests := []struct {
		name   string
		status string
		resp   []string      // response headers after :status
		after  time.Duration // the first event after the decision
		routed bool          // the sheddable request after 300 such
	}{
		{"first events at 1 s: calibrated, the shed is waived", "200", sse, time.Second, true},
		{"first events later than predicted: the bound stands, shed", "200", sse, 3 * time.Second, false},
		{"JSON bodies say nothing of the first token: shed", "200", js, time.Second, false},
		{"refused by the engine: shed", "503", sse, time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var clock atomic.Int64
			clock.Store(now.UnixNano())
			h := startWith(t, true, func(o *extproc.Options) { o.Now = func() time.Time { return time.Unix(0, clock.Load()) } })
			publishQwen(t, h, weights.ShedFractions{weights.Sheddable: 1})
			h.srv.SetLive(ls)
			// Critical requests (never shed by this plan), streamed, with
			// max_tokens past the provisional share: followed.
			body := `{"model":"qwen-7b","stream":true,"max_tokens":4096,"messages":[{"role":"user","content":"` + strings.Repeat("x", 400) + `"}]}`
			for range 300 {
				clock.Store(now.UnixNano())
				s := open(t, h)
				s.exchange(t, post("/v1/chat/completions", header.Priority, "critical"))
				if a := s.exchange(t, reqBody(body)); a.GetImmediateResponse() != nil {
					t.Fatalf("critical request refused: %v", a)
				}
				clock.Store(now.Add(tt.after).UnixNano())
				s.exchange(t, respHeaders(append([]string{":status", tt.status}, tt.resp...)...))
				s.exchange(t, respChunk(sseEvents(1), false))
				s.close(t)
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

// stream is one ext_proc stream from edge-us, one message answered at a
// time.
type stream struct {
	c      extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
}

func open(t *testing.T, h *harness) *stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound on a hang
	c, err := h.client.Process(metadata.AppendToOutgoingContext(ctx, header.Source, "edge-us"))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return &stream{c: c, cancel: cancel}
}

// exchange sends m and returns its answer.
func (s *stream) exchange(t *testing.T, m *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	t.Helper()
	if err := s.c.Send(m); err != nil {
		t.Fatal(err)
	}
	a, err := s.c.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// close ends the stream and waits for the server to end it.
func (s *stream) close(t *testing.T) {
	t.Helper()
	defer s.cancel()
	if err := s.c.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := s.c.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			return
		}
	}
}
