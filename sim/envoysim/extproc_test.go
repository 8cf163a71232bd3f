package envoysim

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// extProcHarness starts one upstream "a", a listener "main" with one ext_proc
// filter configured by cfg, and routes everything to "a".
func extProcHarness(t *testing.T, handler procHandler, cfg *extprocfilterv3.ExternalProcessor) (*harness, *upstream) {
	t.Helper()
	h := newHarness(t, handler)
	up := h.upstream("a", nil)
	h.push(append(h.clusters(),
		httpListener("main", "routes", extProc("ilb", cfg)),
		routeConfig("routes", vhost("all", []string{"*"}, routeTo("a"))))...)
	h.start(nil)
	return h, up
}

// TestSetHeadersValueAndRawValue: only raw_value is read; value alone sets
// an empty value; both set is an error answered with status_on_error, even
// with failure_mode_allow (ext_proc.cc onReceiveMessage: mutation errors are
// not subject to failure_mode_allow).
func TestSetHeadersValueAndRawValue(t *testing.T) {
	for _, c := range []struct {
		name     string
		hv       *corev3.HeaderValue
		failOpen bool
		status   int
		want     string
	}{
		{name: "raw_value", hv: &corev3.HeaderValue{Key: "x-model", RawValue: []byte("m1")}, status: 200, want: "m1"},
		{name: "value is ignored", hv: &corev3.HeaderValue{Key: "x-model", Value: "m1"}, status: 200, want: ""},
		{name: "both is an error", hv: &corev3.HeaderValue{Key: "x-model", Value: "m1", RawValue: []byte("m1")}, status: 500},
		{name: "both is an error when failing open", hv: &corev3.HeaderValue{Key: "x-model", Value: "m1", RawValue: []byte("m1")}, failOpen: true, status: 500},
		{name: "invalid value", hv: &corev3.HeaderValue{Key: "x-model", RawValue: []byte("a\nb")}, status: 500},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, up := extProcHarness(t, onRequestHeaders(func(*extprocv3.ProcessingRequest) *extprocv3.CommonResponse {
				return &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: c.hv}}}}
			}), &extprocfilterv3.ExternalProcessor{FailureModeAllow: c.failOpen})
			resp := do(t, "GET", h.url("main", "/"), nil, "")
			if resp.status != c.status {
				t.Fatalf("status %d, want %d", resp.status, c.status)
			}
			if c.status != 200 {
				if resp.body != "" || resp.header.Get("content-type") != "" || len(up.requests()) != 0 {
					t.Errorf("error reply body %q content-type %q upstream requests %d", resp.body, resp.header.Get("content-type"), len(up.requests()))
				}
				return
			}
			got := up.last(t).header
			if v, ok := got["X-Model"]; !ok || v[0] != c.want {
				t.Errorf("upstream x-model = %v, want %q", v, c.want)
			}
		})
	}
}

