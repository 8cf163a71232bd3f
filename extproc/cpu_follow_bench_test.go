//go:build unix

package extproc_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// BenchmarkFollowCPU measures what following a response costs: ILB's
// server CPU per streamed request whose claim (max_tokens 4096) is past
// an ordinary request's, so that ILB asks for the response body
// (STREAMED) and reads each event, against the floor (an empty CONTINUE
// server) answering the same messages. The client plays Envoy: request
// headers, the buffered body, the response headers, then tokens events
// of a vLLM chat stream, one message each as Envoy sends a chunk per
// upstream read, each awaiting its answer, the last with the usage
// object and end_of_stream. Rounds and pinning as BenchmarkPickerCPU.
//
//	go test -run '^$' -bench FollowCPU -benchtime 2000x ./extproc/
func BenchmarkFollowCPU(b *testing.B) {
	ilb, floor, serverCPU, restore := startPinnedPair(b, childILB, childFloor)
	defer restore()
	var results []cpuResult
	for _, tokens := range []int{64, 256} {
		ilb.follow, floor.follow = tokens, tokens
		name := fmt.Sprintf("tokens=%d/streams=16", tokens)
		b.Run(name, func(b *testing.B) {
			r := compareRounds(b, name, ilb, floor, followBody, 16)
			b.ReportMetric(float64(r.ilb.Nanoseconds())/1e3/float64(tokens+1), "ilb-us/event")
			b.ReportMetric(float64(r.floor.Nanoseconds())/1e3/float64(tokens+1), "floor-us/event")
			if b.N >= 100 {
				results = append(results, r)
			}
		})
	}
	if len(results) > 0 {
		var sb strings.Builder
		fmt.Fprintf(&sb, "\nfollowed response CPU per request (STREAMED response body, one message per event; child processes pinned to CPU %s), ILB vs the CONTINUE floor\n", serverCPU)
		fmt.Fprintf(&sb, "%-22s %10s %10s %9s %13s\n", "", "ILB", "floor", "ILB/floor", "rounds")
		for _, r := range results {
			fmt.Fprintf(&sb, "%-22s %8.1fus %8.1fus %9.2f %6.2f-%-6.2f\n", r.name,
				float64(r.ilb.Nanoseconds())/1e3, float64(r.floor.Nanoseconds())/1e3, r.ratio, r.low, r.high)
		}
		fmt.Print(sb.String())
	}
}

// followBody is a streamed chat request of 1 KiB whose max_tokens puts
// its claim past an ordinary request's.
var followBody = []byte(strings.Replace(string(chatBody(1<<10)), `"max_tokens":256`, `"max_tokens":4096`, 1))

// followEvent is one event of a vLLM chat stream.
const followEvent = `data: {"id":"chatcmpl-0123456789abcdef","object":"chat.completion.chunk","created":1764547200,"model":"llama-3.1-8b-instruct","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}]}` + "\n\n"

// playFollowed is one request whose response ILB follows: buffered, then
// the events.
func (c *child) playFollowed(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.client.Process(ctx)
	if err != nil {
		return fmt.Errorf("open stream: %w", err)
	}
	msgs := c.buffered(body)
	event := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(followEvent)}}}
	for range c.follow {
		msgs = append(msgs, event)
	}
	last := fmt.Sprintf("data: {\"id\":\"chatcmpl-0123456789abcdef\",\"choices\":[],\"usage\":{\"prompt_tokens\":300,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", c.follow)
	msgs = append(msgs, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(last), EndOfStream: true}}})
	return exchangeAll(st, msgs)
}
