package envoysim

import (
	"testing"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
)

// TestProxyThroughExtProc checks the basic exchange: the request_headers
// message (pseudo headers, raw_value, end_of_stream, protocol_config), the
// proxied request, the response_headers message with :status, and the
// response headers the connection manager and router add.
func TestProxyThroughExtProc(t *testing.T) {
	h := newHarness(t, nil)
	up := h.upstream("a", nil)
	h.push(append(h.clusters(),
		httpListener("main", "routes", extProc("ilb", &extprocfilterv3.ExternalProcessor{})),
		routeConfig("routes", vhost("all", []string{"*"}, routeTo("a"))))...)
	h.start(counter(1))

	resp := do(t, "GET", h.url("main", "/v1/models?x=1"), map[string]string{"host": "api.example.com", "x-client": "c1"}, "")
	if resp.status != 200 || resp.body != "hello from a" {
		t.Fatalf("got %d %q", resp.status, resp.body)
	}
	if got := resp.header.Get("x-upstream"); got != "a" {
		t.Errorf("x-upstream = %q", got)
	}
	if got := resp.header.Get("server"); got != "envoy" {
		t.Errorf("server = %q", got)
	}
	if resp.header.Get("x-envoy-upstream-service-time") == "" {
		t.Error("no x-envoy-upstream-service-time")
	}
	got := up.last(t)
	if got.path != "/v1/models?x=1" || got.host != "api.example.com" || got.header.Get("x-client") != "c1" {
		t.Errorf("upstream saw %+v", got)
	}
	if got.header.Get("x-request-id") == "" || got.header.Get("x-forwarded-proto") != "http" || got.header.Get("x-envoy-expected-rq-timeout-ms") != "15000" {
		t.Errorf("upstream headers %v", got.header)
	}
	if _, ok := got.header["User-Agent"]; ok {
		t.Errorf("upstream got a User-Agent the client did not send: %v", got.header)
	}

	reqs := h.proc.requests()
	if len(reqs) != 2 {
		t.Fatalf("processor got %d messages, want 2", len(reqs))
	}
	rh := reqs[0].GetRequestHeaders()
	if rh == nil || !rh.GetEndOfStream() {
		t.Fatalf("first message %v", reqs[0])
	}
	for k, want := range map[string]string{":method": "GET", ":path": "/v1/models?x=1", ":authority": "api.example.com", ":scheme": "http", "x-client": "c1"} {
		if v, ok := protoHeader(rh.GetHeaders(), k); !ok || v != want {
			t.Errorf("request_headers %s = %q, want %q", k, v, want)
		}
	}
	for _, hv := range rh.GetHeaders().GetHeaders() {
		if hv.GetValue() != "" {
			t.Errorf("header %s uses value, want raw_value only", hv.GetKey())
		}
	}
	if reqs[0].GetProtocolConfig() == nil || reqs[1].GetProtocolConfig() != nil {
		t.Error("protocol_config must be on the first message only")
	}
	if st, _ := protoHeader(reqs[1].GetResponseHeaders().GetHeaders(), ":status"); st != "200" {
		t.Errorf("response_headers :status = %q", st)
	}
	st := h.env.Stats()
	if st.ExtProc.StreamsStarted != 1 || st.UpstreamRequests["a"] != 1 || st.Responses["2xx"] != 1 {
		t.Errorf("stats %+v", st)
	}
}