// TestMutationRules: with default rules host, :authority, :method, :scheme
// and x-envoy-* cannot be set and ':' headers or host cannot be removed;
// refused mutations are ignored and counted, or errors with disallow_is_error
// (facts §4).
func TestMutationRules(t *testing.T) {
	blocked := &extprocv3.HeaderMutation{
		SetHeaders: []*corev3.HeaderValueOption{
			setHeader(":authority", "evil.example.com"), setHeader("host", "evil"), setHeader(":method", "DELETE"),
			setHeader(":scheme", "https"), setHeader("x-envoy-upstream-rq-timeout-ms", "1"), setHeader("x-ok", "1"),
			setHeader(":path", "/rewritten"),
		},
		RemoveHeaders: []string{":path", "host"},
	}
	for _, c := range []struct {
		name     string
		rules    *mutationrulesv3.HeaderMutationRules
		status   int
		rejected uint64
		host     string
		method   string
	}{
		{name: "default rules ignore", status: 200, rejected: 7, host: "orig.example.com", method: "GET"},
		{name: "disallow_is_error", rules: &mutationrulesv3.HeaderMutationRules{DisallowIsError: wrapperspb.Bool(true)}, status: 503, rejected: 1},
		{name: "allow_all_routing", rules: &mutationrulesv3.HeaderMutationRules{AllowAllRouting: wrapperspb.Bool(true)}, status: 200, rejected: 3, host: "evil.example.com", method: "DELETE"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, up := extProcHarness(t, onRequestHeaders(func(*extprocv3.ProcessingRequest) *extprocv3.CommonResponse {
				return &extprocv3.CommonResponse{HeaderMutation: blocked}
			}), &extprocfilterv3.ExternalProcessor{MutationRules: c.rules, StatusOnError: &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable}})
			resp := do(t, "GET", h.url("main", "/orig"), map[string]string{"host": "orig.example.com"}, "")
			if resp.status != c.status {
				t.Fatalf("status %d, want %d", resp.status, c.status)
			}
			if got := h.env.Stats().ExtProc.RejectedHeaderMutations; got != c.rejected {
				t.Errorf("rejected = %d, want %d", got, c.rejected)
			}
			if c.status != 200 {
				return
			}
			r := up.last(t)
			if r.host != c.host || r.method != c.method || r.path != "/rewritten" || r.header.Get("x-ok") != "1" || r.header.Get("x-envoy-upstream-rq-timeout-ms") != "" {
				t.Errorf("upstream saw host %q method %q path %q headers %v", r.host, r.method, r.path, r.header)
			}
		})
	}
}

// TestEarlyHeaderMutation removes client headers before ext_proc and the
// router see them, and appends headers.
func TestEarlyHeaderMutation(t *testing.T) {
	h := newHarness(t, nil)
	up := h.upstream("a", nil)
	l := httpListener("main", "routes", extProc("ilb", &extprocfilterv3.ExternalProcessor{}))
	setEarly(t, l, "x-internal-secret", "x-drop-")
	h.push(append(h.clusters(), l, routeConfig("routes", vhost("all", []string{"*"}, routeTo("a"))))...)
	h.start(nil)
	do(t, "GET", h.url("main", "/"), map[string]string{"X-Internal-Secret": "s", "x-drop-me": "1", "X-DROP-too": "2", "x-keep": "k"}, "")
	got := up.last(t).header
	if got.Get("x-internal-secret") != "" || got.Get("x-drop-me") != "" || got.Get("x-drop-too") != "" || got.Get("x-keep") != "k" || got.Get("x-early") != "k" {
		t.Errorf("upstream headers %v", got)
	}
	rh := h.proc.requests()[0].GetRequestHeaders().GetHeaders()
	for _, k := range []string{"x-internal-secret", "x-drop-me", "x-drop-too"} {
		if _, ok := protoHeader(rh, k); ok {
			t.Errorf("ext_proc saw %s", k)
		}
	}
}

