package extproc_test

import (
	"context"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/internal/promtest"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/weights"
)

// openStream opens a raw stream as source, for tests that drive the
// protocol message by message.
func openStream(t *testing.T, h *harness, source string) (extprocv3.ExternalProcessor_ProcessClient, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	ctx = metadata.AppendToOutgoingContext(ctx, header.Source, source)
	st, err := h.client.Process(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return st, cancel
}

// exchangeOne sends m and returns the answer, or the stream's error.
func exchangeOne(t *testing.T, st extprocv3.ExternalProcessor_ProcessClient, m *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	t.Helper()
	if err := st.Send(m); err != nil {
		// The server may have ended the stream already: Recv says why.
		_, rerr := st.Recv()
		return nil, rerr
	}
	return st.Recv()
}

func TestStreamProtocolErrors(t *testing.T) {
	chat := reqBody(`{"model":"llama3-8b","messages":[{"role":"user","content":"hi"}]}`)
	tests := []struct {
		name string
		msgs []*extprocv3.ProcessingRequest
		msg  string
	}{
		{
			"a second request headers message",
			[]*extprocv3.ProcessingRequest{post("/v1/chat/completions"), chat, post("/v1/chat/completions")},
			"a second request_headers message on one stream",
		},
		{
			"a second request headers message before the body",
			[]*extprocv3.ProcessingRequest{post("/v1/chat/completions"), post("/v1/chat/completions")},
			"a second request_headers message on one stream",
		},
		{
			"a body before the headers",
			[]*extprocv3.ProcessingRequest{chat},
			"a request_body message before the request_headers message",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, true)
			st, _ := openStream(t, h, "edge-us")
			var err error
			for _, m := range tt.msgs {
				if _, err = exchangeOne(t, st, m); err != nil {
					break
				}
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Fatalf("stream ended with %v; want InvalidArgument %q", err, tt.msg)
			}
			// Decided once, counted once.
			counts, _ := h.meter.Flush(now)
			var n uint64
			for _, c := range counts {
				n += c.Requests
			}
			if want := uint64(strings.Count(tt.name, "second request headers message") - strings.Count(tt.name, "before the body")); n != want {
				t.Errorf("demand counted %d requests; want %d", n, want)
			}
			promtest.Check(t, h.reg, "ilb_extproc_streams_refused_total", map[string]string{"reason": "protocol_error"}, 1)
		})
	}
}

func TestIdleStreamEnds(t *testing.T) {
	h := startWith(t, true, func(o *extproc.Options) {
		c := *o.Config
		c.Envoy.MessageTimeout = config.Duration(500 * time.Millisecond)
		c.ExtProc.StreamIdleTimeout = config.Duration(time.Second)
		o.Config = &c
	})
	tests := []struct {
		name  string
		first *extprocv3.ProcessingRequest // nil: nothing at all
		owed  string
	}{
		{"headers then no body", post("/v1/chat/completions"), "no request body"},
		{"nothing at all", nil, "no request headers"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, _ := openStream(t, h, "edge-us")
			if tt.first != nil {
				if resp, err := exchangeOne(t, st, tt.first); err != nil || resp.GetRequestHeaders() == nil {
					t.Fatalf("headers answer = %v, %v", resp, err)
				}
			}
			// The server ends the stream; Recv returns when it does. What
			// Envoy owed travels in a trailer: gRPC sends the status of the
			// cancelled stream context.
			_, err := st.Recv()
			if why := st.Trailer().Get("x-ilb-error"); status.Code(err) != codes.DeadlineExceeded || len(why) != 1 || !strings.Contains(why[0], tt.owed) {
				t.Fatalf("stream ended with %v, trailer x-ilb-error %q; want DeadlineExceeded naming %q", err, why, tt.owed)
			}
			promtest.Check(t, h.reg, "ilb_extproc_streams_refused_total", map[string]string{"reason": "idle_timeout"}, float64(i+1))
		})
	}
	// A stream waiting for the engine's answer is not idle: the response
	// headers may come after a long generation.
	t.Run("awaiting the response is not idle", func(t *testing.T) {
		st, _ := openStream(t, h, "edge-us")
		if _, err := exchangeOne(t, st, post("/v1/chat/completions")); err != nil {
			t.Fatal(err)
		}
		if _, err := exchangeOne(t, st, reqBody(`{"model":"llama3-8b","messages":[{"role":"user","content":"hi"}]}`)); err != nil {
			t.Fatal(err)
		}
		// Another stream times out meanwhile: the clock of idleness runs.
		other, _ := openStream(t, h, "edge-us")
		if _, err := other.Recv(); status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("the idle stream ended with %v", err)
		}
		resp, err := exchangeOne(t, st, respHeaders(":status", "200"))
		if err != nil || resp.GetResponseHeaders() == nil {
			t.Fatalf("response headers answer = %v, %v; want the stream still open", resp, err)
		}
	})
}

