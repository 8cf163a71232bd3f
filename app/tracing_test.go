package app_test

import (
	"context"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/ilbproject/ilb/app"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/header"
)

// TestOneTracerProvider: the provider given to app.Start reaches the
// controller (the first tick), the xDS server (its publication, a child
// of the tick) and ext_proc (a decision, child of the request's context).
func TestOneTracerProvider(t *testing.T) {
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Signals.Disabled = true
	c.Listen = config.Listen{XDS: "127.0.0.1:0", ExtProc: "127.0.0.1:0", Admin: "127.0.0.1:0"}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ctx, cancel := context.WithCancel(t.Context())
	a, err := app.Start(ctx, app.Options{Config: c, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = a.Wait() })

	byName := func(name string) []tracetest.SpanStub {
		var out []tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			if s.Name == name {
				out = append(out, s)
			}
		}
		return out
	}
	ticks, pubs := byName("ilb.controller.tick"), byName("ilb.xds.publish")
	if len(ticks) == 0 || len(pubs) == 0 {
		t.Fatalf("spans %d ticks, %d publications; want the first tick and its publication", len(ticks), len(pubs))
	}
	if pubs[0].Parent.SpanID() != ticks[0].SpanContext.SpanID() {
		t.Errorf("publication's parent %s; want the tick %s", pubs[0].Parent.SpanID(), ticks[0].SpanContext.SpanID())
	}

	conn, err := grpc.NewClient(a.ExtProcAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sctx, scancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, header.Source, "edge-us"), 5*time.Second)
	defer scancel()
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(sctx)
	if err != nil {
		t.Fatal(err)
	}
	hs := &corev3.HeaderMap{}
	for _, kv := range [][2]string{
		{":method", "POST"},
		{":path", "/v1/chat/completions"},
		{"x-request-id", "app-1"},
		{header.Model, "llama3-8b"},
		{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	} {
		hs.Headers = append(hs.Headers, &corev3.HeaderValue{Key: kv[0], RawValue: []byte(kv[1])})
	}
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: hs},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(byName("ilb.route")) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	routes := byName("ilb.route")
	if len(routes) != 1 || routes[0].SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || routes[0].Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("route spans %+v; want one, child of the request's context", routes)
	}
}
