package envoysim

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// pathListener is a listener whose connection manager runs an ext_proc
// filter and the router on RDS "routes", with set applied to it.
func pathListener(name string, set func(*hcmv3.HttpConnectionManager)) *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix:     name,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: "routes", ConfigSource: adsSource()}},
		HttpFilters:    []*hcmv3.HttpFilter{extProc("ilb", &extprocfilterv3.ExternalProcessor{}), routerFilter()},
	}
	set(hcm)
	return listenerWith(name, hcm)
}

// rawGet sends target as the request-target of a GET, byte for byte (a
// Go client would clean or escape it), and reads the response.
func rawGet(t *testing.T, addr, target string, header map[string]string) response {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET " + target + " HTTP/1.1\r\nHost: test\r\nConnection: close\r\n"
	for k, v := range header {
		req += k + ": " + v + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// TestPathNormalizationInTheStream: the connection manager normalises
// :path before the filters, the route and the upstream see it (ext_proc
// gets the normalised path, as ILB does), refuses with an empty 400
// (path_normalization_failed, through local_reply_config, seen by no
// filter), redirects with a 307 to the normalised path (a 400 for gRPC),
// and changes nothing unless configured, but for a fragment.
func TestPathNormalizationInTheStream(t *testing.T) {
	h := newHarness(t, nil)
	up := h.upstream("a", nil)
	ilb := func(c *hcmv3.HttpConnectionManager) {
		c.NormalizePath, c.MergeSlashes = wrapperspb.Bool(true), true
		c.PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD
	}
	h.push(append(h.clusters(),
		pathListener("ilb", ilb),
		pathListener("plain", func(*hcmv3.HttpConnectionManager) {}),
		pathListener("redirect", func(c *hcmv3.HttpConnectionManager) {
			c.NormalizePath, c.MergeSlashes = wrapperspb.Bool(true), true
			c.PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT
		}),
		pathListener("reject", func(c *hcmv3.HttpConnectionManager) {
			c.NormalizePath, c.MergeSlashes = wrapperspb.Bool(true), true
			c.PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_REJECT_REQUEST
			c.LocalReplyConfig = &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{{
				Filter: &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_StatusCodeFilter{StatusCodeFilter: &accesslogv3.StatusCodeFilter{
					Comparison: &accesslogv3.ComparisonFilter{Op: accesslogv3.ComparisonFilter_EQ, Value: &corev3.RuntimeUInt32{DefaultValue: 400, RuntimeKey: "k"}},
				}}},
				Body: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "refused"}},
			}}}
		}),
		routeConfig("routes", vhost("all", []string{"*"}, routeTo("a"))))...)
	h.start(nil)

	for _, c := range []struct {
		name, listener, target string
		header                 map[string]string
		status                 int
		upstream               string // the :path the upstream and ext_proc saw ("": none reached)
		location, body         string
	}{
		{name: "an escaped letter is decoded", listener: "ilb", target: "/v1/chat/completion%73", status: 200, upstream: "/v1/chat/completions"},
		{name: "an escaped model id is unescaped", listener: "ilb", target: "/v1/models/org%2Fmodel", status: 200, upstream: "/v1/models/org/model"},
		{name: "dot segments are resolved", listener: "ilb", target: "/v1/..%2fmetrics?x=%2F", status: 200, upstream: "/metrics?x=%2F"},
		{name: "slashes are merged", listener: "ilb", target: "/v1//chat/./completions", status: 200, upstream: "/v1/chat/completions"},
		{name: "a backslash is a slash", listener: "ilb", target: `/v1/chat\completions`, status: 200, upstream: "/v1/chat/completions"},
		{name: "a path parameter is kept", listener: "ilb", target: "/v1/chat/completions;x", status: 200, upstream: "/v1/chat/completions;x"},
		{name: "an escaped NUL is refused", listener: "ilb", target: "/v1/chat/completions%00", status: 400},
		{name: "a fragment is refused", listener: "ilb", target: "/v1/chat/completions#x", status: 400},
		{name: "unconfigured: unchanged", listener: "plain", target: "/v1//chat/completion%73/../x%2F", status: 200, upstream: "/v1//chat/completion%73/../x%2F"},
		{name: "unconfigured: a fragment is refused", listener: "plain", target: "/v1/chat/completions#x", status: 400},
		{name: "redirect: no escaped slash goes on", listener: "redirect", target: "/v1/chat/completion%73", status: 200, upstream: "/v1/chat/completions"},
		{name: "redirect: to the normalised path", listener: "redirect", target: "/v1/chat%2F..%2Fmodels?x=1", status: 307, location: "/v1/models?x=1"},
		{name: "redirect: gRPC is refused", listener: "redirect", target: "/v1/chat%2Fcompletions", header: map[string]string{"content-type": "application/grpc+proto"}, status: 400},
		{name: "reject: an escaped slash", listener: "reject", target: "/v1/models/org%2Fmodel", status: 400, body: "refused"},
		{name: "reject: no escaped slash goes on", listener: "reject", target: "/v1/../v1/models", status: 200, upstream: "/v1/models"},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr, ok := h.env.ListenerAddr(c.listener)
			if !ok {
				t.Fatalf("listener %s not bound", c.listener)
			}
			procBefore, upBefore := len(h.proc.requests()), len(up.requests())
			refusedBefore := h.env.Stats().LocalReplies["path_normalization_failed"]
			resp := rawGet(t, addr, c.target, c.header)
			if resp.status != c.status || resp.header.Get("location") != c.location {
				t.Fatalf("GET %s: %d location %q; want %d location %q", c.target, resp.status, resp.header.Get("location"), c.status, c.location)
			}
			var saw []string
			for _, r := range h.proc.requests()[procBefore:] {
				if rh := r.GetRequestHeaders(); rh != nil {
					p, _ := protoHeader(rh.GetHeaders(), ":path")
					saw = append(saw, p)
				}
			}
			ups := up.requests()[upBefore:]
			if c.upstream == "" {
				if len(saw) != 0 || len(ups) != 0 {
					t.Errorf("ext_proc saw %v and the upstream %d requests; want none", saw, len(ups))
				}
				if n := h.env.Stats().LocalReplies["path_normalization_failed"] - refusedBefore; n != 1 {
					t.Errorf("%d local replies path_normalization_failed, want 1", n)
				}
				if resp.body != c.body {
					t.Errorf("body %q, want %q", resp.body, c.body)
				}
				return
			}
			if len(saw) != 1 || saw[0] != c.upstream || len(ups) != 1 || ups[0].path != c.upstream {
				t.Errorf("ext_proc saw %v, the upstream %s; want %s for both", saw, fmt.Sprint(paths(ups)), c.upstream)
			}
		})
	}
}

func paths(rs []recorded) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.path)
	}
	return out
}

// TestPathNormalizationConfig: an undefined escaped-slashes action is
// NACKed naming the field; merge_slashes is accepted without
// normalize_path.
func TestPathNormalizationConfig(t *testing.T) {
	_, err := compileHCM(&hcmv3.HttpConnectionManager{
		RouteSpecifier:               &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: "r", ConfigSource: adsSource()}},
		PathWithEscapedSlashesAction: 7,
	}, func(string) bool { return true })
	if err == nil || !strings.Contains(err.Error(), "path_with_escaped_slashes_action 7") {
		t.Errorf("undefined action: %v", err)
	}
	if err := newFieldPolicy().check(&hcmv3.HttpConnectionManager{MergeSlashes: true, NormalizePath: wrapperspb.Bool(true)}, "hcm"); err != nil {
		t.Errorf("merge_slashes and normalize_path refused: %v", err)
	}
}
