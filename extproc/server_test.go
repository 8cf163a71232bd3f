package extproc_test

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/extproc/extproctest"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/weights"
)

// harness is a real ext_proc server on loopback and a gRPC client that
// plays Envoy's side of the stream.
type harness struct {
	conn   *grpc.ClientConn
	meter  *demand.Meter
	srv    *extproc.Server
	reg    *prometheus.Registry
	client extprocv3.ExternalProcessorClient
	w      *weights.Weights
	cfg    *config.Config
}

// fixedDraw is the random value every non-session request gets: slot
// 4242 of 10000, which the demo weights put in a known cluster.
const fixedDraw = 4242

func start(t testing.TB, publish bool) *harness {
	t.Helper()
	return startWith(t, publish, nil)
}

// startWith is start with the options adjusted by opt (nil: none).
func startWith(t testing.TB, publish bool, opt func(*extproc.Options)) *harness {
	t.Helper()
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ids := 0
	meter := demand.NewMeter(time.Unix(1700000000, 0))
	o := extproc.Options{
		Config: c, Registry: reg, Meter: meter,
		Rand:  func() uint64 { return fixedDraw },
		Now:   func() time.Time { return time.Unix(1700000000, 0) },
		NewID: func() string { ids++; return "gen-" + strconv.Itoa(ids) },
	}
	if opt != nil {
		opt(&o)
	}
	srv, err := extproc.New(o)
	if err != nil {
		t.Fatal(err)
	}
	w, err := weights.Proportional{}.Compute(weights.Input{Config: c, Clusters: weights.StaticState(c)})
	if err != nil {
		t.Fatal(err)
	}
	if publish {
		if err := srv.Publish(context.Background(), w); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &harness{srv: srv, reg: reg, client: extprocv3.NewExternalProcessorClient(conn), w: w, cfg: c, meter: meter, conn: conn}
}

// run opens one stream as source and sends msgs in order, reading one
// answer after each; it stops after an ImmediateResponse, as Envoy does.
func (h *harness) run(t *testing.T, source string, msgs ...*extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
	t.Helper()
	return extproctest.Send(t, h.client, source, msgs...)
}

func reqHeaders(eos bool, kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: hmap(kv...), EndOfStream: eos},
	}}
}

func reqBody(body string) *extprocv3.ProcessingRequest { return reqChunk(body, true) }

// reqChunk is a body message; eos false is a chunk (STREAMED) or, in
// BUFFERED mode, a whole body followed by trailers.
func reqChunk(body string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: eos},
	}}
}

// streamedMode marks the first message of a stream as Envoy does when the
// filter sends the request body in STREAMED mode.
func streamedMode(m *extprocv3.ProcessingRequest) *extprocv3.ProcessingRequest {
	m.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: extprocfilterv3.ProcessingMode_STREAMED}
	return m
}

func respHeaders(kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: hmap(kv...)},
	}}
}

