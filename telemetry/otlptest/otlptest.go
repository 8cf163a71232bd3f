// Package otlptest is an in-process OTLP trace receiver for tests: a real
// gRPC TraceService on loopback, or an OTLP/HTTP handler (POST /v1/traces,
// protobuf body), that records every exported span.
package otlptest

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	collectortracev1 "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	Name         string
	TraceID      string // hex
	SpanID       string // hex
	ParentSpanID string // hex, "" for a root
	Kind         tracev1.Span_SpanKind
	Attrs        map[string]any // string, int64, bool, float64
	Resource     map[string]any
	Status       *tracev1.Status
	Events       []*tracev1.Span_Event
}

// Receiver records the spans of export requests. Safe for concurrent use.
type Receiver struct {
	collectortracev1.UnimplementedTraceServiceServer

	mu    sync.Mutex
	spans []Span
}

var _ collectortracev1.TraceServiceServer = (*Receiver)(nil)

// Export records the request's spans.
func (r *Receiver) Export(_ context.Context, req *collectortracev1.ExportTraceServiceRequest) (*collectortracev1.ExportTraceServiceResponse, error) {
	r.add(req)
	return &collectortracev1.ExportTraceServiceResponse{}, nil
}

func (r *Receiver) add(req *collectortracev1.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, Span{
					Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Kind: s.GetKind(),
					Attrs: attrs(s.GetAttributes()), Resource: res, Status: s.GetStatus(), Events: s.GetEvents(),
				})
			}
		}
	}
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// WaitFor polls until a span named name arrives or the timeout passes.
func (r *Receiver) WaitFor(name string, timeout time.Duration) (Span, bool) {
	deadline := time.Now().Add(timeout)
	for {
		for _, s := range r.Spans() {
			if s.Name == name {
				return s, true
			}
		}
		if time.Now().After(deadline) {
			return Span{}, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// StartGRPC serves a Receiver over gRPC on 127.0.0.1:0 until the test
// ends; the endpoint is "http://ADDR" (insecure).
func StartGRPC(t testing.TB) (*Receiver, string) {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{}
	g := grpc.NewServer()
	collectortracev1.RegisterTraceServiceServer(g, r)
	done := make(chan error, 1)
	go func() { done <- g.Serve(ln) }()
	t.Cleanup(func() {
		g.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("OTLP receiver: %v", err)
		}
	})
	return r, "http://" + ln.Addr().String()
}

// StartHTTP serves a Receiver over OTLP/HTTP (POST /v1/traces, protobuf)
// until the test ends; the endpoint is the server's base URL.
func StartHTTP(t testing.TB) (*Receiver, string) {
	t.Helper()
	r := &Receiver{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
			http.Error(w, "content-type "+ct+": want application/x-protobuf", http.StatusUnsupportedMediaType)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var msg collectortracev1.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &msg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&msg)
		out, _ := proto.Marshal(&collectortracev1.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func attrs(kvs []*commonv1.KeyValue) map[string]any {
	out := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonv1.AnyValue_StringValue:
			out[kv.GetKey()] = v.GetStringValue()
		case *commonv1.AnyValue_IntValue:
			out[kv.GetKey()] = v.GetIntValue()
		case *commonv1.AnyValue_BoolValue:
			out[kv.GetKey()] = v.GetBoolValue()
		case *commonv1.AnyValue_DoubleValue:
			out[kv.GetKey()] = v.GetDoubleValue()
		default:
			out[kv.GetKey()] = v.String()
		}
	}
	return out
}
