package extproc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/telemetry"
	"github.com/ilbproject/ilb/telemetry/otlptest"
	"github.com/ilbproject/ilb/weights"
)

// startTraced is a harness whose ext_proc traces to an in-process OTLP
// gRPC receiver, configured by the environment as in production. The
// returned flush exports every span ended so far (it shuts the provider
// down: call it once, after the requests).
func startTraced(t *testing.T) (*harness, *otlptest.Receiver, func()) {
	t.Helper()
	recv, endpoint := otlptest.StartGRPC(t)
	vars := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "ilb-test"}
	tp, shutdown, err := telemetry.NewTracerProvider(context.Background(), telemetry.TracingOptions{Getenv: func(k string) string { return vars[k] }})
	if err != nil {
		t.Fatal(err)
	}
	h := startWith(t, true, func(o *extproc.Options) { o.TracerProvider = tp })
	flush := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return h, recv, flush
}

const (
	incomingTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	incomingSpan  = "00f067aa0ba902b7"
)

func traceparent(trace, span string) string { return "00-" + trace + "-" + span + "-01" }

func TestDecisionSpan(t *testing.T) {
	h, recv, flush := startTraced(t)
	engine := map[string]string{}
	for _, c := range h.cfg.Clusters {
		engine[c.Name] = string(c.Engine)
	}
	chat := `{"model":"llama3-8b","messages":[{"role":"user","content":"x"}],"stream":true,"max_tokens":64}`
	tests := []struct {
		name      string
		id        string
		parent    string // incoming span id, "" for none
		msgs      []*extprocv3.ProcessingRequest
		wantAttrs map[string]any
		errorType string // "" for a routed request
		served    bool   // response headers came back
	}{
		{
			name: "chat body, response served", id: "tr-chat", parent: incomingSpan,
			msgs: []*extprocv3.ProcessingRequest{
				reqHeaders(false, ":method", "POST", ":path", "/v1/chat/completions", "x-request-id", "tr-chat",
					"traceparent", traceparent(incomingTrace, incomingSpan), "tracestate", "vendor=abc"),
				reqBody(chat),
				respHeaders(":status", "200", header.UpstreamHost, "10.1.2.3:8000", header.ServedCluster, "us-east-vllm"),
			},
			wantAttrs: map[string]any{
				"gen_ai.operation.name": "chat", "gen_ai.request.model": "llama3-8b", "ilb.model": "llama-3.1-8b-instruct",
				"gen_ai.request.stream": true, "gen_ai.request.max_tokens": int64(64),
				"server.address": "10.1.2.3", "server.port": int64(8000),
				"ilb.source": "edge-us", "ilb.reason": "weighted", "ilb.draw": "4242", "ilb.priority": "standard",
				"http.response.status_code": int64(200),
			},
			served: true,
		},
		{
			name: "x-ilb-model agrees with the body, embeddings, no parent", id: "tr-embed",
			msgs: []*extprocv3.ProcessingRequest{
				reqHeaders(false, ":method", "POST", ":path", "/v1/embeddings", "x-request-id", "tr-embed", header.Model, "qwen-7b", header.Priority, "critical"),
				reqBody(`{"model":"qwen-7b","input":"x"}`),
			},
			wantAttrs: map[string]any{
				"gen_ai.operation.name": "embeddings", "gen_ai.request.model": "qwen-7b", "ilb.model": "qwen2.5-7b-instruct",
				"ilb.reason": "weighted", "ilb.priority": "critical",
			},
		},
		{
			name: "unknown model is rejected with error.type", id: "tr-404", parent: incomingSpan,
			msgs: []*extprocv3.ProcessingRequest{
				reqHeaders(false, ":method", "POST", ":path", "/v1/completions", "x-request-id", "tr-404",
					"traceparent", traceparent(incomingTrace, incomingSpan)),
				reqBody(`{"model":"gpt-9","prompt":"x"}`),
			},
			wantAttrs: map[string]any{
				"gen_ai.operation.name": "text_completion", "gen_ai.request.model": "gpt-9",
				"ilb.reason": "model_not_found", "http.response.status_code": int64(404),
			},
			errorType: "model_not_found",
		},
	}
	forwarded := map[string]map[string]string{}
	for _, tt := range tests {
		resps := h.run(t, "edge-us", tt.msgs...)
		set := map[string]string{}
		for _, r := range resps {
			c := r.GetRequestBody().GetResponse()
			if c == nil {
				c = r.GetRequestHeaders().GetResponse()
			}
			for k, v := range mutation(t, c) {
				set[k] = v
			}
		}
		forwarded[tt.id] = set
	}
	// Spans of requests whose response never came end with their stream.
	waitStreamsClosed(t, h)
	flush()
	spans := map[string]otlptest.Span{}
	for _, s := range recv.Spans() {
		if s.Name == "ilb.route" {
			spans[s.Attrs["ilb.request_id"].(string)] = s
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ok := spans[tt.id]
			if !ok {
				t.Fatalf("no ilb.route span for %s; got %d spans", tt.id, len(recv.Spans()))
			}
			if s.Kind != tracev1.Span_SPAN_KIND_INTERNAL || s.Resource["service.name"] != "ilb-test" {
				t.Errorf("kind %v, resource %v", s.Kind, s.Resource)
			}
			if tt.parent != "" && (s.TraceID != incomingTrace || s.ParentSpanID != tt.parent) {
				t.Errorf("span trace %s parent %s; want trace %s parent %s", s.TraceID, s.ParentSpanID, incomingTrace, tt.parent)
			}
			if tt.parent == "" && (s.ParentSpanID != "" || s.TraceID == incomingTrace) {
				t.Errorf("span without incoming context has parent %q, trace %s; want a root", s.ParentSpanID, s.TraceID)
			}
			for k, want := range tt.wantAttrs {
				if got := s.Attrs[k]; got != want {
					t.Errorf("attribute %s = %v (%T); want %v (%T)", k, got, got, want, want)
				}
			}
			rec, ok := h.srv.Decisions().Get(tt.id)
			if !ok {
				t.Fatal("no decision record")
			}
			if rec.TraceID != s.TraceID || rec.SpanID != s.SpanID {
				t.Errorf("record trace %s span %s; want %s %s", rec.TraceID, rec.SpanID, s.TraceID, s.SpanID)
			}
			if s.Attrs["ilb.weights_version"] != h.w.Version() {
				t.Errorf("ilb.weights_version = %v; want %s", s.Attrs["ilb.weights_version"], h.w.Version())
			}
			fw := forwarded[tt.id]
			if tt.errorType != "" {
				if s.Attrs["error.type"] != tt.errorType || s.Status.GetCode() != tracev1.Status_STATUS_CODE_ERROR {
					t.Errorf("error.type %v, status %v; want %s and an error status", s.Attrs["error.type"], s.Status, tt.errorType)
				}
				if fw["traceparent"] != "" {
					t.Errorf("a rejected request forwarded traceparent %q", fw["traceparent"])
				}
				return
			}
			if _, bad := s.Attrs["error.type"]; bad {
				t.Errorf("routed request has error.type %v", s.Attrs["error.type"])
			}
			if s.Attrs["ilb.cluster"] != rec.Chosen || s.Attrs["gen_ai.provider.name"] != engine[rec.Chosen] {
				t.Errorf("ilb.cluster %v provider %v; want %s, %s", s.Attrs["ilb.cluster"], s.Attrs["gen_ai.provider.name"], rec.Chosen, engine[rec.Chosen])
			}
			if want := traceparent(s.TraceID, s.SpanID); fw["traceparent"] != want {
				t.Errorf("forwarded traceparent %q; want %q (the decision span)", fw["traceparent"], want)
			}
			if tt.id == "tr-chat" && fw["tracestate"] != "vendor=abc" {
				t.Errorf("forwarded tracestate %q; want vendor=abc", fw["tracestate"])
			}
		})
	}
}