// hmap builds a header map the way Envoy sends it: values in raw_value.
func hmap(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

func post(path string, extra ...string) *extprocv3.ProcessingRequest {
	return reqHeaders(false, append([]string{":method", "POST", ":path", path, ":authority", "ilb", "x-request-id", "req-1"}, extra...)...)
}

// mutation returns the headers a response sets (raw_value) and checks
// Envoy's rules: raw_value only, clear_route_cache only with a mutation.
func mutation(t *testing.T, c *extprocv3.CommonResponse) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, h := range c.GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetValue() != "" {
			t.Errorf("header %s uses value; Envoy reads raw_value only", h.GetHeader().GetKey())
		}
		out[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	if c.GetClearRouteCache() && c.GetHeaderMutation() == nil {
		t.Error("clear_route_cache without a header mutation: Envoy ignores it")
	}
	return out
}

// expected is the cluster Envoy picks for draw in a cell, computed here
// independently: walk the targets, [begin, end).
func expected(t *testing.T, w *weights.Weights, source, model string, draw uint64) string {
	t.Helper()
	cell, _ := w.Cell(source, model)
	slot := draw % weights.Total
	var begin uint64
	for _, tg := range cell.Targets {
		if slot < begin+uint64(tg.Weight) {
			return tg.Cluster
		}
		begin += uint64(tg.Weight)
	}
	t.Fatalf("no cluster for slot %d", slot)
	return ""
}

func TestRouting(t *testing.T) {
	h := start(t, true)
	chat := `{"model":"%s","messages":[{"role":"user","content":"hello there"}],"stream":true,"max_tokens":64%s}`
	body := func(model, extra string) string {
		return strings.Replace(strings.Replace(chat, "%s", model, 1), "%s", extra, 1)
	}
	tests := []struct {
		name     string
		source   string
		msgs     []*extprocv3.ProcessingRequest
		model    string
		draw     uint64
		reason   string
		fastPath bool
		from     string
	}{
		{
			"chat body routes by weights", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/chat/completions"), reqBody(body("qwen2.5-7b-instruct", ""))},
			"qwen2.5-7b-instruct", fixedDraw, "weighted", false, "body",
		},
		{
			"alias resolves to the canonical model", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/chat/completions"), reqBody(body("llama3-8b", ""))},
			"llama-3.1-8b-instruct", fixedDraw, "weighted", false, "body",
		},
		{
			"session header gives a stable draw", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/chat/completions", header.Session, "conv-77"), reqBody(body("llama3-8b", ""))},
			"llama-3.1-8b-instruct", 0, "session", false, "body",
		},
		{
			"body user is a session key", "edge-eu",
			[]*extprocv3.ProcessingRequest{post("/v1/completions"), reqBody(`{"model":"qwen-7b","prompt":"say hi","user":"u-1"}`)},
			"qwen2.5-7b-instruct", 0, "session", false, "body",
		},
		{
			"x-ilb-model on another endpoint decides on headers and skips the body", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/audio/transcriptions", header.Model, "qwen-7b")},
			"qwen2.5-7b-instruct", fixedDraw, "weighted", true, "header",
		},
		{
			"x-ilb-model of a parsed endpoint waits for the body, which agrees (alias)", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/chat/completions", header.Model, "qwen-7b"), reqBody(body("qwen2.5-7b-instruct", ""))},
			"qwen2.5-7b-instruct", fixedDraw, "weighted", false, "body",
		},
		{
			"GET without body uses the default model", "edge-eu",
			[]*extprocv3.ProcessingRequest{reqHeaders(true, ":method", "GET", ":path", "/v1/files/file-abc", "x-request-id", "req-1")},
			"llama-3.1-8b-instruct", fixedDraw, "weighted", false, "default",
		},
		{
			"other endpoint: the model comes from its JSON body", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/responses"), reqBody(`{"model":"qwen-7b","input":"hi"}`)},
			"qwen2.5-7b-instruct", fixedDraw, "weighted", false, "body",
		},
		{
			"other endpoint without JSON: the default model", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/audio/transcriptions"), reqBody(`plain text`)},
			"llama-3.1-8b-instruct", fixedDraw, "weighted", false, "default",
		},
		{
			"buffered body followed by trailers (no end_of_stream) is decided", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/chat/completions"), reqChunk(body("qwen-7b", ""), false)},
			"qwen2.5-7b-instruct", fixedDraw, "weighted", false, "body",
		},
		{
			"streamed body is decided on the last chunk", "edge-us",
			[]*extprocv3.ProcessingRequest{streamedMode(post("/v1/chat/completions")), reqChunk(`{"model":"qwen-7b",`, false), reqChunk(`"messages":[{"role":"user","content":"x"}]}`, true)},
			"qwen2.5-7b-instruct", fixedDraw, "weighted", false, "body",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resps := h.run(t, tt.source, tt.msgs...)
			last := resps[len(resps)-1]
			var common *extprocv3.CommonResponse
			if b := last.GetRequestBody(); b != nil {
				common = b.GetResponse()
				if first := resps[0].GetRequestHeaders().GetResponse(); first.GetHeaderMutation() != nil || first.GetClearRouteCache() {
					t.Errorf("headers answer before the body = %v; want a plain continue", first)
				}
			} else {
				common = last.GetRequestHeaders().GetResponse()
			}
			if common == nil {
				t.Fatalf("last answer = %v; want a headers or body response", last)
			}
			set := mutation(t, common)
			if !common.GetClearRouteCache() {
				t.Error("no clear_route_cache: Envoy would keep the fallback route")
			}
			if set[header.RouteModel] != tt.model {
				t.Errorf("%s = %q; want %q", header.RouteModel, set[header.RouteModel], tt.model)
			}
			draw, err := strconv.ParseUint(set[header.RouteDraw], 10, 64)
			if err != nil {
				t.Fatalf("%s = %q: %v", header.RouteDraw, set[header.RouteDraw], err)
			}
			if tt.reason == "weighted" && draw != tt.draw {
				t.Errorf("draw = %d; want %d", draw, tt.draw)
			}
			if got := last.GetModeOverride().GetRequestBodyMode(); tt.fastPath != (last.GetModeOverride() != nil && got == extprocfilterv3.ProcessingMode_NONE) {
				t.Errorf("mode override = %v; fast path %v", last.GetModeOverride(), tt.fastPath)
			}
			rec, ok := h.srv.Decisions().Get("req-1")
			if !ok {
				t.Fatal("no decision record")
			}
			if want := expected(t, h.w, tt.source, tt.model, draw); rec.Chosen != want || rec.Reason != tt.reason || rec.Draw != draw {
				t.Errorf("record chose %s (reason %s, draw %d); want %s (%s, %d)", rec.Chosen, rec.Reason, rec.Draw, want, tt.reason, draw)
			}
			if rec.WeightsVersion != h.w.Version() || rec.Source != tt.source || rec.ModelFrom != tt.from {
				t.Errorf("record version %s source %s model from %q (want %q)", rec.WeightsVersion, rec.Source, rec.ModelFrom, tt.from)
			}
			if len(resps) > 2 { // streamed: earlier chunks got a plain continue
				if c := resps[1].GetRequestBody().GetResponse(); c.GetHeaderMutation() != nil {
					t.Errorf("answer to the first chunk = %v; want a plain continue", c)
				}
			}
		})
	}
}

