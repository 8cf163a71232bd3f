package extproc_test

import (
	"context"
	"strconv"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/extproc/extproctest"
)

// BenchmarkStream plays whole requests through a real ext_proc gRPC stream
// on loopback (request headers, body, response headers), without tracing
// and with a sampling tracer provider that exports nowhere: the cost of
// the decision span and the forwarded traceparent on top of the stream.
//
//	go test -run '^$' -bench Stream -benchmem ./extproc/
func BenchmarkStream(b *testing.B) {
	for _, tc := range []struct {
		name  string
		trace bool
	}{{"tracing=off", false}, {"tracing=on", true}} {
		b.Run(tc.name, func(b *testing.B) {
			h := startWith(b, true, func(o *extproc.Options) {
				if tc.trace {
					tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
					b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
					o.TracerProvider = tp
				}
			})
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				extproctest.Play(b, h.client, extproctest.Exchange{
					Source: "edge-us", RequestID: "bench-" + strconv.Itoa(i), Body: extproctest.Chat("llama3-8b"),
					Served: "us-east-vllm", Version: h.w.Version(),
				})
			}
		})
	}
}