// TestExtProcFailures covers gRPC errors, an unreachable processor, message
// timeouts and spurious messages, failing closed and open (facts §3, §4).
func TestExtProcFailures(t *testing.T) {
	grpcError := func(context.Context, *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		return nil, status.Error(codes.Unavailable, "processor down")
	}
	slow := func(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		sleepCtx(ctx, 500*time.Millisecond)
		return continueAll(ctx, req)
	}
	spurious := func(_ context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		if req.GetRequestHeaders() != nil {
			return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}}, nil
		}
		return continueAll(context.Background(), req)
	}
	closes := func(context.Context, *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		return nil, errEndStream
	}
	timeout := durationpb.New(50 * time.Millisecond)
	for _, c := range []struct {
		name     string
		handler  procHandler
		failOpen bool
		status   int
		check    func(t *testing.T, st Stats)
	}{
		{name: "grpc error fail closed", handler: grpcError, status: 503, check: func(t *testing.T, st Stats) {
			if st.ExtProc.StreamsFailed != 1 {
				t.Errorf("StreamsFailed = %d", st.ExtProc.StreamsFailed)
			}
		}},
		{name: "grpc error fail open", handler: grpcError, failOpen: true, status: 200, check: func(t *testing.T, st Stats) {
			if st.ExtProc.FailureModeAllowed != 1 {
				t.Errorf("FailureModeAllowed = %d", st.ExtProc.FailureModeAllowed)
			}
		}},
		{name: "timeout fail closed is 504", handler: slow, status: 504, check: func(t *testing.T, st Stats) {
			if st.ExtProc.MessageTimeouts != 1 {
				t.Errorf("MessageTimeouts = %d", st.ExtProc.MessageTimeouts)
			}
		}},
		{name: "timeout fail open continues", handler: slow, failOpen: true, status: 200},
		{name: "spurious fail closed", handler: spurious, status: 503, check: func(t *testing.T, st Stats) {
			if st.ExtProc.SpuriousMessages != 1 {
				t.Errorf("SpuriousMessages = %d", st.ExtProc.SpuriousMessages)
			}
		}},
		{name: "spurious fail open", handler: spurious, failOpen: true, status: 200},
		{name: "server closes stream continues", handler: closes, status: 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, up := extProcHarness(t, c.handler, &extprocfilterv3.ExternalProcessor{
				FailureModeAllow: c.failOpen,
				MessageTimeout:   timeout,
				StatusOnError:    &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
			})
			start := time.Now()
			resp := do(t, "GET", h.url("main", "/"), nil, "")
			if resp.status != c.status {
				t.Fatalf("status %d, want %d (%q)", resp.status, c.status, resp.body)
			}
			if c.status != 200 && (resp.body != "" || resp.header.Get("content-type") != "") {
				t.Errorf("error reply has body %q content-type %q", resp.body, resp.header.Get("content-type"))
			}
			if c.status == 200 && len(up.requests()) != 1 {
				t.Errorf("upstream got %d requests", len(up.requests()))
			}
			if time.Since(start) > 400*time.Millisecond {
				t.Errorf("took %v: the message timeout did not cut the wait", time.Since(start))
			}
			if c.check != nil {
				c.check(t, h.env.Stats())
			}
		})
	}
}

// TestUnreachableProcessor: the stream cannot open (gRPC UNAVAILABLE).
func TestUnreachableProcessor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	for _, failOpen := range []bool{false, true} {
		h := newHarness(t, nil)
		h.upstream("a", nil)
		h.push(append(h.clusters(), staticCluster("dead-proc", true, dead),
			httpListener("main", "routes", extProc("ilb", &extprocfilterv3.ExternalProcessor{
				FailureModeAllow: failOpen,
				GrpcService:      &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "dead-proc"}}},
			})),
			routeConfig("routes", vhost("all", []string{"*"}, routeTo("a"))))...)
		h.start(nil)
		want := 500
		if failOpen {
			want = 200
		}
		if resp := do(t, "GET", h.url("main", "/"), nil, ""); resp.status != want {
			t.Errorf("failOpen=%v: status %d, want %d", failOpen, resp.status, want)
		}
	}
}

// TestOverrideMessageTimeout: a response carrying override_message_timeout
// extends the wait once, within max_message_timeout.
func TestOverrideMessageTimeout(t *testing.T) {
	h, _ := extProcHarness(t, func(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		if req.GetRequestHeaders() == nil {
			return continueAll(ctx, req)
		}
		ext := &extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(time.Second)}
		return []*extprocv3.ProcessingResponse{ext}, nil
	}, &extprocfilterv3.ExternalProcessor{MessageTimeout: durationpb.New(50 * time.Millisecond), MaxMessageTimeout: durationpb.New(2 * time.Second)})
	// The processor never answers after extending: the request waits ~1s then times out with 504.
	start := time.Now()
	resp := do(t, "GET", h.url("main", "/"), nil, "")
	if resp.status != 504 || time.Since(start) < 900*time.Millisecond {
		t.Errorf("status %d after %v", resp.status, time.Since(start))
	}
	if st := h.env.Stats().ExtProc; st.OverrideTimeoutReceived != 1 {
		t.Errorf("OverrideTimeoutReceived = %d", st.OverrideTimeoutReceived)
	}
}