func TestSessionStickiness(t *testing.T) {
	h := start(t, true)
	draws := map[string]bool{}
	for _, msgs := range [][]*extprocv3.ProcessingRequest{
		{post("/v1/chat/completions", header.Session, "s-1"), reqBody(`{"model":"llama3-8b","messages":[{"role":"user","content":"a"}]}`)},
		{post("/v1/chat/completions", header.Session, "s-1"), reqBody(`{"model":"llama3-8b","messages":[{"role":"user","content":"b, longer"}],"user":"other"}`)},
		{post("/v1/embeddings", header.Model, "llama3-8b", header.Session, "s-1"), reqBody(`{"model":"llama3-8b","input":"x"}`)},
		{post("/v1/rerank", header.Model, "llama3-8b", header.Session, "s-1")},
	} {
		resps := h.run(t, "edge-us", msgs...)
		last := resps[len(resps)-1]
		c := last.GetRequestBody().GetResponse()
		if c == nil {
			c = last.GetRequestHeaders().GetResponse()
		}
		draws[mutation(t, c)[header.RouteDraw]] = true
	}
	if len(draws) != 1 {
		t.Errorf("one session key gave draws %v; want one", draws)
	}
}

// errorBody decodes an ImmediateResponse's OpenAI-style error.
type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

