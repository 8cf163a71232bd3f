//go:build linux

package extproc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ilbproject/ilb/extproc/extproctest"
	"github.com/ilbproject/ilb/header"
)

// BenchmarkPickerCPU is BenchmarkServerCPU for ILB as an InferencePool's
// endpoint picker: ILB's picker listener (a source with routing picker,
// the pool's replicas live) against a floor that answers the same
// full-duplex stream with the least a picker must send (each body chunk
// echoed as a StreamedBodyResponse, every other message an empty answer
// of its kind). The client plays what Envoy sends with istiod's pool
// wiring: request headers, the body in 16 KiB chunks without waiting,
// then (once the headers' answer and the body's end came back) the
// response headers with the served host in envoy.lb, and a streamed
// completion of tokens SSE events (one message each, each answered before
// the next, as tokens arrive) plus a usage event and [DONE]. Full duplex
// sends many more messages than BUFFERED; msgs/req reports them. Both
// servers are child processes pinned to the last CPU (the client to the
// others, when the machine has two or more), taking turns in ten rounds;
// the ratio is the median of the rounds' ratios.
//
//	go test -run '^$' -bench PickerCPU -benchtime 10000x ./extproc/
func BenchmarkPickerCPU(b *testing.B) {
	ilb, floor, serverCPU, restore := startPinnedPair(b, childPicker, childDuplexFloor)
	defer restore()
	ilb.duplex, floor.duplex = true, true
	const tokens = 32 // playDuplex streams 32 tokens (drive)
	var results []cpuResult
	for _, size := range []int{1 << 10, 256 << 10} {
		body := chatBody(size)
		for _, streams := range []int{16, 64} {
			name := fmt.Sprintf("body=%dKiB/streams=%d", size>>10, streams)
			b.Run(name, func(b *testing.B) {
				r := compareRounds(b, name, ilb, floor, body, streams)
				b.ReportMetric(float64(duplexMessages(len(body), tokens)), "msgs/req")
				if b.N >= 100 {
					results = append(results, r)
				}
			})
		}
	}
	if len(results) > 0 {
		var sb strings.Builder
		fmt.Fprintf(&sb, "\nendpoint-picker CPU per request (full duplex, %d tokens streamed; child processes pinned to CPU %s), ILB vs the echo floor\n", tokens, serverCPU)
		fmt.Fprintf(&sb, "%-26s %10s %10s %9s %13s %9s %7s\n", "", "ILB", "floor", "ILB/floor", "rounds", "msgs/req", "target")
		for _, r := range results {
			size := len(chatBody(1 << 10))
			if strings.HasPrefix(r.name, "body=256KiB") {
				size = len(chatBody(256 << 10))
			}
			fmt.Fprintf(&sb, "%-26s %8.1fus %8.1fus %9.2f %6.2f-%-6.2f %9d %7s\n", r.name,
				float64(r.ilb.Nanoseconds())/1e3, float64(r.floor.Nanoseconds())/1e3, r.ratio, r.low, r.high, duplexMessages(size, tokens), "1.3")
		}
		fmt.Fprintf(&sb, "ILB/floor: the median of %d rounds' ratios (ILB and the floor back to back); CPU per request over all rounds\n", rounds)
		fmt.Print(sb.String())
	}
}

// duplexChunkSize is the size of the body chunks the client sends.
const duplexChunkSize = 16 << 10

// duplexMessages is how many messages the client sends per request.
func duplexMessages(body, tokens int) int {
	return 1 + (body+duplexChunkSize-1)/duplexChunkSize + 1 + tokens + 2
}

// startPinnedPair starts an ILB child and a floor child pinned to the
// last CPU, and pins this process's threads to the others (restore undoes
// that); cpu is the children's CPU ("" on one CPU: no pinning).
func startPinnedPair(b *testing.B, ilbKind, floorKind string) (ilb, floor *child, cpu string, restore func()) {
	b.Helper()
	restore = func() {}
	if n := runtime.NumCPU(); n >= 2 {
		cpu = strconv.Itoa(n - 1)
		restore = pinClient(b, n-1)
	}
	return startPinnedChild(b, ilbKind, cpu), startPinnedChild(b, floorKind, cpu), cpu, restore
}

// startPinnedChild is startChild with the child pinned to cpu ("" none).
func startPinnedChild(b *testing.B, kind, cpu string) *child {
	b.Helper()
	if cpu != "" {
		b.Setenv(childEnv+"_CPU", cpu)
	}
	return startChild(b, kind)
}

