package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/internal/istiotest"
	"github.com/ilbproject/ilb/internal/kubetest"
	"github.com/ilbproject/ilb/sim/engine"
	"github.com/ilbproject/ilb/sim/stack"
)

// engineSaw is what an engine read of a request that came through Envoy.
type engineSaw struct {
	cluster string
	target  string // the request-target as received
	model   string // the body's "model", "" without a JSON body
}

// sawLog records, by x-request-id, what the engines read of every
// request that came through Envoy (ILB's and Envoy's health probes carry
// no x-request-id).
type sawLog struct {
	mu   sync.Mutex
	reqs map[string]engineSaw
}

func (l *sawLog) get(id string) (engineSaw, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.reqs[id]
	return s, ok
}

func (l *sawLog) ids() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id := range l.reqs {
		out = append(out, id)
	}
	return out
}

// recordingEngines is a stack.Options.Prepare that serves every endpoint
// of the configuration with an engine of its own (package engine's, with
// the cluster's kind and served names) that records in l what it read,
// and points the endpoints at them.
func recordingEngines(t *testing.T, l *sawLog) func(c *config.Config) error {
	return func(c *config.Config) error {
		for ci := range c.Clusters {
			cl := &c.Clusters[ci]
			var served []string
			for _, m := range cl.Models {
				served = append(served, m)
				for _, cm := range c.Models {
					if cm.Name == m {
						served = append(served, cm.Aliases...)
					}
				}
			}
			for i := range cl.Endpoints {
				srv, err := engine.New(engine.Options{Name: fmt.Sprintf("%s/%d", cl.Name, i), Cluster: cl.Name, Kind: string(cl.Engine), Models: served})
				if err != nil {
					return err
				}
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					return err
				}
				hs := &http.Server{Handler: l.recorder(cl.Name, srv.Handler()), ReadHeaderTimeout: 10 * time.Second}
				go func() { _ = hs.Serve(ln) }()
				t.Cleanup(func() { _ = hs.Close() })
				cl.Endpoints[i] = ln.Addr().String()
			}
		}
		return nil
	}
}

