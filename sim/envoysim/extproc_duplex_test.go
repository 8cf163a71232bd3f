package envoysim

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ilbproject/ilb/envoy"
)

// duplexMode is the processing mode istiod gives an InferencePool's
// picker per route: headers and trailers SEND, both bodies
// FULL_DUPLEX_STREAMED.
func duplexMode() *extprocfilterv3.ProcessingMode {
	return &extprocfilterv3.ProcessingMode{
		RequestHeaderMode: extprocfilterv3.ProcessingMode_SEND, ResponseHeaderMode: extprocfilterv3.ProcessingMode_SEND,
		RequestBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		RequestTrailerMode: extprocfilterv3.ProcessingMode_SEND, ResponseTrailerMode: extprocfilterv3.ProcessingMode_SEND,
	}
}

// duplexPicker is a full-duplex endpoint picker: GIE's (answers the
// request headers once the whole body came, then the body back in one
// piece) or an early one (answers the headers at once and each chunk as it
// comes). It names pick in envoy.lb, upper-cases the request body and
// wraps every response chunk in brackets, so that what passes is visibly
// what it sent back.
type duplexPicker struct {
	early bool
	pick  func() string
	// firstChunk, when set, is closed once the first response chunk was
	// answered.
	mu      sync.Mutex
	streams map[context.Context]*pickerStream
}

type pickerStream struct {
	headers *extprocv3.ProcessingRequest
	body    []byte
}

func (p *duplexPicker) handle(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.streams == nil {
		p.streams = map[context.Context]*pickerStream{}
	}
	st := p.streams[ctx]
	if st == nil {
		st = &pickerStream{}
		p.streams[ctx] = st
	}
	headersAnswer := func() *extprocv3.ProcessingResponse {
		r := respond(st.headers, &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{setHeader("x-picked", p.pick())},
		}})
		r.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{
			gieNS: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{gieHeader: structpb.NewStringValue(p.pick())}}),
		}}
		return r
	}
	streamed := func(body []byte, eos bool) *extprocv3.CommonResponse {
		return &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: body, EndOfStream: eos},
		}}}
	}
	switch {
	case req.GetRequestHeaders() != nil:
		st.headers = req
		if p.early || req.GetRequestHeaders().GetEndOfStream() {
			return []*extprocv3.ProcessingResponse{headersAnswer()}, nil
		}
		return nil, nil
	case req.GetRequestBody() != nil:
		b := req.GetRequestBody()
		if p.early {
			return []*extprocv3.ProcessingResponse{respond(req, streamed(bytes.ToUpper(b.GetBody()), b.GetEndOfStream()))}, nil
		}
		st.body = append(st.body, b.GetBody()...)
		if !b.GetEndOfStream() {
			return nil, nil
		}
		return []*extprocv3.ProcessingResponse{headersAnswer(), respond(req, streamed(bytes.ToUpper(st.body), true))}, nil
	case req.GetResponseHeaders() != nil:
		return []*extprocv3.ProcessingResponse{respond(req, &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{setHeader("x-picker-saw-response", "yes")},
		}})}, nil
	case req.GetResponseBody() != nil:
		b := req.GetResponseBody()
		var out []byte
		if len(b.GetBody()) > 0 {
			out = append(append([]byte("["), b.GetBody()...), ']')
		}
		return []*extprocv3.ProcessingResponse{respond(req, streamed(out, b.GetEndOfStream()))}, nil
	}
	return nil, nil
}

// duplexRoute is a route to cluster whose ext_proc filter "ilb" is turned
// on per route the way istiod does for a pool: the processing mode, the
// picker's gRPC service (cluster "ext-proc") and fail-closed.
func duplexRoute(prefix, cluster string) *routev3.Route {
	r := prefixRoute(prefix, cluster)
	r.TypedPerFilterConfig = map[string]*anypb.Any{"ilb": envoy.MustAny(&extprocfilterv3.ExtProcPerRoute{
		Override: &extprocfilterv3.ExtProcPerRoute_Overrides{Overrides: &extprocfilterv3.ExtProcOverrides{
			ProcessingMode:   duplexMode(),
			GrpcService:      &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "ext-proc"}}},
			FailureModeAllow: wrapperspb.Bool(false),
		}},
	})}
	return r
}