// pinClient pins every thread of this process but to the CPUs before
// server, and returns the undo.
func pinClient(b *testing.B, server int) func() {
	b.Helper()
	var all, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		b.Fatal(err)
	}
	for i := range server {
		set.Set(i)
	}
	if err := setThreadsAffinity(set); err != nil {
		b.Fatal(err)
	}
	return func() { _ = setThreadsAffinity(all) }
}

// pinProcess pins every thread of this process to the CPUs listed
// ("1", "0,1"); threads started later inherit it from their creator.
func pinProcess(cpus string) error {
	var set unix.CPUSet
	for f := range strings.SplitSeq(cpus, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("cpu %q: %w", f, err)
		}
		set.Set(n)
	}
	return setThreadsAffinity(set)
}

func setThreadsAffinity(set unix.CPUSet) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("affinity of thread %d: %w", tid, err)
		}
	}
	return nil
}

// playDuplex is one request as Envoy's ext_proc filter sends it with
// istiod's pool wiring (full duplex both ways).
func (c *child) playDuplex(ctx context.Context, body []byte, tokens int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.client.Process(ctx)
	if err != nil {
		return fmt.Errorf("open stream: %w", err)
	}
	id := "bench-" + strconv.FormatInt(c.seq.Add(1), 10)
	send := func(m *extprocv3.ProcessingRequest) error {
		if err := st.Send(m); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		return nil
	}
	if err := send(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: extproctest.Headers(
			":authority", "inference-gateway.example.com", ":path", "/v1/chat/completions", ":method", "POST", ":scheme", "https",
			"content-type", "application/json", "content-length", strconv.Itoa(len(body)), "accept", "*/*",
			"user-agent", "OpenAI/Python 1.54.0", "authorization", "Bearer sk-0123456789abcdef", "x-forwarded-proto", "https",
			header.RequestID, id,
		)}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{
			RequestBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		},
	}); err != nil {
		return err
	}
	for off := 0; off < len(body); off += duplexChunkSize {
		end := min(off+duplexChunkSize, len(body))
		if err := send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
			Body: body[off:end], EndOfStream: end == len(body),
		}}}); err != nil {
			return err
		}
	}
	served := "10.0.0.7:8000"
	for headers, eos := false, false; !headers || !eos; {
		r, err := st.Recv()
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		switch {
		case r.GetImmediateResponse() != nil:
			return fmt.Errorf("the server answered itself: %d %s", r.GetImmediateResponse().GetStatus().GetCode(), r.GetImmediateResponse().GetBody())
		case r.GetRequestHeaders() != nil:
			headers = true
			if ep := r.GetDynamicMetadata().GetFields()[header.LBNamespace].GetStructValue().GetFields()[header.DestinationEndpoint].GetStringValue(); ep != "" {
				served, _, _ = strings.Cut(ep, ",")
			}
		case r.GetRequestBody() != nil:
			sr := r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
			if sr == nil {
				return errors.New("a body answer without streamed_response")
			}
			eos = sr.GetEndOfStream()
		default:
			return fmt.Errorf("unexpected answer %v", r)
		}
	}
	exchange := func(m *extprocv3.ProcessingRequest) error {
		if err := send(m); err != nil {
			return err
		}
		if _, err := st.Recv(); err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		return nil
	}
	if err := exchange(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: extproctest.Headers(
			":status", "200", "content-type", "text/event-stream", "date", "Tue, 01 Dec 2026 12:00:00 GMT", "server", "uvicorn",
			"x-envoy-upstream-service-time", "12",
		)}},
		MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{header.LBNamespace: {Fields: map[string]*structpb.Value{
			header.DestinationEndpointServed: structpb.NewStringValue(served),
		}}}},
	}); err != nil {
		return err
	}
	chunk := func(data string, eos bool) *extprocv3.ProcessingRequest {
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(data), EndOfStream: eos}}}
	}
	for i := range tokens {
		ev := fmt.Sprintf(`data: {"id":"chatcmpl-%s","object":"chat.completion.chunk","created":1764590400,"model":"llama3-8b","choices":[{"index":0,"delta":{"content":" token%d"},"finish_reason":null}]}`+"\n\n", id, i)
		if err := exchange(chunk(ev, false)); err != nil {
			return err
		}
	}
	usage := fmt.Sprintf(`data: {"id":"chatcmpl-%s","object":"chat.completion.chunk","created":1764590400,"model":"llama3-8b","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", id, len(body)/4, tokens, len(body)/4+tokens)
	if err := exchange(chunk(usage, false)); err != nil {
		return err
	}
	if err := exchange(chunk("data: [DONE]\n\n", true)); err != nil {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("stream end: %w", err)
	}
	return nil
}