// TestBufferedRequestBody: the whole body is sent once with end_of_stream;
// a body mutation must agree with content-length; over the buffer limit the
// request gets 413 (facts §4).
func TestBufferedRequestBody(t *testing.T) {
	buffered := &extprocfilterv3.ProcessingMode{RequestBodyMode: extprocfilterv3.ProcessingMode_BUFFERED}
	rewrite := func(fixLength bool) procHandler {
		return func(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
			if req.GetRequestBody() == nil {
				return continueAll(ctx, req)
			}
			common := &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte(`{"model":"b"}`)}}}
			if fixLength {
				common.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("content-length", "13")}}
			}
			return []*extprocv3.ProcessingResponse{respond(req, common)}, nil
		}
	}
	t.Run("sent once with end_of_stream", func(t *testing.T) {
		h, up := extProcHarness(t, nil, &extprocfilterv3.ExternalProcessor{ProcessingMode: buffered})
		body := strings.Repeat("x", 3000)
		if resp := do(t, "POST", h.url("main", "/"), nil, body); resp.status != 200 {
			t.Fatalf("status %d", resp.status)
		}
		var bodies []*extprocv3.HttpBody
		for _, r := range h.proc.requests() {
			if b := r.GetRequestBody(); b != nil {
				bodies = append(bodies, b)
			}
			if rh := r.GetRequestHeaders(); rh != nil && rh.GetEndOfStream() {
				t.Error("request_headers end_of_stream with a body")
			}
		}
		if len(bodies) != 1 || string(bodies[0].GetBody()) != body || !bodies[0].GetEndOfStream() {
			t.Fatalf("body messages %d", len(bodies))
		}
		if up.last(t).body != body {
			t.Error("upstream body differs")
		}
	})
	t.Run("mutation with content-length fixed", func(t *testing.T) {
		h, up := extProcHarness(t, rewrite(true), &extprocfilterv3.ExternalProcessor{ProcessingMode: buffered})
		if resp := do(t, "POST", h.url("main", "/"), nil, `{"model":"a","prompt":"hi"}`); resp.status != 200 {
			t.Fatalf("status %d", resp.status)
		}
		if got := up.last(t); got.body != `{"model":"b"}` || got.header.Get("content-length") != "13" {
			t.Errorf("upstream body %q content-length %q", got.body, got.header.Get("content-length"))
		}
	})
	t.Run("mutation with stale content-length", func(t *testing.T) {
		h, up := extProcHarness(t, rewrite(false), &extprocfilterv3.ExternalProcessor{ProcessingMode: buffered, FailureModeAllow: true})
		if resp := do(t, "POST", h.url("main", "/"), nil, `{"model":"a","prompt":"hi"}`); resp.status != 500 {
			t.Fatalf("status %d, want 500", resp.status)
		}
		if len(up.requests()) != 0 {
			t.Error("upstream called")
		}
	})
	t.Run("over the buffer limit", func(t *testing.T) {
		h := newHarness(t, nil)
		h.upstream("a", nil)
		l := httpListener("main", "routes", extProc("ilb", &extprocfilterv3.ExternalProcessor{ProcessingMode: buffered}))
		l.PerConnectionBufferLimitBytes = u32(64)
		h.push(append(h.clusters(), l, routeConfig("routes", vhost("all", []string{"*"}, routeTo("a"))))...)
		h.start(nil)
		resp := do(t, "POST", h.url("main", "/"), nil, strings.Repeat("y", 65))
		if resp.status != 413 || resp.body != "Payload Too Large" || resp.header.Get("content-type") != "text/plain" {
			t.Errorf("got %d %q %q", resp.status, resp.body, resp.header.Get("content-type"))
		}
		if resp := do(t, "POST", h.url("main", "/"), nil, strings.Repeat("y", 64)); resp.status != 200 {
			t.Errorf("at the limit: %d", resp.status)
		}
	})
}