func TestRejections(t *testing.T) {
	h := start(t, true)
	big := `{"model":"llama3-8b","messages":[{"role":"user","content":"` + strings.Repeat("x", 8<<20+1000) + `"}]}`
	tests := []struct {
		name   string
		source string
		msgs   []*extprocv3.ProcessingRequest
		status int
		code   string
		param  string
		msg    string
	}{
		{
			"bad JSON", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/chat/completions"), reqBody(`{"model": "llama3-8b",`)},
			400, "invalid_json", "", "the request body is not valid JSON",
		},
		{
			"empty body", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/chat/completions"), reqBody(``)},
			400, "invalid_json", "", "the request body is empty",
		},
		{
			"body is an array", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/chat/completions"), reqBody(`[1,2]`)},
			400, "invalid_json", "", "the request body is a JSON array: want a JSON object",
		},
		{
			"missing model", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/chat/completions"), reqBody(`{"messages":[{"role":"user","content":"x"}]}`)},
			400, "missing_required_parameter", "model", "the request names no model",
		},
		{
			"model not a string", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/chat/completions"), reqBody(`{"model":7,"messages":[]}`)},
			400, "invalid_type", "model", `field "model" is 7: want a string`,
		},
		{
			"stream not a boolean", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/chat/completions"), reqBody(`{"model":"llama3-8b","stream":"yes","messages":[{"role":"user","content":"x"}]}`)},
			400, "invalid_type", "stream", `field "stream" is a JSON string: want a boolean`,
		},
		{
			"chat without messages", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/chat/completions"), reqBody(`{"model":"llama3-8b"}`)},
			400, "missing_required_parameter", "messages", `the request has no "messages"`,
		},
		{
			"an engine's metrics path", "edge-us",
			[]*extprocv3.ProcessingRequest{reqHeaders(true, ":method", "GET", ":path", "/metrics", "x-request-id", "req-1")},
			404, "path_not_found", "", `GET "/metrics" is not served: only paths under /v1/ reach the engines (envoy.path_prefixes)`,
		},
		{
			"unknown model", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/completions"), reqBody(`{"model":"gpt-9","prompt":"x"}`)},
			404, "model_not_found", "model", `the model "gpt-9" does not exist (models: llama-3.1-8b-instruct, qwen2.5-7b-instruct)`,
		},
		{
			"unknown model in x-ilb-model", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/rerank", header.Model, "gpt-9")},
			404, "model_not_found", "model", `"gpt-9"`,
		},
		{
			"x-ilb-model and the body disagree", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/completions", header.Model, "qwen-7b"), reqBody(`{"model":"llama3-8b","prompt":"x"}`)},
			400, "model_mismatch", "model", `header x-ilb-model names the model "qwen-7b" but the body's "model" is "llama3-8b"`,
		},
		{
			"x-ilb-model unknown, the body names a model", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/completions", header.Model, "gpt-9"), reqBody(`{"model":"llama3-8b","prompt":"x"}`)},
			400, "model_mismatch", "model", `"gpt-9"`,
		},
		{
			"a huge unknown model name is echoed as a bounded excerpt", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/completions"), reqBody(`{"model":"` + strings.Repeat("m", 4<<20) + `","prompt":"x"}`)},
			404, "model_not_found", "model", `…(+4194259 bytes)" does not exist`,
		},
		{
			"invalid priority from a source that trusts the header", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/completions", header.Priority, "urgent")},
			400, "invalid_priority", header.Priority, `header x-ilb-priority is "urgent": want critical, standard or sheddable`,
		},
		{
			"body too large", "edge-us",
			[]*extprocv3.ProcessingRequest{post("/v1/chat/completions"), reqBody(big)},
			413, "request_too_large", "", "over 8388608 bytes",
		},
		{
			"unknown source", "edge-mars",
			[]*extprocv3.ProcessingRequest{post("/v1/completions")},
			500, "unknown_source", "", `does not know the source "edge-mars"`,
		},
		{
			"a huge unknown source is echoed as a bounded excerpt", strings.Repeat("s", 1<<20),
			[]*extprocv3.ProcessingRequest{post("/v1/completions")},
			500, "unknown_source", "", `…(+1048531 bytes)" of this proxy`,
		},
		{
			"no source metadata", "",
			[]*extprocv3.ProcessingRequest{post("/v1/completions")},
			500, "unknown_source", "", `the source ""`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resps := h.run(t, tt.source, tt.msgs...)
			ir := resps[len(resps)-1].GetImmediateResponse()
			if ir == nil {
				t.Fatalf("answer = %v; want an ImmediateResponse", resps[len(resps)-1])
			}
			checkImmediate(t, ir, tt.status, tt.code, tt.param, tt.msg)
			if n := len(ir.GetBody()); n > 2048 {
				t.Errorf("error body is %d bytes; want a bounded answer (<= 2 KiB)", n)
			}
		})
	}
}