// TestNoTracingNoHeader: without a tracer provider nothing is forwarded
// and the record has no trace ids, even when the request carries a
// traceparent.
func TestNoTracingNoHeader(t *testing.T) {
	h := start(t, true)
	resps := h.run(t, "edge-us", post("/v1/chat/completions", "traceparent", traceparent(incomingTrace, incomingSpan)),
		reqBody(`{"model":"llama3-8b","messages":[{"role":"user","content":"x"}]}`))
	set := mutation(t, resps[len(resps)-1].GetRequestBody().GetResponse())
	if _, ok := set["traceparent"]; ok || set[header.RouteModel] == "" {
		t.Errorf("mutation %v; want routing headers and no traceparent", set)
	}
	if rec, _ := h.srv.Decisions().Get("req-1"); rec.TraceID != "" || rec.SpanID != "" {
		t.Errorf("record trace %q span %q; want none", rec.TraceID, rec.SpanID)
	}
}

// allClusters is a live state giving every configured cluster c.
func allClusters(cfg *config.Config, c live.Cluster) *live.State {
	l := &live.State{At: now, Clusters: map[string]live.Cluster{}}
	for _, e := range cfg.Clusters {
		l.Clusters[e.Name] = c
	}
	return l
}

// countMetric is the value of a counter of reg with exactly these labels.
func countMetric(t *testing.T, h *harness, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

func TestShedCounter(t *testing.T) {
	tests := []struct {
		name   string
		shed   bool // the weights shed every sheddable request
		live   live.Cluster
		prio   string
		reason string // "" when the request is routed
	}{
		{"planned shedding, confirmed by saturation", true, live.Cluster{Saturated: true}, "sheddable", "shed"},
		{"every cluster saturated", false, live.Cluster{Saturated: true}, "sheddable", "overloaded"},
		{"no cluster left", false, live.Cluster{Excluded: "unhealthy"}, "critical", "no_capacity"},
		{"routed requests are not counted", false, live.Cluster{}, "standard", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, true)
			if tt.shed {
				publishSheddable(t, h)
			}
			h.srv.SetLive(allClusters(h.cfg, tt.live))
			resps := h.run(t, "edge-us", qwenRequest(tt.prio)...)
			ir := resps[len(resps)-1].GetImmediateResponse()
			if (ir != nil) != (tt.reason != "") {
				t.Fatalf("answer %v; want a rejection: %v", resps[len(resps)-1], tt.reason != "")
			}
			all := countMetric(t, h, "ilb_extproc_shed_total", nil)
			if tt.reason == "" {
				if all != 0 {
					t.Errorf("ilb_extproc_shed_total = %v; want 0", all)
				}
				return
			}
			got := countMetric(t, h, "ilb_extproc_shed_total", map[string]string{
				"source": "edge-us", "model": "qwen2.5-7b-instruct", "priority": tt.prio, "reason": tt.reason,
			})
			if got != 1 || all != 1 {
				t.Errorf("ilb_extproc_shed_total{...,reason=%s} = %v (all %v); want 1", tt.reason, got, all)
			}
			if !strings.Contains(string(ir.GetBody()), tt.reason) {
				t.Errorf("body %s; want code %s", ir.GetBody(), tt.reason)
			}
		})
	}
}

// publishSheddable republishes the harness weights with every sheddable
// request shed.
func publishSheddable(t *testing.T, h *harness) {
	t.Helper()
	var cells []weights.Cell
	for _, s := range h.cfg.Sources {
		for _, m := range h.cfg.Models {
			cell, _ := h.w.Cell(s.Name, m.Name)
			cell.Explanation = nil
			cell.Shed = weights.ShedFractions{weights.Sheddable: 1}
			cells = append(cells, cell)
		}
	}
	w, err := weights.New("test", time.Time{}, cells)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Publish(context.Background(), w); err != nil {
		t.Fatal(err)
	}
}

// waitStreamsClosed waits until ext_proc has seen every stream end.
func waitStreamsClosed(t *testing.T, h *harness) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a bound on a hang, not a latency: streams close in microseconds
	for {
		mfs, err := h.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		open := -1.0
		for _, mf := range mfs {
			if mf.GetName() == "ilb_extproc_streams" {
				open = mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v ext_proc streams still open", open)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