// TestIdleStreamEndsWithoutTap: on a gRPC server not built with
// GRPCOptions (no tap), each stream is served on a goroutine of its own
// and its handler ends an idle one with the status naming what Envoy
// owed.
func TestIdleStreamEndsWithoutTap(t *testing.T) {
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.ExtProc.StreamIdleTimeout = config.Duration(time.Second)
	reg := prometheus.NewRegistry()
	srv, err := extproc.New(extproc.Options{Config: c, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h := &harness{srv: srv, reg: reg, client: extprocv3.NewExternalProcessorClient(conn)}
	st, _ := openStream(t, h, "edge-us")
	_, err = st.Recv()
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(status.Convert(err).Message(), "no request headers for 1s") {
		t.Fatalf("stream ended with %v; want DeadlineExceeded naming the request headers", err)
	}
	promtest.Check(t, reg, "ilb_extproc_streams_refused_total", map[string]string{"reason": "idle_timeout"}, 1)
}

func TestMaxStreams(t *testing.T) {
	h := startWith(t, true, func(o *extproc.Options) {
		c := *o.Config
		c.ExtProc.MaxStreams, c.ExtProc.MaxStreamsPerPeer = 2, 2 // one peer here
		o.Config = &c
	})
	var cancels []context.CancelFunc
	for range 2 {
		st, cancel := openStream(t, h, "edge-us")
		// An answer proves the server holds the stream.
		if _, err := exchangeOne(t, st, post("/v1/chat/completions")); err != nil {
			t.Fatal(err)
		}
		cancels = append(cancels, cancel)
	}
	st, _ := openStream(t, h, "edge-us")
	_, err := exchangeOne(t, st, post("/v1/chat/completions"))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "extproc.max_streams") {
		t.Fatalf("third stream: %v; want ResourceExhausted naming extproc.max_streams", err)
	}
	promtest.Check(t, h.reg, "ilb_extproc_streams_refused_total", map[string]string{"reason": "max_streams"}, 1)
	cancels[0]()
	// Once a stream ends, a new one is served (the server releases its
	// slot when the handler returns, which follows the cancel).
	waitUntilServed(t, h)
}

// waitUntilServed retries a request until the server takes a new stream.
func waitUntilServed(t *testing.T, h *harness) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, _ := openStream(t, h, "edge-us")
		_, err := exchangeOne(t, st, post("/v1/chat/completions"))
		if err == nil {
			return
		}
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("stream after a slot was freed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// refuseSource is an Authorizer that refuses one source.
type refuseSource struct{ source string }

var _ extproc.Authorizer = refuseSource{}

func (r refuseSource) Authorize(_ context.Context, source string) error {
	if source == r.source {
		return status.Errorf(codes.PermissionDenied, "peer may not speak for %s", source)
	}
	return nil
}

func TestAuthorizer(t *testing.T) {
	h := startWith(t, true, func(o *extproc.Options) { o.Authorizer = refuseSource{"edge-eu"} })
	st, _ := openStream(t, h, "edge-eu")
	if _, err := exchangeOne(t, st, post("/v1/chat/completions")); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("edge-eu stream: %v; want PermissionDenied", err)
	}
	if recs := h.srv.Decisions().Recent(10); len(recs) != 0 {
		t.Errorf("a refused stream left records %v", recs)
	}
	resps := h.run(t, "edge-us", post("/v1/chat/completions"), reqBody(`{"model":"llama3-8b","messages":[{"role":"user","content":"hi"}]}`))
	if resps[len(resps)-1].GetRequestBody() == nil {
		t.Errorf("edge-us answer = %v; want routed", resps[len(resps)-1])
	}
}

func TestPriorityTrust(t *testing.T) {
	h := start(t, true)
	// The engines confirm the overload, so the planned shedding applies.
	h.srv.SetLive(allClusters(h.cfg, live.Cluster{Saturated: true}))
	standardShed := weights.ShedFractions{weights.Standard: 1}
	tests := []struct {
		name     string
		source   string
		prio     string
		shed     weights.ShedFractions
		want     string // the record's priority
		from     string
		rejected bool
	}{
		{"untrusted critical is ignored", "edge-eu", "critical", standardShed, "standard", "ignored-header", true},
		{"untrusted invalid value is ignored, not a 400", "edge-eu", "urgent!!", weights.ShedFractions{}, "standard", "ignored-header", false},
		{"no header: the default", "edge-eu", "", weights.ShedFractions{}, "standard", "default", false},
		{"trusted critical passes", "edge-us", "critical", standardShed, "critical", "header", false},
		{"sheddable is shed at least as much as standard", "edge-us", "sheddable", standardShed, "sheddable", "header", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			publishShed(t, h, tt.source, tt.shed)
			hdr := post("/v1/chat/completions")
			if tt.prio != "" {
				hdr = post("/v1/chat/completions", header.Priority, tt.prio)
			}
			resps := h.run(t, tt.source, hdr, reqBody(`{"model":"llama3-8b","messages":[{"role":"user","content":"hi"}]}`))
			if got := resps[len(resps)-1].GetImmediateResponse() != nil; got != tt.rejected {
				t.Fatalf("rejected = %v; want %v (%v)", got, tt.rejected, resps[len(resps)-1])
			}
			rec, ok := h.srv.Decisions().Get("req-1")
			if !ok || rec.Priority != tt.want || rec.PriorityFrom != tt.from {
				t.Errorf("record priority %q from %q; want %q from %q", rec.Priority, rec.PriorityFrom, tt.want, tt.from)
			}
		})
	}
	promtest.Check(t, h.reg, "ilb_extproc_priority_ignored_total", map[string]string{"source": "edge-eu"}, 2)
}