func (l *sawLog) recorder(cluster string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get(header.RequestID); id != "" {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var b struct {
				Model string `json:"model"`
			}
			_ = json.Unmarshal(body, &b)
			l.mu.Lock()
			l.reqs[id] = engineSaw{cluster: cluster, target: r.RequestURI, model: b.Model}
			l.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
}

// TestPathAndBodySmuggling: requests whose path or body an engine could
// read otherwise than ILB decides on (issue 24: a path the engine decodes
// to chat/completions while ILB took it for "other" and routed on a
// header naming another model; a body whose model or output bound depends
// on how duplicate or case-variant keys are read). ILB's listener has
// Envoy normalise the path first (envoy.NormalizePaths), so ILB
// classifies the path the engine routes on: each path is sent twice,
// smuggling (x-ilb-model naming another model than the body) and plain.
// A path Envoy makes plain is served like its plain form (or refused for
// the model mismatch); what Envoy leaves ambiguous ILB refuses; dot
// segments to an engine's /metrics end outside the served prefix. For
// every request an engine read, its request-target, its body's model and
// its cluster are ILB's decision (path, model, chosen cluster); no
// refused request reaches an engine. Without the normalisation the plain
// requests of the escaped, dotted and doubled paths would be refused
// (ambiguous_path) and this test fails.
func TestPathAndBodySmuggling(t *testing.T) {
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Controller.Policy = config.PolicyProportional
	saw := &sawLog{reqs: map[string]engineSaw{}}
	s := runStack(t, c, stack.Options{Seed: 11, Prepare: recordingEngines(t, saw)})
	url := envoyURL(t, s, "edge-us")
	const llama, qwen = "llama-3.1-8b-instruct", "qwen2.5-7b-instruct"
	chatBody := `{"model":"` + llama + `","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	const (
		served = ""       // the outcome of a request an engine answers
		byILB  = "models" // ILB's own answer, 200: the model retrieval
	)
	for _, c := range []struct {
		name, path, body string
		engineTarget     string // what Envoy forwards (served cases)
		plain, smuggled  string // outcome: served, or the error code
		// served: the engine's status, plain and smuggled (0: any; the
		// cluster ILB draws for the header's model may not serve the id)
		status [2]int
	}{
		{"an escaped letter", "/v1/chat/completion%73", chatBody, "/v1/chat/completions", served, "model_mismatch", [2]int{200}},
		{"an escaped slash", "/v1/chat%2Fcompletions", chatBody, "/v1/chat/completions", served, "model_mismatch", [2]int{200}},
		{"an escaped backslash", "/v1/chat%5Ccompletions", chatBody, "/v1/chat/completions", served, "model_mismatch", [2]int{200}},
		{"a double slash", "/v1//chat/completions", chatBody, "/v1/chat/completions", served, "model_mismatch", [2]int{200}},
		{"a dot segment", "/v1/./chat/completions", chatBody, "/v1/chat/completions", served, "model_mismatch", [2]int{200}},
		{"a path parameter", "/v1/chat/completions;x", chatBody, "", "ambiguous_path", "ambiguous_path", [2]int{}},
		{"dot segments to an engine's metrics", "/v1/../metrics", "", "", "path_not_found", "path_not_found", [2]int{}},
		{"escaped dot segments", "/v1/%2e%2e/metrics", "", "", "path_not_found", "path_not_found", [2]int{}},
		{"half-escaped dot segments", "/v1/..%2fmetrics", "", "", "path_not_found", "path_not_found", [2]int{}},
		// ILB answers a model retrieval itself, the id decoded (a header
		// naming another model changes nothing): no engine reads it.
		{"an escaped model id", "/v1/models/meta-llama%2FLlama-3.1-8B-Instruct", "", "", byILB, byILB, [2]int{}},
	} {
		for _, smuggle := range []bool{false, true} {
			name, want, status, hdr := c.name+"/plain", c.plain, c.status[0], map[string]string{"content-type": "application/json"}
			if smuggle {
				name, want, status, hdr[header.Model] = c.name+"/smuggled", c.smuggled, c.status[1], qwen
			}
			t.Run(name, func(t *testing.T) {
				method := http.MethodPost
				if c.body == "" {
					method = http.MethodGet
				}
				resp, b := do(t, method, url+c.path, c.body, hdr)
				id := resp.Header.Get(header.RequestID)
				rec, ok := s.App.ExtProc.Decisions().Get(id)
				if !ok {
					t.Fatalf("%s %s: %d %s: no decision record for %q", method, c.path, resp.StatusCode, b, id)
				}
				eng, reached := saw.get(id)
				if want == byILB {
					var m struct{ ID, Root string }
					_ = json.Unmarshal(b, &m)
					if resp.StatusCode != http.StatusOK || rec.Reason != byILB || m.ID != "meta-llama/Llama-3.1-8B-Instruct" || m.Root != llama {
						t.Fatalf("%s %s: %d %s (decision %s); want ILB's model %s", method, c.path, resp.StatusCode, b, rec.Reason, llama)
					}
					if reached {
						t.Errorf("answered by ILB, yet an engine (%s) read %s", eng.cluster, eng.target)
					}
					return
				}
				if want != served {
					var e apiError
					_ = json.Unmarshal(b, &e)
					if resp.StatusCode/100 != 4 || e.Error.Code != want || rec.Reason != want {
						t.Fatalf("%s %s: %d %s (decision %s); want ILB's %s", method, c.path, resp.StatusCode, b, rec.Reason, want)
					}
					if reached {
						t.Errorf("refused, yet an engine (%s) read %s", eng.cluster, eng.target)
					}
					return
				}
				if !reached {
					t.Fatalf("%s %s: %d %s (decision %s); want an engine to answer", method, c.path, resp.StatusCode, b, rec.Reason)
				}
				if eng.target != c.engineTarget || rec.Path != eng.target {
					t.Errorf("the engine read %s, ILB routed %s; want both %s", eng.target, rec.Path, c.engineTarget)
				}
				if eng.cluster != rec.Chosen || rec.ServedCluster != rec.Chosen {
					t.Errorf("engine cluster %s, ILB chose %s, Envoy served %s", eng.cluster, rec.Chosen, rec.ServedCluster)
				}
				if eng.model != "" && eng.model != rec.Model {
					t.Errorf("the engine read the model %s, ILB routed %s", eng.model, rec.Model)
				}
				if status != 0 && resp.StatusCode != status {
					t.Errorf("status %d %s, want %d", resp.StatusCode, b, status)
				}
			})
		}
	}
	// Envoy refuses what it cannot normalise (a NUL) with its own empty
	// 400, before ILB or any engine sees it.
	t.Run("an escaped NUL", func(t *testing.T) {
		before := saw.ids()
		resp, b := do(t, http.MethodPost, url+"/v1/chat/completions%00", chatBody, nil)
		if resp.StatusCode != http.StatusBadRequest || len(b) != 0 {
			t.Errorf("%d %q; want Envoy's empty 400", resp.StatusCode, b)
		}
		if after := saw.ids(); len(after) != len(before) {
			t.Errorf("an engine read it: %v", slices.DeleteFunc(after, func(id string) bool { return slices.Contains(before, id) }))
		}
	})
	bodies := []struct{ name, body string }{
		{"a case-variant model key", `{"model":"` + llama + `","MODEL":"` + qwen + `","messages":[{"role":"user","content":"hi"}]}`},
		{"a duplicate max_tokens", `{"model":"` + llama + `","max_tokens":32768,"MAX_TOKENS":1,"messages":[{"role":"user","content":"hi"}]}`},
		{"max_tokens against max_completion_tokens", `{"model":"` + llama + `","max_completion_tokens":0,"max_tokens":32768,"messages":[{"role":"user","content":"hi"}]}`},
	}
	for _, c := range bodies {
		t.Run(c.name, func(t *testing.T) {
			resp, b := do(t, http.MethodPost, url+"/v1/chat/completions", c.body, map[string]string{header.Model: qwen, "content-type": "application/json"})
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"code":"ambiguous_key"`) {
				t.Fatalf("%d %s; want ILB's 400 ambiguous_key", resp.StatusCode, b)
			}
			if eng, ok := saw.get(resp.Header.Get(header.RequestID)); ok {
				t.Errorf("an engine (%s) answered", eng.cluster)
			}
		})
	}
}