func checkImmediate(t *testing.T, ir *extprocv3.ImmediateResponse, status int, code, param, msg string) {
	t.Helper()
	if int(ir.GetStatus().GetCode()) != status {
		t.Errorf("status = %d; want %d", ir.GetStatus().GetCode(), status)
	}
	var eb errorBody
	if err := json.Unmarshal(ir.GetBody(), &eb); err != nil {
		t.Fatalf("body %q is not JSON: %v", ir.GetBody(), err)
	}
	if eb.Error.Code != code || !strings.Contains(eb.Error.Message, msg) {
		t.Errorf("error = %+v; want code %s and a message with %q", eb.Error, code, msg)
	}
	if eb.Error.Param != nil {
		if *eb.Error.Param != param {
			t.Errorf("param = %q; want %q", *eb.Error.Param, param)
		}
	} else if param != "" {
		t.Errorf("param = null; want %q", param)
	}
	hs := map[string]string{}
	for _, o := range ir.GetHeaders().GetSetHeaders() {
		hs[o.GetHeader().GetKey()] = string(o.GetHeader().GetRawValue())
	}
	if hs["content-type"] != "application/json" || hs[header.Reason] != code {
		t.Errorf("headers = %v", hs)
	}
}

func TestNotReadyBeforeWeights(t *testing.T) {
	h := start(t, false)
	resps := h.run(t, "edge-us", post("/v1/completions"))
	checkImmediate(t, resps[0].GetImmediateResponse(), 503, "not_ready", "", "no weights yet")
}

func TestResponseHeaders(t *testing.T) {
	h := start(t, true)
	body := reqBody(`{"model":"llama3-8b","messages":[{"role":"user","content":"x"}]}`)
	tests := []struct {
		name        string
		source      string
		debug       bool
		served      string
		wantRemoved bool
		wantDebug   bool
		mismatch    bool
	}{
		{"internal headers removed", "edge-us", false, "", true, false, false},
		{"debug allowed and asked", "edge-us", true, "", false, true, false},
		{"debug asked, source does not allow it", "edge-eu", true, "", true, false, false},
		{"served elsewhere is a mismatch", "edge-us", false, "us-west-sglang", true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := post("/v1/chat/completions")
			if tt.debug {
				hdr = post("/v1/chat/completions", header.Debug, "1")
			}
			resps := h.run(t, tt.source, hdr, body)
			rec, _ := h.srv.Decisions().Get("req-1")
			served := tt.served
			if served == "" {
				served = rec.Chosen
			}
			resps = append(resps, h.runResponse(t, tt.source, hdr, body, served)...)
			last := resps[len(resps)-1].GetResponseHeaders().GetResponse().GetHeaderMutation()
			removed := strings.Join(last.GetRemoveHeaders(), ",")
			if tt.wantRemoved != strings.Contains(removed, header.ServedCluster) {
				t.Errorf("removed = %q", removed)
			}
			var decision string
			for _, o := range last.GetSetHeaders() {
				if o.GetHeader().GetKey() == header.Decision {
					decision = string(o.GetHeader().GetRawValue())
				}
			}
			if tt.wantDebug != (decision != "") || (tt.wantDebug && !strings.Contains(decision, "cluster="+rec.Chosen)) {
				t.Errorf("decision header = %q", decision)
			}
			rec, _ = h.srv.Decisions().Get("req-1")
			if !rec.Complete || rec.Status != 200 || rec.ServedCluster != served || rec.ServedVersion != h.w.Version() || rec.UpstreamHost != "127.0.0.1:18101" || rec.Mismatch != tt.mismatch {
				t.Errorf("record = %+v", rec)
			}
		})
	}
}

// runResponse plays a whole request: headers, body, then the response
// headers Envoy sees from the route (served cluster, version, host).
func (h *harness) runResponse(t *testing.T, source string, hdr, body *extprocv3.ProcessingRequest, served string) []*extprocv3.ProcessingResponse {
	return h.run(t, source, hdr, body, respHeaders(":status", "200",
		header.ServedCluster, served, header.WeightsVersion, h.w.Version(), header.UpstreamHost, "127.0.0.1:18101"))
}