// publishShed publishes the harness weights with shed fractions for
// every cell of source.
func publishShed(t *testing.T, h *harness, source string, shed weights.ShedFractions) {
	t.Helper()
	publishCells(t, h, func(s, _ string, cell *weights.Cell) {
		if s == source {
			cell.Shed = shed
		}
	})
}

// TestDemandCannotBeInflated: what a request claims counts as demand only
// within the model's limits, and past an ordinary request only as an
// engine serves it (TestDemandFollowsGeneration has the rest).
func TestDemandCannotBeInflated(t *testing.T) {
	// Ordinary llama request (demo defaults): 500 prompt + 250 output × 4.
	const ordinary = 500 + 250*4
	huge := `{"model":"llama3-8b","max_tokens":1000000000000000,"messages":[{"role":"user","content":"hi"}]}`
	bigPrompt := `{"model":"llama3-8b","messages":[{"role":"user","content":"` + strings.Repeat("x", 600<<10) + `"}]}`
	// The huge claim: its 8 prompt tokens, output capped by
	// max_output_tokens (32768 by default) at 4 units each.
	const hugeCost = 8 + 32768*4
	// The 600 KiB prompt (over the context, not twice: the engine decides): capped at the context (131072), which leaves 1
	// output token.
	const bigCost = 131072 + 1*4
	tests := []struct {
		name      string
		body      string
		status    string // response status; "" the client went away
		answer    string // the engine's response body, when it answered
		estimate  float64
		confirmed float64 // demand once the answer came
	}{
		{"huge max_tokens, engine refuses it", huge, "400", "", hugeCost, ordinary},
		{"huge max_tokens, engine serves it", huge, "200", `{"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":40000}}`, hugeCost, hugeCost},
		{"600 KiB prompt, client hangs up", bigPrompt, "", "", bigCost, ordinary},
		{"600 KiB prompt, served", bigPrompt, "200", `{"choices":[],"usage":{"prompt_tokens":131072,"completion_tokens":1}}`, bigCost, bigCost},
		{"a small request is booked whole at once", `{"model":"llama3-8b","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, "", "", 8 + 10*4, 8 + 10*4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, true)
			msgs := []*extprocv3.ProcessingRequest{post("/v1/chat/completions"), reqBody(tt.body)}
			if tt.status != "" {
				msgs = append(msgs, respHeaders(":status", tt.status, "content-type", "application/json"))
			}
			if tt.answer != "" {
				msgs = append(msgs, respChunk(tt.answer, true))
			}
			h.run(t, "edge-us", msgs...)
			waitStreamsClosed(t, h)
			rec, _ := h.srv.Decisions().Get("req-1")
			if rec.TokenCost != tt.estimate {
				t.Errorf("estimate %v; want %v (capped by the model's limits)", rec.TokenCost, tt.estimate)
			}
			counts, _ := h.meter.Flush(now)
			c := counts[demand.Key{Source: "edge-us", Model: "llama-3.1-8b-instruct", Priority: weights.Standard}]
			if c.Requests != 1 || c.TokenCost != tt.confirmed || rec.DemandBooked != tt.confirmed {
				t.Errorf("demand %+v, record booked %v; want 1 request of %v", c, rec.DemandBooked, tt.confirmed)
			}
		})
	}
}

// TestRecordsAreBounded: client strings at any size leave bounded
// records, and the id the client sent still finds its record.
func TestRecordsAreBounded(t *testing.T) {
	h := start(t, true)
	id := "req-" + strings.Repeat("i", 4000)
	resps := h.run(t, "edge-us",
		reqHeaders(false, ":method", "POST", ":path", "/v1/"+strings.Repeat("p", 50000)+"/chat/completions", header.RequestID, id),
		reqBody(`{"model":"`+strings.Repeat("m", 4<<20)+`","messages":[{"role":"user","content":"hi"}]}`))
	ir := resps[len(resps)-1].GetImmediateResponse()
	if ir == nil || ir.GetStatus().GetCode() != 404 || len(ir.GetBody()) > 1024 {
		t.Fatalf("answer = %d with a %d-byte body; want a bounded 404", ir.GetStatus().GetCode(), len(ir.GetBody()))
	}
	rec, ok := h.srv.Decisions().Get(id)
	if !ok {
		t.Fatal("the record is not found by the id the client sent")
	}
	if len(rec.RequestedModel) > 256 || len(rec.Path) > 1024 || len(rec.RequestID) > 256 {
		t.Errorf("record strings not bounded: model %d, path %d, id %d bytes", len(rec.RequestedModel), len(rec.Path), len(rec.RequestID))
	}
	if b := h.srv.Decisions().Bytes(); b > 4096 {
		t.Errorf("one record holds %d bytes; want < 4 KiB", b)
	}
}

// TestMaxStreamsPerPeer: a peer (here named by a test header through
// Options.PeerOf) holding extproc.max_streams_per_peer streams, answered
// and waiting for response headers that never come, gets no more; another
// peer still does, up to max_streams (issue 24: one peer held all
// max_streams by never sending response headers).
func TestMaxStreamsPerPeer(t *testing.T) {
	h := startWith(t, true, func(o *extproc.Options) {
		c := *o.Config
		c.ExtProc.MaxStreams, c.ExtProc.MaxStreamsPerPeer = 4, 2
		o.Config = &c
		o.PeerOf = func(ctx context.Context) string {
			md, _ := metadata.FromIncomingContext(ctx)
			return strings.Join(md.Get("x-test-peer"), ",")
		}
	})
	open := func(peer string) error {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), header.Source, "edge-us", "x-test-peer", peer), time.Minute)
		t.Cleanup(cancel)
		st, err := h.client.Process(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = exchangeOne(t, st, post("/v1/chat/completions")) // answered: held until the response
		return err
	}
	for i := range 2 {
		if err := open("rogue"); err != nil {
			t.Fatalf("rogue stream %d: %v", i, err)
		}
	}
	err := open("rogue")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "extproc.max_streams_per_peer") {
		t.Fatalf("the rogue's third stream: %v; want ResourceExhausted naming extproc.max_streams_per_peer", err)
	}
	for i := range 2 {
		if err := open("envoy"); err != nil {
			t.Fatalf("another peer's stream %d: %v", i, err)
		}
	}
	promtest.Check(t, h.reg, "ilb_extproc_streams_refused_total", map[string]string{"reason": "peer_streams"}, 1)
	promtest.Check(t, h.reg, "ilb_extproc_streams_refused_total", map[string]string{"reason": "max_streams"}, 0)
}

// TestHeldBodiesBounded: request bodies arriving in chunks (STREAMED and
// FULL_DUPLEX_STREAMED) are held until their end; together they may
// hold at most extproc.max_held_body_bytes. A chunk past it refuses its
// request with a 503 body_memory (retry later), and once a holder ends,
// its bytes are free again (issue 24: 100 streams dripping 1 MiB a
// second took a GiB).
func TestHeldBodiesBounded(t *testing.T) {
	for _, mode := range []struct {
		name string
		set  func(*extprocv3.ProcessingRequest) *extprocv3.ProcessingRequest
	}{{"streamed", streamedMode}, {"full duplex", duplexMode}} {
		t.Run(mode.name, func(t *testing.T) {
			h := startWith(t, true, func(o *extproc.Options) {
				c := *o.Config
				c.ExtProc.MaxBodyBytes, c.ExtProc.MaxHeldBodyBytes = 1<<20, 1<<20
				c.ExtProc.StreamIdleTimeout = config.Duration(time.Hour) // holders stay, however slow the machine
				o.Config = &c
			})
			chunk := strings.Repeat("x", 700<<10)
			start := func() (extprocv3.ExternalProcessor_ProcessClient, context.CancelFunc) {
				st, cancel := openStream(t, h, "edge-us")
				if err := st.Send(mode.set(post("/v1/chat/completions"))); err != nil {
					t.Fatal(err)
				}
				if mode.name == "streamed" {
					if _, err := st.Recv(); err != nil { // the headers' answer
						t.Fatal(err)
					}
				}
				if err := st.Send(reqChunk(chunk, false)); err != nil {
					t.Fatal(err)
				}
				return st, cancel
			}
			_, cancel := start()
			waitHeld(t, h, float64(len(chunk)))
			refused, _ := start()
			resp, err := refused.Recv()
			if mode.name == "streamed" && err == nil && resp.GetImmediateResponse() == nil {
				resp, err = refused.Recv()
			}
			if err != nil || resp.GetImmediateResponse().GetStatus().GetCode() != 503 || !strings.Contains(string(resp.GetImmediateResponse().GetBody()), "body_memory") {
				t.Fatalf("the second body's answer %v, %v; want 503 body_memory", resp, err)
			}
			promtest.Check(t, h.reg, "ilb_extproc_rejections_total", map[string]string{"source": "edge-us", "status": "503", "reason": "body_memory"}, 1)
			cancel() // the holder goes: its bytes are free
			waitHeld(t, h, 0)
			st, _ := start()
			waitHeld(t, h, float64(len(chunk)))
			_ = st
		})
	}
}

// waitHeld waits until ILB holds n bytes of bodies
// (ilb_extproc_held_body_bytes).
func waitHeld(t *testing.T, h *harness, n float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	held := func() float64 {
		v, _ := promtest.Value(t, h.reg, "ilb_extproc_held_body_bytes", nil)
		return v
	}
	for held() != n {
		if time.Now().After(deadline) {
			t.Fatalf("held body bytes %v; want %v", held(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDrippingBodiesStayBounded: 100 streams each sending a body in
// 1 MiB chunks, never its end (400 MiB in all), with the default bounds:
// ILB holds at most extproc.max_held_body_bytes (128 MiB) of them and its
// live heap grows by at most 256 MiB while they are open; the streams
// past the bound are refused with a 503 body_memory (issue 24: RSS
// +1,045 MiB in 7 s).
func TestDrippingBodiesStayBounded(t *testing.T) {
	h := startWith(t, true, func(o *extproc.Options) {
		c := *o.Config
		c.ExtProc.StreamIdleTimeout = config.Duration(time.Hour) // a loaded machine delivers chunks late: they are still held
		o.Config = &c
	})
	before := retainedHeap()
	chunk := strings.Repeat("x", 1<<20)
	var wg sync.WaitGroup
	var refused atomic.Int64
	for range 100 {
		st, _ := openStream(t, h, "edge-us")
		wg.Go(func() {
			if _, err := exchangeOne(t, st, streamedMode(post("/v1/chat/completions"))); err != nil {
				t.Error(err)
				return
			}
			for range 4 {
				r, err := exchangeOne(t, st, reqChunk(chunk, false))
				if err != nil {
					t.Error(err)
					return
				}
				if ir := r.GetImmediateResponse(); ir != nil {
					if ir.GetStatus().GetCode() != 503 {
						t.Errorf("refused with %d; want 503", ir.GetStatus().GetCode())
					}
					refused.Add(1)
					return
				}
			}
		})
	}
	wg.Wait()
	held, _ := promtest.Value(t, h.reg, "ilb_extproc_held_body_bytes", nil)
	grew := int64(retainedHeap()) - int64(before)
	t.Logf("held %.0f MiB of bodies, heap +%d MiB, %d of 100 streams refused", held/(1<<20), grew>>20, refused.Load())
	if held > 128<<20 || grew > 256<<20 || refused.Load() == 0 {
		t.Errorf("held %.0f bytes, heap +%d MiB, %d refused; want at most 128 MiB held, 256 MiB of heap, and refusals", held, grew>>20, refused.Load())
	}
}

// retainedHeap is the live heap after a full collection.
func retainedHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