// pathSettings are the path fields of a connection manager.
type pathSettings struct {
	normalize, merge bool
	escapedSlashes   hcmv3.HttpConnectionManager_PathWithEscapedSlashesAction
}

func (p pathSettings) String() string {
	return fmt.Sprintf("normalize_path %v, merge_slashes %v, path_with_escaped_slashes_action %s", p.normalize, p.merge, p.escapedSlashes)
}

// gatewayPaths waits for the connection manager of the edge-eu gateway's
// port-8080 listener as istiod sends it (with ILB's ext_proc filter when
// withILB) and returns its path fields.
func gatewayPaths(ctx context.Context, t *testing.T, istiod *istiotest.Istiod, withILB bool) pathSettings {
	t.Helper()
	gw := istiotest.Proxy{
		Type: "router", Name: "istio-ingressgateway-0", Namespace: "istio-ingress", IP: "10.9.0.1",
		Labels: map[string]string{"istio": "ingressgateway", "ilb/source": "edge-eu"},
	}
	var got pathSettings
	waitUntil(t, "the gateway's connection manager", time.Minute, func() bool {
		res, err := istiod.Fetch(ctx, gw)
		if err != nil {
			t.Logf("fetch: %v", err)
			return false
		}
		for _, l := range res.Listeners {
			if l.GetAddress().GetSocketAddress().GetPortValue() != 8080 {
				continue
			}
			for _, h := range istiotest.HCMs(l) {
				ilb := slices.ContainsFunc(h.GetHttpFilters(), func(f *hcmv3.HttpFilter) bool { return f.GetName() == envoy.ExtProcFilter })
				if ilb == withILB {
					got = pathSettings{h.GetNormalizePath().GetValue(), h.GetMergeSlashes(), h.GetPathWithEscapedSlashesAction()}
					return true
				}
			}
		}
		return false
	})
	return got
}

// TestIstiodNormalizesPathsOverMeshConfig: a real istiod derives the
// gateway connection manager's path fields from
// meshConfig.pathNormalization (and a ProxyConfig's connectionSettings);
// ILB's EnvoyFilter merge (examples/istio/edge-eu.yaml) sets ILB's on
// top of each: normalize_path, merge_slashes, UNESCAPE_AND_FORWARD.
func TestIstiodNormalizesPathsOverMeshConfig(t *testing.T) {
	ilb := pathSettings{true, true, hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD}
	for _, c := range []struct {
		name, mesh string
		istiod     pathSettings // istiod's own, before ILB's render
	}{
		{"default (BASE)", "", pathSettings{true, false, hcmv3.HttpConnectionManager_KEEP_UNCHANGED}},
		{"NONE", "pathNormalization: {normalization: NONE}", pathSettings{false, false, hcmv3.HttpConnectionManager_KEEP_UNCHANGED}},
		{"EDGE connection settings", "defaultConfig: {connectionSettings: {profile: EDGE}}", pathSettings{true, true, hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT}},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := kubetest.Start(t)
			for _, ns := range []string{"inference", "ilb-system", "istio-ingress"} {
				k.Namespace(t, ns)
			}
			istiod := istiotest.Start(t, k, istiotest.Options{Mesh: c.mesh})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if _, err := k.Apply(ctx, []byte(istioWorld)); err != nil {
				t.Fatal(err)
			}
			if got := gatewayPaths(ctx, t, istiod, false); got != c.istiod {
				t.Errorf("istiod alone: %s; want %s", got, c.istiod)
			}
			render, err := os.ReadFile("../examples/istio/edge-eu.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := k.Apply(ctx, render); err != nil {
				t.Fatal(err)
			}
			if got := gatewayPaths(ctx, t, istiod, true); got != ilb {
				t.Errorf("with ILB's EnvoyFilter: %s; want %s", got, ilb)
			}
		})
	}
}
