package envoysim

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
)

func addHeader(key, value string, action corev3.HeaderValueOption_HeaderAppendAction) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: key, Value: value}, AppendAction: action}
}

// TestResponseHeadersToAdd checks the order of facts §7 (weighted cluster
// entry, route, virtual host, route configuration; the outer one wins on
// overwrite unless most_specific_header_mutations_wins) and the formatters.
func TestResponseHeadersToAdd(t *testing.T) {
	for _, mostSpecific := range []bool{false, true} {
		t.Run(fmt.Sprintf("most_specific_wins=%v", mostSpecific), func(t *testing.T) {
			h := newHarness(t, nil)
			up := h.upstream("a", nil)
			lvl := func(level string) []*corev3.HeaderValueOption {
				return []*corev3.HeaderValueOption{
					addHeader("x-append", level, corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD),
					addHeader("x-overwrite", level, corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD),
				}
			}
			r := weightedRoute("", "a", 1)
			r.ResponseHeadersToAdd = append(lvl("route"),
				addHeader("x-host", "%UPSTREAM_HOST%", 0),
				addHeader("x-cluster", "%UPSTREAM_CLUSTER%", 0),
				addHeader("x-req", "model=%REQ(x-model)%", 0),
				addHeader("x-empty", "%REQ(x-missing)%", 0),
				&corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "x-kept", Value: "%REQ(x-missing)%"}, KeepEmptyValue: true})
			r.ResponseHeadersToRemove = []string{"x-upstream"}
			r.RequestHeadersToAdd = []*corev3.HeaderValueOption{addHeader("x-req-cluster", "%UPSTREAM_CLUSTER%", 0), addHeader("x-req-host", "%UPSTREAM_HOST%", 0)}
			r.GetRoute().GetWeightedClusters().Clusters[0].ResponseHeadersToAdd = lvl("weighted")
			vh := vhost("all", []string{"*"}, r)
			vh.ResponseHeadersToAdd = lvl("vhost")
			rc := routeConfig("routes", vh)
			rc.ResponseHeadersToAdd = lvl("config")
			rc.MostSpecificHeaderMutationsWins = mostSpecific
			h.push(append(h.clusters(), httpListener("main", "routes"), rc)...)
			h.start(nil)

			resp := do(t, "GET", h.url("main", "/"), map[string]string{"x-model": "llama"}, "")
			wantAppend := "weighted, route, vhost, config"
			wantOverwrite := "config"
			if mostSpecific {
				wantAppend, wantOverwrite = "weighted, config, vhost, route", "route"
			}
			if got := strings.Join(resp.header.Values("x-append"), ", "); got != wantAppend {
				t.Errorf("x-append = %q, want %q", got, wantAppend)
			}
			if got := resp.header.Get("x-overwrite"); got != wantOverwrite {
				t.Errorf("x-overwrite = %q, want %q", got, wantOverwrite)
			}
			if got := resp.header.Get("x-host"); got != up.addr() {
				t.Errorf("x-host = %q, want %q", got, up.addr())
			}
			if resp.header.Get("x-cluster") != "a" || resp.header.Get("x-req") != "model=llama" {
				t.Errorf("formatters: %v", resp.header)
			}
			if _, ok := resp.header["X-Empty"]; ok {
				t.Error("empty value not skipped")
			}
			if v, ok := resp.header["X-Kept"]; !ok || v[0] != "" {
				t.Error("keep_empty_value not honoured")
			}
			if resp.header.Get("x-upstream") != "" {
				t.Error("response_headers_to_remove not applied")
			}
			got := up.last(t).header
			if got.Get("x-req-cluster") != "a" || got.Get("x-req-host") != "" {
				t.Errorf("request formatters: cluster %q host %q (no host is selected yet when request headers are finalized)", got.Get("x-req-cluster"), got.Get("x-req-host"))
			}
		})
	}
}

// TestDirectResponse checks the content-type rules of facts §8.
func TestDirectResponse(t *testing.T) {
	direct := func(path string, status uint32, body string, extra ...*corev3.HeaderValueOption) *routev3.Route {
		r := prefixRoute(path, "")
		r.Action = &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: status}}
		if body != "" {
			r.GetDirectResponse().Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: body}}
		}
		r.ResponseHeadersToAdd = extra
		return r
	}
	h := newHarness(t, nil)
	h.push(httpListener("main", "routes"), routeConfig("routes", vhost("all", []string{"*"},
		direct("/text", 200, "healthy"),
		direct("/json", 200, `{"ok":true}`, addHeader("content-type", "application/json", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)),
		direct("/empty", 204, "", addHeader("content-type", "application/json", 0)),
		direct("/", 418, ""))))
	h.start(nil)
	for _, c := range []struct {
		path, body, contentType string
		status                  int
	}{
		{"/text", "healthy", "text/plain", 200},
		{"/json", `{"ok":true}`, "application/json", 200},
		{"/empty", "", "", 204},
		{"/teapot", "", "", 418},
	} {
		resp := do(t, "GET", h.url("main", c.path), nil, "")
		if resp.status != c.status || resp.body != c.body || resp.header.Get("content-type") != c.contentType {
			t.Errorf("%s: got %d %q content-type %q", c.path, resp.status, resp.body, resp.header.Get("content-type"))
		}
		if c.body != "" && resp.header.Get("content-length") != fmt.Sprint(len(c.body)) {
			t.Errorf("%s: content-length %q", c.path, resp.header.Get("content-length"))
		}
	}
	if _, err := compileRouteTable(routeConfig("r", vhost("v", []string{"*"}, direct("/", 200, strings.Repeat("x", 4097)))), nil, false); err == nil {
		t.Error("direct response body over 4096 bytes accepted")
	}
}

// TestServerSentEventsStreamIncrementally reads the first event before the
// upstream writes the second: every chunk is flushed as it arrives, through
// an ext_proc filter that processes response headers.
func TestServerSentEventsStreamIncrementally(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, nil)
	h.upstream("sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/event-stream")
		fl := w.(http.Flusher)
		fmt.Fprint(w, "data: one\n\n")
		fl.Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		case <-time.After(5 * time.Second):
			return
		}
		fmt.Fprint(w, "data: two\n\n")
		fl.Flush()
	})
	h.push(append(h.clusters(),
		httpListener("main", "routes", extProc("ilb", &extprocfilterv3.ExternalProcessor{})),
		routeConfig("routes", vhost("all", []string{"*"}, routeTo("sse"))))...)
	h.start(nil)

	resp, err := http.Get(h.url("main", "/v1/chat/completions"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("content-type") != "text/event-stream" {
		t.Errorf("content-type %q", resp.Header.Get("content-type"))
	}
	rd := bufio.NewReader(resp.Body)
	line, err := rd.ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("first event %q, %v", line, err)
	}
	close(release)
	rest := ""
	for {
		l, err := rd.ReadString('\n')
		rest += l
		if err != nil {
			break
		}
	}
	if !strings.Contains(rest, "data: two") {
		t.Errorf("second event missing: %q", rest)
	}
}