// poolListenerFilter is the listener-wide filter istiod installs on a
// gateway with pools: every mode off, a placeholder cluster, fail-open,
// envoy.lb received and forwarded.
func poolListenerFilter() *extprocfilterv3.ExternalProcessor {
	return &extprocfilterv3.ExternalProcessor{
		GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "dummy"}},
			Timeout:         durationpb.New(10 * time.Second),
		},
		FailureModeAllow: true,
		ProcessingMode: &extprocfilterv3.ProcessingMode{
			RequestHeaderMode: extprocfilterv3.ProcessingMode_SKIP, ResponseHeaderMode: extprocfilterv3.ProcessingMode_SKIP,
		},
		MessageTimeout:  durationpb.New(1000 * time.Second),
		MetadataOptions: gieMetadataOptions(),
	}
}

// TestFullDuplex plays istiod's InferencePool wiring: the listener's
// ext_proc filter off, turned on per route with full-duplex bodies; the
// pool's cluster picks from envoy.lb (override_host) among two hosts the
// fallback would share. The picker answers as GIE's does (headers after
// the whole body) or early (headers first, each chunk as it comes), and
// the body is big enough to span several chunks. What the upstream and
// the client get is what the picker sent back; the served host is the
// picked one; a route without the override sends nothing to the picker;
// server-sent events reach the client one by one while the upstream is
// still producing.
func TestFullDuplex(t *testing.T) {
	for _, tc := range []struct {
		name  string
		early bool
	}{{"headers after the whole body (GIE)", false}, {"headers at once, chunks as they come", true}} {
		t.Run(tc.name, func(t *testing.T) {
			next := make(chan struct{})
			arrived := make(chan struct{}) // the picked host got the request's headers
			var once sync.Once
			var mu sync.Mutex
			var got []string // per request to a host: x-picked|content-length|body
			sse := func(w http.ResponseWriter, r *http.Request) {
				once.Do(func() { close(arrived) })
				body, _ := io.ReadAll(r.Body)
				mu.Lock()
				got = append(got, strings.Join([]string{r.Context().Value(http.LocalAddrContextKey).(net.Addr).String(), r.Header.Get("x-picked"), r.Header.Get("content-length"), string(body)}, "|"))
				mu.Unlock()
				if r.URL.Path != "/v1/stream" {
					w.Header().Set("x-upstream", "served")
					_, _ = io.WriteString(w, "answer")
					return
				}
				w.Header().Set("content-type", "text/event-stream")
				_, _ = io.WriteString(w, "data: one\n\n")
				w.(http.Flusher).Flush()
				<-next // the client read the first event
				_, _ = io.WriteString(w, "data: two\n\n")
			}
			var addrs []string
			picker := &duplexPicker{early: tc.early, pick: func() string { return addrs[1] }}
			h := newHarness(t, picker.handle)
			h0, h1 := httptest.NewServer(http.HandlerFunc(sse)), httptest.NewServer(http.HandlerFunc(sse))
			defer h0.Close()
			defer h1.Close()
			addrs = []string{h0.Listener.Addr().String(), h1.Listener.Addr().String()}
			pool := staticCluster("pool", false, addrs...)
			pool.LoadBalancingPolicy = lbPolicies(gieOverrideHost())
			other := startUpstream(t, "other", false, nil)
			h.push(staticCluster("other", false, other.addr()), pool,
				httpListener("main", "routes", extProc("ilb", poolListenerFilter())),
				routeConfig("routes", vhost("all", []string{"*"}, duplexRoute("/v1/", "pool"), routeTo("other"))))
			h.start(nil)

			// A body of several downstream chunks. An early picker lets
			// the headers go on before the body ends: the client sends
			// its second half only once the picked host has the headers.
			half := strings.Repeat("prompt ", 3*bodyChunk/7)
			pr, pw := io.Pipe()
			go func() {
				_, _ = io.WriteString(pw, half)
				if tc.early {
					select {
					case <-arrived:
					case <-time.After(time.Minute):
						_ = pw.CloseWithError(errors.New("the picked host never got the headers before the body ended"))
						return
					}
				}
				_, _ = io.WriteString(pw, half)
				_ = pw.Close()
			}()
			req, _ := http.NewRequest(http.MethodPost, h.url("main", "/v1/chat/completions"), pr)
			req.Header.Set("content-type", "application/json")
			resp := send(t, req)
			want := addrs[1] + "|" + addrs[1] + "||" + strings.ToUpper(half+half)
			if resp.status != 200 || resp.body != "[answer]" || resp.header.Get("x-picker-saw-response") != "yes" || resp.header.Get("x-upstream") != "served" {
				t.Fatalf("status %d body %q headers %v (local replies %v)", resp.status, resp.body, resp.header, h.env.Stats().LocalReplies)
			}
			mu.Lock()
			if len(got) != 1 || got[0] != want {
				t.Fatalf("the hosts got %d requests, host|x-picked|content-length|body %.100q..., want one: %.100q...", len(got), got, want)
			}
			mu.Unlock()
			var served []*structpb.Struct
			for _, m := range h.proc.requests() {
				if m.GetResponseHeaders() != nil {
					served = append(served, m.GetMetadataContext().GetFilterMetadata()[gieNS])
				}
			}
			if len(served) != 1 || served[0].GetFields()[gieServed].GetStringValue() != addrs[1] {
				t.Errorf("response headers' metadata_context %v, want the served host %s", served, addrs[1])
			}

			// Streamed tokens: the first event arrives before the upstream writes the second.
			req, _ = http.NewRequest(http.MethodPost, h.url("main", "/v1/stream"), strings.NewReader(`{"stream":true}`))
			sresp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer sresp.Body.Close()
			rd := bufio.NewReader(sresp.Body)
			first, err := rd.ReadString(']')
			close(next)
			if err != nil || first != "[data: one\n\n]" {
				t.Fatalf("first event %q, %v", first, err)
			}
			rest, _ := io.ReadAll(rd)
			if string(rest) != "[data: two\n\n]" {
				t.Errorf("rest %q", rest)
			}

			before := len(h.proc.requests())
			if r := do(t, "GET", h.url("main", "/other"), nil, ""); r.status != 200 || r.body != "hello from other" {
				t.Errorf("route without the override: %d %q", r.status, r.body)
			}
			if n := len(h.proc.requests()) - before; n != 0 {
				t.Errorf("a route without the override sent the picker %d messages", n)
			}
			if st := h.env.Stats().ExtProc; st.MessageTimeouts != 0 || st.SpuriousMessages != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestFullDuplexConfig: what Envoy refuses in the filter's own processing
// mode (config.cc verifyProcessingModeConfig) and what envoysim does not
// model, in the filter and in per-route overrides, is NACKed with the
// field named.
func TestFullDuplexConfig(t *testing.T) {
	mode := func(mut func(m *extprocfilterv3.ProcessingMode)) *extprocfilterv3.ProcessingMode {
		m := duplexMode()
		mut(m)
		return m
	}
	for _, c := range []struct {
		name     string
		filter   *extprocfilterv3.ExternalProcessor
		perRoute *extprocfilterv3.ExtProcOverrides
		typeURL  string
		want     string
	}{
		{
			name:    "full duplex without trailers SEND",
			filter:  &extprocfilterv3.ExternalProcessor{ProcessingMode: mode(func(m *extprocfilterv3.ProcessingMode) { m.RequestTrailerMode = extprocfilterv3.ProcessingMode_DEFAULT })},
			typeURL: typeListener, want: "request_body_mode FULL_DUPLEX_STREAMED needs request_trailer_mode SEND",
		},
		{
			name:    "full duplex failing open",
			filter:  &extprocfilterv3.ExternalProcessor{ProcessingMode: duplexMode(), FailureModeAllow: true},
			typeURL: typeListener, want: "failure_mode_allow must be false with a FULL_DUPLEX_STREAMED body",
		},
		{
			name:    "STREAMED request bodies",
			filter:  &extprocfilterv3.ExternalProcessor{ProcessingMode: &extprocfilterv3.ProcessingMode{RequestBodyMode: extprocfilterv3.ProcessingMode_STREAMED}},
			typeURL: typeListener, want: "request_body_mode STREAMED is not supported by envoysim",
		},
		{
			name: "trailers SEND with buffered bodies",
			filter: &extprocfilterv3.ExternalProcessor{ProcessingMode: &extprocfilterv3.ProcessingMode{
				RequestBodyMode: extprocfilterv3.ProcessingMode_BUFFERED, RequestTrailerMode: extprocfilterv3.ProcessingMode_SEND,
			}},
			typeURL: typeListener, want: "request_trailer_mode SEND is supported by envoysim with request_body_mode FULL_DUPLEX_STREAMED only",
		},
		{
			name:     "per-route BUFFERED_PARTIAL",
			filter:   poolListenerFilter(),
			perRoute: &extprocfilterv3.ExtProcOverrides{ProcessingMode: &extprocfilterv3.ProcessingMode{RequestBodyMode: extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL}},
			typeURL:  typeRoute, want: "typed_per_filter_config[ilb]: overrides.processing_mode: request_body_mode BUFFERED_PARTIAL",
		},
		{
			name:   "per-route Google gRPC service",
			filter: poolListenerFilter(),
			perRoute: &extprocfilterv3.ExtProcOverrides{GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_GoogleGrpc_{
				GoogleGrpc: &corev3.GrpcService_GoogleGrpc{TargetUri: "picker:9002", StatPrefix: "picker"},
			}}},
			typeURL: typeRoute, want: "google_grpc",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.upstream("a", nil)
			r := routeTo("a")
			res := func() []types.Resource {
				return append(h.clusters(), httpListener("main", "routes", extProc("ilb", c.filter)), routeConfig("routes", vhost("all", []string{"*"}, r)))
			}
			if c.perRoute != nil { // a good route first, so that envoysim gets ready
				h.push(res()...)
				h.start(nil)
				r.TypedPerFilterConfig = map[string]*anypb.Any{"ilb": envoy.MustAny(&extprocfilterv3.ExtProcPerRoute{
					Override: &extprocfilterv3.ExtProcPerRoute_Overrides{Overrides: c.perRoute},
				})}
				h.push(res()...)
			} else {
				h.push(res()...)
				h.start(nil)
			}
			waitFor(t, "NACK", func() bool { return len(h.xds.nacks(c.typeURL)) > 0 })
			if msg := h.xds.nacks(c.typeURL)[0].GetErrorDetail().GetMessage(); !strings.Contains(msg, c.want) {
				t.Errorf("NACK %q does not say %q", msg, c.want)
			}
		})
	}
}

// TestFullDuplexFailures: in full-duplex mode a body answer must be a
// streamed_response (a plain body mutation is spurious), it may not come
// before the headers' answer, and a gRPC error fails closed: each gives
// status_on_error (500) and the upstream gets nothing.
func TestFullDuplexFailures(t *testing.T) {
	plainBody := func(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		if b := req.GetRequestBody(); b != nil && b.GetEndOfStream() {
			hdr := respond(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{}}, &extprocv3.CommonResponse{})
			return []*extprocv3.ProcessingResponse{hdr, respond(req, &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
				Mutation: &extprocv3.BodyMutation_Body{Body: b.GetBody()},
			}})}, nil
		}
		return nil, nil
	}
	bodyFirst := func(ctx context.Context, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		if b := req.GetRequestBody(); b != nil {
			return []*extprocv3.ProcessingResponse{respond(req, &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
				Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b.GetBody(), EndOfStream: b.GetEndOfStream()}},
			}})}, nil
		}
		return nil, nil
	}
	grpcError := func(context.Context, *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		return nil, status.Error(codes.Unavailable, "picker down")
	}
	for _, c := range []struct {
		name    string
		handler procHandler
		check   func(st ExtProcStats) bool
	}{
		{"plain body mutation", plainBody, func(st ExtProcStats) bool { return st.SpuriousMessages == 1 }},
		{"body answered before the headers", bodyFirst, func(st ExtProcStats) bool { return st.SpuriousMessages == 1 }},
		{"gRPC error", grpcError, func(st ExtProcStats) bool { return st.StreamsFailed == 1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.handler)
			up := h.upstream("a", nil)
			h.push(append(h.clusters(), httpListener("main", "routes", extProc("ilb", poolListenerFilter())),
				routeConfig("routes", vhost("all", []string{"*"}, duplexRoute("/", "a"))))...)
			h.start(nil)
			resp := do(t, "POST", h.url("main", "/v1/completions"), nil, `{"prompt":"hi"}`)
			if resp.status != 500 || len(up.requests()) != 0 {
				t.Errorf("status %d (want status_on_error 500), upstream got %d", resp.status, len(up.requests()))
			}
			if st := h.env.Stats().ExtProc; !c.check(st) {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestExtProcPerRouteMerge: the levels' ExtProcPerRoute merge from the
// least specific to the most specific (FilterConfigPerRoute's merging
// constructor) and apply over the filter's configuration.
func TestExtProcPerRouteMerge(t *testing.T) {
	service := func(cluster string, md ...string) *corev3.GrpcService {
		g := &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster}}}
		for i := 0; i+1 < len(md); i += 2 {
			g.InitialMetadata = append(g.InitialMetadata, &corev3.HeaderValue{Key: md[i], Value: md[i+1]})
		}
		return g
	}
	overrides := func(o *extprocfilterv3.ExtProcOverrides) *extprocfilterv3.ExtProcPerRoute {
		return &extprocfilterv3.ExtProcPerRoute{Override: &extprocfilterv3.ExtProcPerRoute_Overrides{Overrides: o}}
	}
	disabled := &extprocfilterv3.ExtProcPerRoute{Override: &extprocfilterv3.ExtProcPerRoute_Disabled{Disabled: true}}
	base, err := compileExtProc("ilb", poolListenerFilter())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		levels   []*extprocfilterv3.ExtProcPerRoute // least specific first
		cluster  string
		reqBody  extprocfilterv3.ProcessingMode_BodySendMode
		headers  bool // request headers sent
		failOpen bool
		metadata string
	}{
		{name: "no override keeps the filter", levels: []*extprocfilterv3.ExtProcPerRoute{overrides(&extprocfilterv3.ExtProcOverrides{})}, cluster: "dummy", failOpen: true},
		{name: "istiod's pool route", levels: []*extprocfilterv3.ExtProcPerRoute{overrides(&extprocfilterv3.ExtProcOverrides{
			ProcessingMode: duplexMode(), GrpcService: service("picker"), FailureModeAllow: wrapperspb.Bool(false),
		})}, cluster: "picker", reqBody: fullDuplex, headers: true},
		{name: "route's mode over the virtual host's service", levels: []*extprocfilterv3.ExtProcPerRoute{
			overrides(&extprocfilterv3.ExtProcOverrides{GrpcService: service("vh", "a", "1", "b", "2")}),
			overrides(&extprocfilterv3.ExtProcOverrides{ProcessingMode: duplexMode(), GrpcInitialMetadata: []*corev3.HeaderValue{{Key: "b", Value: "3"}, {Key: "c", Value: "4"}}}),
		}, cluster: "vh", reqBody: fullDuplex, headers: true, failOpen: true, metadata: "a=1 b=3 c=4"},
		{name: "the most specific disabled wins", levels: []*extprocfilterv3.ExtProcPerRoute{
			overrides(&extprocfilterv3.ExtProcOverrides{ProcessingMode: duplexMode(), GrpcService: service("picker")}), disabled,
		}, cluster: "dummy", failOpen: true},
		{name: "a route re-enables what its virtual host disabled", levels: []*extprocfilterv3.ExtProcPerRoute{
			disabled, overrides(&extprocfilterv3.ExtProcOverrides{GrpcService: service("picker")}),
		}, cluster: "picker", failOpen: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var merged *extProcPerRoute
			for _, l := range c.levels {
				pr, err := compileExtProcPerRoute(l)
				if err != nil {
					t.Fatal(err)
				}
				if merged == nil {
					merged = pr
				} else {
					merged = mergeExtProcPerRoute(merged, pr)
				}
			}
			cfg, m := merged.apply(base)
			mode := modeFromProto(m)
			var md []string
			for _, hv := range cfg.initialMetadata {
				md = append(md, hv.key+"="+hv.value)
			}
			if cfg.clusterName != c.cluster || mode.reqBody != c.reqBody || mode.sendReqHeaders != c.headers || cfg.failOpen != c.failOpen || strings.Join(md, " ") != c.metadata {
				t.Errorf("cluster %q body %v headers %v failOpen %v metadata %q; want %q %v %v %v %q",
					cfg.clusterName, mode.reqBody, mode.sendReqHeaders, cfg.failOpen, strings.Join(md, " "), c.cluster, c.reqBody, c.headers, c.failOpen, c.metadata)
			}
			if base.clusterName != "dummy" || !base.failOpen {
				t.Error("apply changed the filter's own configuration")
			}
		})
	}
}
