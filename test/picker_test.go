package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/header"
)

// TestEndpointPicker: ILB as the endpoint picker of an InferencePool
// (a source with routing "picker"), played the exact ext_proc stream
// istiod configures for a pool's picker (request and response bodies
// FULL_DUPLEX_STREAMED, no initial metadata) on the source's own
// listener, against the demo world's simulated engines. Every request is
// decided from its body: the request headers' answer names one replica
// of the pool's engine cluster in x-gateway-destination-endpoint and in
// envoy.lb metadata (the same value), does not make Envoy match the
// route again, and the body goes back whole; a stream claiming another
// source is still the picker's; the served endpoint Envoy reports back
// (envoy.lb x-gateway-destination-endpoint-served) reaches the decision
// record.
func TestEndpointPicker(t *testing.T) {
	s := startWorld(t, nil, func(c *config.Config) {
		c.Sources = append(c.Sources, config.Source{
			Name: "gateway-us", Region: "us-east", AllowedRegions: []string{"us-east"}, FailMode: config.FailClosed,
			DefaultModel: "llama-3.1-8b-instruct", DefaultPriority: "standard",
			Routing: config.RoutingPicker, Picker: &config.SourcePicker{Listen: "127.0.0.1:0", Cluster: "us-east-vllm"},
		})
	})
	pool, _ := s.App.Config.Cluster("us-east-vllm")
	addr := s.App.PickerAddr("gateway-us")
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := extprocv3.NewExternalProcessorClient(conn)
	waitUntil(t, "the pool's replicas known to ext_proc", 30*time.Second, func() bool {
		_, ep := playPicker(t, client, "", "warm-up", `{"model":"llama3-8b","messages":[{"role":"user","content":"hi"}]}`)
		return ep != ""
	})
	picked := map[string]int{}
	for i := range 40 {
		id := fmt.Sprintf("pick-%d", i)
		claim := ""
		if i%4 == 0 {
			claim = "edge-eu" // a peer naming another source: still the picker's
		}
		body := fmt.Sprintf(`{"model":"qwen-7b","messages":[{"role":"user","content":"question %d %s"}],"stream":%v}`, i, strings.Repeat("context ", 200), i%2 == 0)
		resp, list := playPicker(t, client, claim, id, body)
		// The picked replica first, then fallbacks (GIE's comma list).
		eps := strings.Split(list, ",")
		for _, e := range eps {
			if !slices.Contains(pool.Endpoints, e) {
				t.Fatalf("request %s: picked %q, want the pool's replicas %v (answers %v)", id, list, pool.Endpoints, resp)
			}
		}
		ep := eps[0]
		picked[ep]++
		if strings.Join(resp, ",") != "headers,body,response-headers,response-body" {
			t.Fatalf("request %s: answers %v, want the headers' answer, the body, the response headers and the response chunk", id, resp)
		}
		rec, ok := s.App.ExtProc.Decisions().Get(id)
		if !ok {
			t.Fatalf("request %s: no decision record", id)
		}
		if rec.Source != "gateway-us" || rec.Chosen != "us-east-vllm" || rec.Replica == nil || rec.Replica.Chosen != ep || rec.UpstreamHost != ep {
			t.Fatalf("request %s: record source %s chosen %s replica %+v upstream %q; want gateway-us, us-east-vllm, %s served", id, rec.Source, rec.Chosen, rec.Replica, rec.UpstreamHost, ep)
		}
	}
	t.Logf("40 requests picked %v", picked)
}

// playPicker plays one request on a picker's stream as Envoy does in
// full-duplex mode (the body in two chunks sent without waiting, the
// response headers with the served endpoint in envoy.lb metadata, one
// response chunk) and returns the answers' kinds and the endpoint list
// picked ("" when ILB picked none); Envoy serves its first.
func playPicker(t *testing.T, client extprocv3.ExternalProcessorClient, claim, id, body string) ([]string, string) {
	t.Helper()
	return playPickerMode(t, client, &extprocfilterv3.ProcessingMode{
		RequestBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
	}, claim, id, body)
}