// TestModeOverride: with allow_mode_override a headers response can drop the
// body message; without it the override is ignored.
func TestModeOverride(t *testing.T) {
	handler := func(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		resp := respond(req, &extprocv3.CommonResponse{})
		if req.GetRequestHeaders() != nil {
			resp.ModeOverride = &extprocfilterv3.ProcessingMode{RequestBodyMode: extprocfilterv3.ProcessingMode_NONE}
		}
		return []*extprocv3.ProcessingResponse{resp}, nil
	}
	for _, allow := range []bool{true, false} {
		h, up := extProcHarness(t, handler, &extprocfilterv3.ExternalProcessor{
			AllowModeOverride: allow,
			ProcessingMode:    &extprocfilterv3.ProcessingMode{RequestBodyMode: extprocfilterv3.ProcessingMode_BUFFERED},
		})
		if resp := do(t, "POST", h.url("main", "/"), nil, "payload"); resp.status != 200 {
			t.Fatalf("status %d", resp.status)
		}
		sawBody := false
		for _, r := range h.proc.requests() {
			sawBody = sawBody || r.GetRequestBody() != nil
		}
		if sawBody == allow {
			t.Errorf("allow_mode_override=%v: body message sent=%v", allow, sawBody)
		}
		if up.last(t).body != "payload" {
			t.Error("upstream body lost")
		}
	}
}

// TestImmediateResponse: status, headers, body and content-type rules of an
// ImmediateResponse local reply (facts §4).
func TestImmediateResponse(t *testing.T) {
	for _, c := range []struct {
		name        string
		ir          *extprocv3.ImmediateResponse
		status      int
		body        string
		contentType string
	}{
		{"status headers body", &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests}, Body: []byte("slow down"),
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("retry-after", "3")}},
		}, 429, "slow down", "text/plain"},
		{"explicit content-type kept", &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode_BadRequest}, Body: []byte(`{"error":"x"}`),
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}},
		}, 400, `{"error":"x"}`, "application/json"},
		{"empty body has no content-type", &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode_Forbidden},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}},
		}, 403, "", ""},
		{"no status is 200", &extprocv3.ImmediateResponse{Body: []byte("ok")}, 200, "ok", "text/plain"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, up := extProcHarness(t, func(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
				if req.GetRequestHeaders() == nil {
					return continueAll(ctx, req)
				}
				return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: c.ir}}}, nil
			}, &extprocfilterv3.ExternalProcessor{})
			resp := do(t, "GET", h.url("main", "/"), nil, "")
			if resp.status != c.status || resp.body != c.body || resp.header.Get("content-type") != c.contentType {
				t.Errorf("got %d %q content-type %q", resp.status, resp.body, resp.header.Get("content-type"))
			}
			if c.ir.GetHeaders() != nil && c.name == "status headers body" && resp.header.Get("retry-after") != "3" {
				t.Error("immediate response header missing")
			}
			if len(up.requests()) != 0 {
				t.Error("upstream called")
			}
		})
	}
}

// TestResponsePath: response_headers can rewrite :status and headers; local
// replies of the router go through the ext_proc response path too.
func TestResponsePath(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	handler := func(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		rh := req.GetResponseHeaders()
		if rh == nil {
			return continueAll(ctx, req)
		}
		st, _ := protoHeader(rh.GetHeaders(), ":status")
		mu.Lock()
		seen = append(seen, st)
		mu.Unlock()
		return []*extprocv3.ProcessingResponse{respond(req, &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
			SetHeaders:    []*corev3.HeaderValueOption{setHeader(":status", "201"), setHeader("x-processed", "yes")},
			RemoveHeaders: []string{"x-upstream"},
		}})}, nil
	}
	h := newHarness(t, handler)
	h.upstream("a", nil)
	h.push(append(h.clusters(),
		httpListener("main", "routes", extProc("ilb", &extprocfilterv3.ExternalProcessor{})),
		routeConfig("routes", vhost("all", []string{"*"}, prefixRoute("/gone", "missing"), routeTo("a"))))...)
	h.start(nil)
	resp := do(t, "GET", h.url("main", "/"), nil, "")
	if resp.status != 201 || resp.header.Get("x-processed") != "yes" || resp.header.Get("x-upstream") != "" || resp.body != "hello from a" {
		t.Errorf("got %d %v %q", resp.status, resp.header, resp.body)
	}
	resp = do(t, "GET", h.url("main", "/gone"), nil, "")
	if resp.status != 201 || resp.header.Get("x-processed") != "yes" {
		t.Errorf("local reply not processed: %d %v", resp.status, resp.header)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[1] != "503" {
		t.Errorf("response_headers :status seen %v", seen)
	}
}
