package envoysim

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// keepAliveRounds is how many times the first keep-alive sequence (the
// one that panicked envoysim) runs on one connection: 10,000 without a
// panic or a dropped connection; the others run a tenth as often.
const keepAliveRounds = 10000

// denyProcessor answers "x-deny: headers" with a 404 on the request
// headers and "x-deny: body" with a 403 on the buffered request body, and
// lets everything else through.
func denyProcessor(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	immediate := func(code typev3.StatusCode) []*extprocv3.ProcessingResponse {
		return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: code}, Body: []byte(`{"error":"denied"}`),
		}}}}
	}
	if rh := req.GetRequestHeaders(); rh != nil {
		if v, _ := protoHeader(rh.GetHeaders(), "x-deny"); v == "headers" {
			return immediate(typev3.StatusCode_NotFound), nil
		}
	}
	if rb := req.GetRequestBody(); rb != nil && strings.Contains(string(rb.GetBody()), `"deny"`) {
		return immediate(typev3.StatusCode_Forbidden), nil
	}
	return continueAll(ctx, req)
}

// keepAliveStep is one request of a sequence and the status it must get.
type keepAliveStep struct {
	deny   string // x-deny header value
	body   string
	status int
}

// TestKeepAlive: requests decided on headers alone (the body never read),
// on the buffered body, and forwarded, mixed on one HTTP/1.1 connection,
// keep the connection as Envoy does (the body arrived with the headers, so
// the request is complete when the reply goes: ActiveStream::encodeHeaders
// drains the connection only when remoteDecodeComplete is false); over
// h2c, one connection carries them all.
func TestKeepAlive(t *testing.T) {
	buffered := &extprocfilterv3.ProcessingMode{RequestBodyMode: extprocfilterv3.ProcessingMode_BUFFERED}
	// The default message_timeout (200 ms) answered 504 to 1 of 20,000
	// requests on a loaded machine: this test is about connections, not
	// timeouts.
	patient := durationpb.New(time.Minute)
	body := `{"model":"m","prompt":"hello"}`
	for _, c := range []struct {
		name   string
		rounds int
		steps  []keepAliveStep
	}{
		{"decided on headers, then forwarded", keepAliveRounds, []keepAliveStep{{deny: "headers", body: body, status: 404}, {body: body, status: 200}}},
		{"decided on body, then forwarded", keepAliveRounds / 10, []keepAliveStep{{body: `{"model":"deny"}`, status: 403}, {body: body, status: 200}}},
		{"decided on headers twice, then on body", keepAliveRounds / 10, []keepAliveStep{{deny: "headers", body: body, status: 404}, {deny: "headers", status: 404}, {body: `{"model":"deny"}`, status: 403}}},
	} {
		t.Run("http1/"+c.name, func(t *testing.T) {
			h, _ := extProcHarness(t, denyProcessor, &extprocfilterv3.ExternalProcessor{ProcessingMode: buffered, MessageTimeout: patient})
			conn, err := net.Dial("tcp", strings.TrimPrefix(h.url("main", ""), "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			br := bufio.NewReader(conn)
			for i := range c.rounds {
				for j, st := range c.steps {
					status, closing := h1RoundTrip(t, conn, br, st)
					if status != st.status || closing {
						t.Fatalf("round %d step %d: status %d close %v, want %d on a kept connection", i, j, status, closing, st.status)
					}
				}
			}
		})
		t.Run("h2c/"+c.name, func(t *testing.T) {
			h, _ := extProcHarness(t, denyProcessor, &extprocfilterv3.ExternalProcessor{ProcessingMode: buffered, MessageTimeout: patient})
			p := new(http.Protocols)
			p.SetUnencryptedHTTP2(true)
			client := &http.Client{Transport: &http.Transport{Protocols: p, TLSClientConfig: &tls.Config{}}}
			defer client.CloseIdleConnections()
			conns := map[net.Conn]bool{}
			trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) { conns[ci.Conn] = true }}
			for i := range c.rounds / 10 { // h2c streams are independent: fewer rounds say as much
				for j, st := range c.steps {
					req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodPost, h.url("main", "/v1/completions"), strings.NewReader(st.body))
					if err != nil {
						t.Fatal(err)
					}
					if st.deny != "" {
						req.Header.Set("x-deny", st.deny)
					}
					resp, err := client.Do(req)
					if err != nil {
						t.Fatalf("round %d step %d: %v", i, j, err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != st.status || resp.ProtoMajor != 2 {
						t.Fatalf("round %d step %d: status %d over HTTP/%d, want %d over h2c", i, j, resp.StatusCode, resp.ProtoMajor, st.status)
					}
				}
			}
			if len(conns) != 1 {
				t.Errorf("%d connections, want 1", len(conns))
			}
		})
	}
}

// TestReplyBeforeRequestComplete: a reply decided on headers while the
// client is still sending its body closes an HTTP/1.1 connection with
// "connection: close" (ActiveStream::encodeHeaders: drain_state_ Closing
// when the request is not complete), never a silent drop.
func TestReplyBeforeRequestComplete(t *testing.T) {
	h, _ := extProcHarness(t, denyProcessor, &extprocfilterv3.ExternalProcessor{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url("main", ""), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	// 100 bytes announced, 10 sent: the rest never comes.
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nx-deny: headers\r\nContent-Length: 100\r\n\r\n0123456789")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusNotFound || !resp.Close {
		t.Fatalf("status %d close %v, want 404 with connection: close", resp.StatusCode, resp.Close)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) && !isConnReset(err) {
		t.Errorf("after the reply: %v, want the connection closed", err)
	}
}

func isConnReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

// h1RoundTrip writes st as one HTTP/1.1 request (headers and body in one
// write) and reads its response: its status, and whether it closes the
// connection.
func h1RoundTrip(t *testing.T, conn net.Conn, br *bufio.Reader, st keepAliveStep) (status int, closing bool) {
	t.Helper()
	var deny string
	if st.deny != "" {
		deny = "x-deny: " + st.deny + "\r\n"
	}
	if _, err := fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s", len(st.body), deny, st.body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("connection dropped: %v", err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Close
}