// playPickerMode is playPicker with the body modes of mode (what the
// protocol_config of Envoy's first message says).
func playPickerMode(t *testing.T, client extprocv3.ExternalProcessorClient, mode *extprocfilterv3.ProcessingMode, claim, id, body string) ([]string, string) {
	t.Helper()
	ctx := context.Background()
	if claim != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, header.Source, claim)
	}
	stream, err := client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hdrs := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(
			":method", "POST", ":path", "/v1/chat/completions", ":authority", "gateway", header.RequestID, id, "content-type", "application/json")}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: mode.GetRequestBodyMode(), ResponseBodyMode: mode.GetResponseBodyMode()},
	}
	send := func(m *extprocv3.ProcessingRequest) {
		if err := stream.Send(m); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
	}
	send(hdrs)
	half := len(body) / 2
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body[:half])}}})
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body[half:]), EndOfStream: true}}})
	// The headers' answer, then the body's: read them before the
	// response comes, as Envoy forwards the request only then.
	var kinds []string
	var endpoint, echoed string
	for len(kinds) == 0 || kinds[len(kinds)-1] == "headers" || kinds[len(kinds)-1] == "body" && !strings.HasSuffix(echoed, body[half:]) {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("request %s: %v (answers so far %v)", id, err, kinds)
		}
		switch {
		case r.GetImmediateResponse() != nil:
			_ = stream.CloseSend()
			return append(kinds, fmt.Sprintf("immediate %d", r.GetImmediateResponse().GetStatus().GetCode())), ""
		case r.GetRequestHeaders() != nil:
			kinds = append(kinds, "headers")
			c := r.GetRequestHeaders().GetResponse()
			if c.GetClearRouteCache() {
				t.Errorf("request %s: the picker's answer clears the route cache: the gateway already routed it to the pool", id)
			}
			var hdr string
			for _, h := range c.GetHeaderMutation().GetSetHeaders() {
				if h.GetHeader().GetKey() == header.DestinationEndpoint {
					hdr = string(h.GetHeader().GetRawValue())
				}
			}
			endpoint = r.GetDynamicMetadata().GetFields()[header.LBNamespace].GetStructValue().GetFields()[header.DestinationEndpoint].GetStringValue()
			if hdr != endpoint {
				t.Errorf("request %s: header %s %q, metadata %q: GIE's protocol wants the same", id, header.DestinationEndpoint, hdr, endpoint)
			}
		case r.GetRequestBody() != nil:
			kinds = append(kinds, "body")
			echoed += string(r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody())
		default:
			t.Fatalf("request %s: unexpected answer %v", id, r)
		}
	}
	if echoed != body {
		t.Errorf("request %s: body sent back %d bytes, want the %d sent", id, len(echoed), len(body))
	}
	send(&extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(":status", "200")}},
		MetadataContext: servedMetadata(strings.Split(endpoint, ",")[0]),
	})
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte("data: [DONE]\n\n"), EndOfStream: true}}})
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return kinds, endpoint
		}
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case r.GetResponseHeaders() != nil:
			kinds = append(kinds, "response-headers")
		case r.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse() != nil:
			kinds = append(kinds, "response-body")
		default:
			t.Fatalf("request %s: unexpected answer on the response path %v", id, r)
		}
	}
}

// servedMetadata is the metadata_context Envoy sends with the response
// when the override_host policy wrote the host it chose
// (selected_host_key envoy.lb x-gateway-destination-endpoint-served, a
// forwarding namespace of istiod's filter).
func servedMetadata(endpoint string) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		header.LBNamespace: {Fields: map[string]*structpb.Value{header.DestinationEndpointServed: structpb.NewStringValue(endpoint)}},
	}}
}

// headerMap builds a header map the way Envoy sends it: values in
// raw_value.
func headerMap(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}
