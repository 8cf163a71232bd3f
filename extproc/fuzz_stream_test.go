package extproc

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/weights"
)

// scriptStream is Envoy's side of one ext_proc stream, in memory: Recv
// hands out the scripted messages, then io.EOF; Send keeps the answers.
// It is the network edge the fuzzer stands in for.
type scriptStream struct {
	grpc.ServerStream
	ctx  context.Context
	msgs []*extprocv3.ProcessingRequest

	mu   sync.Mutex
	next int
	sent []*extprocv3.ProcessingResponse
}

var _ extprocv3.ExternalProcessor_ProcessServer = (*scriptStream)(nil)

func (s *scriptStream) Context() context.Context { return s.ctx }

func (s *scriptStream) Recv() (*extprocv3.ProcessingRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next == len(s.msgs) {
		return nil, io.EOF
	}
	s.next++
	return s.msgs[s.next-1], nil
}

func (s *scriptStream) Send(r *extprocv3.ProcessingResponse) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, r)
	return nil
}

var fuzzPaths = []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/v1/responses", "/v1/audio/transcriptions", ""}

// script turns fuzz bytes into a message sequence: each byte is one
// message (its low 3 bits the kind, the rest a variant).
func script(ops []byte, path, model, prio, session, body string) []*extprocv3.ProcessingRequest {
	var out []*extprocv3.ProcessingRequest
	for i, op := range ops {
		if i == 16 {
			break
		}
		variant := int(op >> 3)
		switch op & 7 {
		case 0, 1: // request headers; 1: end of stream
			kv := []string{":method", []string{"POST", "GET", "PUT"}[variant%3], ":path", path}
			if variant&4 != 0 {
				kv = append(kv, header.Model, model)
			}
			if variant&8 != 0 {
				kv = append(kv, header.Priority, prio)
			}
			if variant&16 != 0 {
				kv = append(kv, header.Session, session, header.RequestID, session, header.Debug, "1", "content-length", strconv.Itoa(len(body)))
			}
			m := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
				RequestHeaders: &extprocv3.HttpHeaders{Headers: headers(kv...), EndOfStream: op&7 == 1},
			}}
			if variant&2 != 0 {
				m.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: extprocfilterv3.ProcessingMode_STREAMED}
			}
			out = append(out, m)
		case 2, 3: // request body, whole or a chunk
			part := body
			if op&7 == 3 && len(body) > 0 {
				part = body[:variant%(len(body)+1)]
			}
			out = append(out, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
				RequestBody: &extprocv3.HttpBody{Body: []byte(part), EndOfStream: op&7 == 2},
			}})
		case 4:
			out = append(out, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
				ResponseHeaders: &extprocv3.HttpHeaders{Headers: headers(":status", strconv.Itoa(100+variant*13), header.ServedCluster, model, header.UpstreamHost, session)},
			}})
		case 5:
			out = append(out, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}})
		case 6:
			out = append(out, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(body)}}})
		case 7:
			out = append(out, &extprocv3.ProcessingRequest{}) // a kind this version does not know
		}
	}
	return out
}

