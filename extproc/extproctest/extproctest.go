// Package extproctest plays Envoy's side of ext_proc in tests: it serves
// an extproc.Server on loopback and sends requests through a real gRPC
// stream, so the server's decision log, metrics and spans fill as in
// production.
package extproctest

import (
	"context"
	"net"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/header"
)

// Serve serves srv on a loopback port until the test ends and returns a
// client connected to it.
func Serve(t testing.TB, srv *extproc.Server) extprocv3.ExternalProcessorClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return extprocv3.NewExternalProcessorClient(conn)
}

// Exchange is one request as Envoy sends it to ext_proc.
type Exchange struct {
	Source    string // the x-ilb-source stream metadata
	RequestID string // x-request-id
	Body      string // the request body (JSON)
	// Served, Version and Host are the response headers Envoy's route
	// adds (the served cluster, the weights version, the upstream host);
	// the response headers are sent only when ILB did not answer itself.
	Served, Version, Host string
}

// Play sends x's request headers, body and response headers (see Send).
// The server handles a message before answering it, so the decision
// record is complete when Play returns.
func Play(t testing.TB, client extprocv3.ExternalProcessorClient, x Exchange) []*extprocv3.ProcessingResponse {
	t.Helper()
	host := x.Host
	if host == "" {
		host = "10.0.0.7:8000"
	}
	return Send(t, client, x.Source,
		&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: Headers(":method", "POST", ":path", "/v1/chat/completions", ":authority", "ilb", header.RequestID, x.RequestID),
		}}},
		&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(x.Body), EndOfStream: true}}},
		&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: Headers(":status", "200", header.ServedCluster, x.Served, header.WeightsVersion, x.Version, header.UpstreamHost, host),
		}}},
	)
}

// Send opens one stream as source ("" sends no source metadata) and sends
// msgs in order, reading one answer after each; it stops after an
// ImmediateResponse, as Envoy does, half-closes the stream, waits for the
// server to end it, and returns the answers.
func Send(t testing.TB, client extprocv3.ExternalProcessorClient, source string, msgs ...*extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if source != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, header.Source, source)
	}
	stream, err := client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*extprocv3.ProcessingResponse
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp)
		if resp.GetImmediateResponse() != nil {
			break
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	// Wait for the server to end the stream: what it does as a stream
	// ends (a request no longer awaiting its response, its replica
	// booking released) is done when Send returns, so the next request
	// sees it.
	for {
		if _, err := stream.Recv(); err != nil {
			break
		}
	}
	return out
}

// Headers builds a header map from key, value pairs (values as raw_value,
// as Envoy sends them).
func Headers(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

// Chat is a chat completion request body for model.
func Chat(model string) string {
	return `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}],"max_tokens":16}`
}
