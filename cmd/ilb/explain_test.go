package main

import (
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/extproc/extproctest"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/live"
)

// TestExplainStory plays requests through a real ext_proc server and asks
// `ilb explain` about them through the real admin API.
func TestExplainStory(t *testing.T) {
	s := startStack(t)
	const src, model = "edge-us", "qwen2.5-7b-instruct"
	drawn := s.drawn(t, src, model)
	s.request(t, "r-weighted", model, drawn)
	s.request(t, "r-elsewhere", model, "eu-west-tgi")
	ls := map[string]live.Cluster{}
	for _, c := range []string{"us-east-vllm", "eu-west-vllm", "eu-west-tgi"} {
		ls[c] = live.Cluster{PressureKnown: true}
	}
	ls[drawn] = live.Cluster{Saturated: true, Pressure: 3, PressureKnown: true} // a queue of 3 per running request
	s.srv.SetLive(&live.State{At: time.Now(), Clusters: ls})
	s.request(t, "r-steered", model, "")
	s.srv.SetLive(nil)
	s.request(t, "r-bad", "no-such-model", "")
	extproctest.Send(t, s.client, "edge-us", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: extproctest.Headers(":method", "GET", ":path", "/v1/models", header.RequestID, "r-models"), EndOfStream: true,
	}}})
	// Envoy's 413 for a body past its buffer: the headers, then the
	// local reply's response headers, no body.
	extproctest.Send(t, s.client, "edge-us",
		&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: extproctest.Headers(":method", "POST", ":path", "/v1/chat/completions", header.RequestID, "r-413"),
		}}},
		&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: extproctest.Headers(":status", "413", header.Reason, "request_too_large"), EndOfStream: true,
		}}})
	rec, ok := s.srv.Decisions().Get("r-weighted")
	if !ok || rec.TraceID == "" || rec.SpanID == "" {
		t.Fatalf("r-weighted: %+v, %v; want a traced record", rec, ok)
	}
	steered, _ := s.srv.Decisions().Get("r-steered")

	tests := []struct {
		name string
		args []string
		env  string // ILB_TRACE_URL
		want []string
		not  []string
	}{
		{
			"the whole story",
			[]string{"r-weighted"},
			"",
			[]string{
				"source      edge-us  (priority standard, the source's default)",
				"demand      ",
				"model       " + model + ", read from the body",
				"session     none: a random draw",
				"trace       " + rec.TraceID + " (span " + rec.SpanID + ")",
				"weights     version " + s.w.Version(),
				"candidates:", "CLUSTER", "WEIGHT", "SHARE", "INTERVAL",
				"<- slot 4242 falls here",
				"draw        4242 (random) -> slot 4242 of 10000",
				"chosen      " + drawn + " (reason weighted: a random draw over the weights)",
				"served      " + drawn + " at 10.0.0.7:8000, weights " + s.w.Version() + ", status 200",
				"timing      decision ",
			},
			[]string{"WARNING", "http://"},
		},
		{
			"served elsewhere: a warning",
			[]string{"r-elsewhere"},
			"",
			[]string{"WARNING     Envoy served eu-west-tgi, not " + drawn},
			nil,
		},
		{
			"steered",
			[]string{"r-steered"},
			"",
			[]string{
				"steered     " + drawn + " has 3.00 queued requests per running one, others less: moved (probability 1 − 0.25)",
				"saturated; <- slot 4242 falls here, passed over (steered)",
				"chosen      " + steered.Chosen + " (reason steered: the drawn cluster's engines (without a TTFT histogram) queue more per running request",
			},
			nil,
		},
		{
			"rejected by ILB",
			[]string{"r-bad"},
			"",
			[]string{"answered    404 by ILB itself (reason model_not_found)"},
			[]string{"candidates:"},
		},
		{
			"the model list",
			[]string{"r-models"},
			"",
			[]string{"answered    200 by ILB itself (reason models: the model list, answered from ILB's configuration"},
			[]string{"candidates:", "demand     "},
		},
		{
			"Envoy's own 413",
			[]string{"r-413"},
			"",
			[]string{"answered    413 by Envoy itself, before ILB decided: the body is over envoy.request_buffer_bytes"},
			[]string{"UNANSWERED", "by ILB itself"},
		},
		{
			"trace link from --trace-url",
			[]string{"--trace-url", "http://localhost:16686/trace/{trace_id}?span={span_id}", "r-weighted"},
			"",
			[]string{"            http://localhost:16686/trace/" + rec.TraceID + "?span=" + rec.SpanID},
			nil,
		},
		{
			"trace link from ILB_TRACE_URL",
			[]string{"r-weighted"},
			"http://jaeger:16686/trace/{trace_id}",
			[]string{"            http://jaeger:16686/trace/" + rec.TraceID + "\n"},
			nil,
		},
		{
			"the flag wins over the environment",
			[]string{"--trace-url", "http://a/{trace_id}", "r-weighted"},
			"http://b/{trace_id}",
			[]string{"http://a/" + rec.TraceID},
			[]string{"http://b/"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("ILB_TRACE_URL", tt.env)
			out, _, err := runCmd(t, append([]string{"explain", "--admin", s.admin}, tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestExplainErrors(t *testing.T) {
	s := startStack(t)
	dead := deadAddr(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown id", []string{"--admin", s.admin, "nope"}, `no decision record for request id "nope"`},
		{"no id", []string{"--admin", s.admin}, "want exactly one REQUEST_ID"},
		{"admin unreachable", []string{"--admin", dead, "x"}, "admin API at " + dead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runCmd(t, append([]string{"explain"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v; want %q", err, tt.want)
			}
		})
	}
}

// TestExplainMaxTokens: a request without max_tokens says so, not "0".
func TestExplainMaxTokens(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int
		want string
	}{
		{"unset", 0, "max_tokens unset"},
		{"set", 64, "max_tokens 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			printRecord(&b, decision.Record{RequestID: "r", Model: "m", RequestedModel: "m", ModelFrom: "body", MaxTokens: tc.max})
			if !strings.Contains(b.String(), tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, b.String())
			}
		})
	}
}

// TestExplainLines: the lines a record's fields add to ilb explain —
// the tenant's, and the plan's shed waived for a routed request — and
// none where there is nothing to say.
func TestExplainLines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rec    decision.Record
		want   string // in the output
		absent string // not in it
	}{
		{
			"shed by the tenant's share",
			decision.Record{RequestID: "r", Tenant: "acme", TenantFrom: "header", TenantDemand: 0.6, TenantFair: 0.3, TenantShed: 0.5, Reason: "shed", Status: 429},
			"acme, from x-ilb-tenant: 60% of its priority's demand here, fair share 30%; 50% of its requests shed", "",
		},
		{"tenant ignored", decision.Record{RequestID: "r", TenantFrom: "ignored-header"}, "its x-ilb-tenant was ignored", ""},
		{"tenant named", decision.Record{RequestID: "r", Tenant: "acme", TenantFrom: "header"}, "tenant      acme, from x-ilb-tenant\n", ""},
		{"the meaning of shed", decision.Record{RequestID: "r", Reason: "shed", Status: 429}, "its tenant's share of it", ""},
		{
			"a shed waived: predicted in time",
			decision.Record{RequestID: "r", Priority: "sheddable", Chosen: "us-east-vllm", Reason: "weighted", ShedWaived: 0.4, ShedWaivedFirstToken: 1.234},
			"shed        the plan sheds 40% of sheddable requests here, waived: its first token was predicted in 1.23 s on us-east-vllm", "",
		},
		{
			"a shed waived: not confirmed",
			decision.Record{RequestID: "r", Priority: "standard", Chosen: "us-east-vllm", Reason: "weighted", ShedWaived: 1},
			"the plan sheds 100% of standard requests here, waived: no cluster it may use confirmed the overload", "",
		},
		{"no plan: no waiver", decision.Record{RequestID: "r", Priority: "standard", Chosen: "us-east-vllm", Reason: "weighted"}, "chosen", "waived"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			printRecord(&b, tc.rec)
			if !strings.Contains(b.String(), tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, b.String())
			}
			if tc.absent != "" && strings.Contains(b.String(), tc.absent) {
				t.Errorf("output has %q:\n%s", tc.absent, b.String())
			}
		})
	}
}