func headers(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

// FuzzStream drives whole ext_proc streams of any message sequence, any
// source, headers and body through the server. Invariants: no panic; the
// stream ends cleanly or with a gRPC status of a known code; every message
// before the end got exactly one answer, of the matching type or an
// ImmediateResponse (after which nothing more is answered); error bodies
// and decision records stay bounded; demand counts at most one request
// per stream.
func FuzzStream(f *testing.F) {
	cfg, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		f.Fatal(err)
	}
	cfg.ExtProc.MaxStreams = 1 << 20
	meter := demand.NewMeter(time.Unix(0, 0))
	srv, err := New(Options{Config: cfg, Meter: meter, Rand: func() uint64 { return 4242 }})
	if err != nil {
		f.Fatal(err)
	}
	w, err := weights.Proportional{}.Compute(weights.Input{Config: cfg, Clusters: weights.StaticState(cfg)})
	if err != nil {
		f.Fatal(err)
	}
	if err := srv.Publish(context.Background(), w); err != nil {
		f.Fatal(err)
	}
	chat := `{"model":"llama3-8b","messages":[{"role":"user","content":"hi"}],"max_tokens":9,"user":"u"}`
	f.Add("edge-us", []byte{0, 2, 4}, uint8(0), "", "", "", chat)
	f.Add("edge-eu", []byte{0 | 4<<3, 2, 4}, uint8(1), "qwen-7b", "critical", "s", `{"model":"qwen-7b","prompt":"x"}`)
	f.Add("edge-us", []byte{1 | 16<<3, 4}, uint8(3), "", "sheddable", "sess", "")
	f.Add("edge-us", []byte{0 | 2<<3, 3 | 5<<3, 2, 4}, uint8(0), "", "", "", chat)
	f.Add("edge-us", []byte{0, 0, 2}, uint8(0), "", "", "", chat)
	f.Add("", []byte{2, 0}, uint8(0), "m", "urgent", "", "[")
	f.Add("edge-mars", []byte{0 | 12<<3, 5, 2, 6, 7, 4}, uint8(5), "gpt-9", "critical", "s", `{"model":"gpt-9"}`)
	f.Fuzz(func(t *testing.T, source string, ops []byte, pathIdx uint8, model, prio, session, body string) {
		path := fuzzPaths[int(pathIdx)%len(fuzzPaths)]
		msgs := script(ops, path, model, prio, session, body)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if source != "" {
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(header.Source, source))
		}
		// Inputs whose first op has its top bits set run the whole
		// stream handler (its watcher goroutine and timer); the others
		// drive its serving loop directly, several times faster.
		st := &scriptStream{ctx: ctx, msgs: msgs}
		var err error
		if len(ops) > 0 && ops[0]&0xF0 == 0xF0 {
			err = srv.Process(st)
		} else {
			err = drive(ctx, srv, st)
		}
		if err != nil {
			switch status.Code(err) {
			case codes.InvalidArgument, codes.ResourceExhausted, codes.DeadlineExceeded:
			default:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Process: unexpected error %v", err)
				}
			}
		}
		answered := len(st.sent)
		immediate := false
		for i, r := range st.sent {
			if immediate {
				t.Fatalf("answer %d after an ImmediateResponse", i)
			}
			if ir := r.GetImmediateResponse(); ir != nil {
				immediate = true
				if len(ir.GetBody()) > 4096 {
					t.Fatalf("ImmediateResponse body of %d bytes", len(ir.GetBody()))
				}
				continue
			}
			if !matches(msgs[i], r) {
				t.Fatalf("message %d (%T) answered with %T", i, msgs[i].GetRequest(), r.GetResponse())
			}
		}
		if err == nil && !immediate && answered != len(msgs) {
			t.Fatalf("%d messages, %d answers, stream ended cleanly", len(msgs), answered)
		}
		counts, _ := meter.Flush(time.Unix(0, 0))
		var n uint64
		for _, c := range counts {
			n += c.Requests
		}
		if n > 1 {
			t.Fatalf("one stream counted %d requests of demand", n)
		}
		if b := srv.log.Bytes(); b > cfg.ExtProc.DecisionLogBytes {
			t.Fatalf("decision log holds %d bytes; bound %d", b, cfg.ExtProc.DecisionLogBytes)
		}
		for _, r := range srv.log.Recent(1) {
			if len(r.RequestedModel) > 256 || len(r.Path) > 1024 || len(r.RequestID) > 256 || len(r.Source) > 64 {
				t.Fatalf("record strings not bounded: %d %d %d %d", len(r.RequestedModel), len(r.Path), len(r.RequestID), len(r.Source))
			}
		}
	})
}

// drive serves a stream's messages on the caller's goroutine, as the
// serving goroutine of Process does, without its watcher.
func drive(ctx context.Context, srv *Server, st *scriptStream) error {
	return srv.serve(ctx, st, &exchange{source: sourceOf(st, srv.opts.DefaultSource)}, &watch{idle: time.Hour})
}

// matches reports whether r answers m with the matching type.
func matches(m *extprocv3.ProcessingRequest, r *extprocv3.ProcessingResponse) bool {
	switch m.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return r.GetRequestHeaders() != nil
	case *extprocv3.ProcessingRequest_RequestBody:
		return r.GetRequestBody() != nil
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return r.GetResponseHeaders() != nil
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return r.GetRequestTrailers() != nil
	case *extprocv3.ProcessingRequest_ResponseBody:
		return r.GetResponseBody() != nil
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return r.GetResponseTrailers() != nil
	}
	return r.GetRequestHeaders() != nil // unknown kinds: continue
}
