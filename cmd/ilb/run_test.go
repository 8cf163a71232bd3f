package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"

	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/internal/logtest"
)

func runCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

func exitCode(err error) int {
	var ec exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ec):
		return ec.code
	}
	return 1
}

func TestValidateCommand(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	demo, err := os.ReadFile("../../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(demo), "region: us-west\n", "region: us-wset\n", 1)
	broken = strings.Replace(broken, "capacity_per_replica: 6000", "capacity_per_replica: -1", 1)
	if err := os.WriteFile(bad, []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: us, context: {cluster: c, user: u}}]
current-context: us
`), 0o600); err != nil {
		t.Fatal(err)
	}
	withKube := func(name, kubeconfig, context string) string {
		p := filepath.Join(dir, name+".yaml")
		s := strings.Replace(string(demo), `endpoints: ["127.0.0.1:18101", "127.0.0.1:18102"]`,
			`discovery: {type: kubernetes, kubernetes: {namespace: inference, service: vllm, port: http}}`, 1)
		s += fmt.Sprintf("kubernetes:\n  api_servers: [{name: us, kubeconfig: %q, context: %q}]\n", kubeconfig, context)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	undecodable := filepath.Join(t.TempDir(), "undecodable.yaml")
	if err := os.WriteFile(undecodable, []byte("colour: blue\nsize: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		args  []string
		code  int
		lines []string
	}{
		{
			"valid",
			[]string{"validate", "--config", "../../examples/demo/ilb.yaml"},
			0,
			[]string{"ok: 3 regions, 2 sources, 2 models, 4 engine clusters (6 endpoints), policy optimizer"},
		},
		{"one problem per line", []string{"validate", "--config", bad}, 1, []string{
			`profiles[1].capacity_per_replica: -1 is not a valid capacity`,
			`clusters[1].region: unknown region "us-wset"`,
		}},
		{"missing file", []string{"validate", "--config", "/nonexistent.yaml"}, 1, []string{}},
		{"a kubeconfig and its context", []string{"validate", "--config", withKube("kube-ok", kubeconfig, "us")}, 0, []string{"ok: 3 regions"}},
		{"a kubeconfig that is not there", []string{"validate", "--config", withKube("kube-missing", "/nonexistent/kubeconfig", "")}, 1, []string{
			"kubernetes.api_servers[0] (us): kubeconfig /nonexistent/kubeconfig",
		}},
		{"a context the kubeconfig lacks", []string{"validate", "--config", withKube("kube-context", kubeconfig, "eu")}, 1, []string{
			`kubernetes.api_servers[0] (us): kubeconfig ` + kubeconfig + ` (context "eu")`,
		}},
		{"decode problems, one per line, named once", []string{"validate", "--config", undecodable}, 1, []string{
			undecodable + ": decode: line 1: field colour not found in type config.Config\n",
			undecodable + ": decode: line 2: field size not found in type config.Config\n",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := runCmd(t, tt.args...)
			if got := exitCode(err); got != tt.code {
				t.Fatalf("exit code %d (%v); want %d\n%s", got, err, tt.code, out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if tt.code == 1 && len(lines) < len(tt.lines) {
				t.Errorf("%d lines; want at least %d:\n%s", len(lines), len(tt.lines), out)
			}
			for _, l := range tt.lines {
				if !strings.Contains(out, l) {
					t.Errorf("output lacks %q:\n%s", l, out)
				}
			}
		})
	}
}

func TestEnvoyConfigCommand(t *testing.T) {
	out, _, err := runCmd(t, "envoy-config", "--config", "../../examples/demo/ilb.yaml", "--source", "edge-eu", "--xds", "ilb.internal:18000")
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := envoy.DecodeYAML([]byte(out), &b); err != nil {
		t.Fatal(err)
	}
	if err := envoy.Validate(&b); err != nil {
		t.Fatal(err)
	}
	if b.GetNode().GetCluster() != "edge-eu" || !strings.Contains(out, "address: ilb.internal") || !strings.Contains(out, "type: STRICT_DNS") {
		t.Errorf("bootstrap:\n%s", out)
	}
	out, _, err = runCmd(t, "envoy-config", "--config", "../../examples/demo/ilb.yaml", "--source", "edge-eu", "--resources")
	if err != nil || !strings.Contains(out, "x-ilb-route-draw") {
		t.Errorf("resources: %v\n%s", err, out)
	}
	if _, _, err := runCmd(t, "envoy-config", "--config", "../../examples/demo/ilb.yaml", "--source", "edge-mars"); err == nil || !strings.Contains(err.Error(), `unknown source "edge-mars"`) {
		t.Errorf("unknown source: %v", err)
	}
}

func TestExplainCommand(t *testing.T) {
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/debug/decisions/req-1":
			_, _ = w.Write([]byte(`{"request_id":"req-1","source":"edge-us","model":"m","requested_model":"m","priority":"standard",
				"weights_version":"v1","candidates":[{"cluster":"a","weight":3000,"share":0.3},{"cluster":"b","weight":7000,"share":0.7},
				{"cluster":"c","weight":0,"share":0,"excluded":"residency: region x"}],"draw":13500,"draw_from":"random","slot":3500,
				"total_weight":10000,"chosen":"b","reason":"weighted","status":200,"served_cluster":"a","served_version":"v0",
				"upstream_host":"10.0.0.1:80","mismatch":true,"complete":true}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"message":"no decision record for request id \"nope\""}}`))
		}
	}))
	defer admin.Close()
	addr := strings.TrimPrefix(admin.URL, "http://")
	out, _, err := runCmd(t, "explain", "--admin", addr, "req-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"b        7000    70.0%  [3000, 10000)  <- slot 3500 falls here",
		"excluded: residency: region x",
		"draw        13500 (random) -> slot 3500 of 10000",
		"WARNING     Envoy served a, not b (its routes are weights v0, ILB decided on v1)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, _, err := runCmd(t, "explain", "--admin", addr, "nope"); err == nil || !strings.Contains(err.Error(), `no decision record for request id "nope"`) {
		t.Errorf("unknown id: %v", err)
	}
}

func TestUsage(t *testing.T) {
	out, _, err := runCmd(t, "help")
	if err != nil || !strings.Contains(out, "serve") || !strings.Contains(out, "demo") {
		t.Errorf("help: %v\n%s", err, out)
	}
	if _, _, err := runCmd(t, "frobnicate"); err == nil || !strings.Contains(err.Error(), `unknown command "frobnicate"`) {
		t.Errorf("unknown command: %v", err)
	}
	if _, _, err := runCmd(t, "serve"); err == nil || !strings.Contains(err.Error(), "--config is required") {
		t.Errorf("serve without config: %v", err)
	}
}

// TestDemo runs the demo briefly: every request must succeed and the
// report must show the split, the decision time and an explanation.
func TestDemo(t *testing.T) {
	out, errOut, err := runCmd(t, "demo", "--config", "../../examples/demo/ilb.yaml", "--duration", "1500ms", "--envoy", "sim")
	if err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, out, errOut)
	}
	for _, want := range []string{
		"requests/s", "Traffic split per source and model", "ext_proc decision time (from its histogram): p50", "$ ilb explain", "chosen",
		"Replica picking (clusters with replica_picking): ILB chose the replica of", "Envoy served the chosen replica for", "another for 0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

func TestRolloutCommand(t *testing.T) {
	at := time.Now().Add(-30 * time.Second).UTC().Format(time.RFC3339Nano)
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/rollout" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_, _ = w.Write([]byte(`[{"source":"edge-eu","stable":{"cluster":"c1","route":"r1"},"last_good":{"cluster":"c1","route":"r0"},"canary":{"cluster":"c1","route":"r2"},"pending":true,"since":"` + at + `",
			"nodes":[{"id":"eu-0","cluster":"edge-eu","streams":1,"acked":{"cluster":"c1","route":"r2"},"canary":true},
			         {"id":"eu-1","cluster":"edge-eu","streams":1,"acked":{"cluster":"c1","route":"r1"},"held":[{"type":"route","rejected":"r1","keeps":"r0","since":"` + at + `","message":"bad"}]}]},
			{"source":"edge-us","stable":{"route":"r7"},"pending":false,
			"rejected":[{"node":"us-0","type":"route","version":"r8","message":"Proto constraint validation failed\nmore","at":"` + at + `","by":"quorum","rejectors":2,"connected":3}],"nodes":[]}]`))
	}))
	defer admin.Close()
	addr := strings.TrimPrefix(admin.URL, "http://")
	cases := []struct {
		name string
		args []string
		want []string
		not  []string
		err  string
	}{
		{name: "all sources", args: []string{"rollout", "status", "--admin", addr}, want: []string{
			"source edge-eu: canary soaking for 30", "route    r1      r2      r0", "cluster  c1      -       c1",
			"eu-0  canary  1        cluster=c1 route=r2", "source edge-us: stable", "no Envoy connected",
			"route rejected r1, keeps r0",
			"banned route r8 by a quorum (2 of 3 Envoys; last us-0)", "never sent again: Proto constraint validation failed …",
		}},
		{name: "one source", args: []string{"rollout", "status", "--admin", addr, "--source", "edge-us"}, want: []string{"source edge-us"}, not: []string{"edge-eu"}},
		{name: "no subcommand", args: []string{"rollout"}, err: `want the subcommand "status"`},
		{name: "an unknown source", args: []string{"rollout", "status", "--admin", addr, "--source", "nosuch"}, err: `unknown source "nosuch"; known sources: edge-eu, edge-us`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runCmd(t, tc.args...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestEngineCommand serves a simulated engine and asks it for a chat
// completion and its metrics over real HTTP.
func TestEngineCommand(t *testing.T) {
	for _, tc := range []struct{ name, profile, timing string }{
		{"default: the replica model", "", "timing llama-3-8b/h100"},
		{"A100 model", "llama-3-8b/a100-80gb", "timing llama-3-8b/a100-80gb"},
		{"fixed timing", "fixed", "timing fixed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"engine", "--listen", "127.0.0.1:0", "--cluster", "c1", "--models", "m1, alias-1"}
			if tc.profile != "" {
				args = append(args, "--profile", tc.profile)
			}
			out := engineRoundTrip(t, args)
			if !strings.Contains(out, tc.timing) {
				t.Errorf("banner %q lacks %q", out, tc.timing)
			}
		})
	}
}

// engineRoundTrip runs ilb engine with args, checks a chat completion and
// the metrics, stops it and returns its stdout.
func engineRoundTrip(t *testing.T, args []string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var out logtest.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, args, &out, io.Discard)
	}()
	var addr string
	for deadline := time.Now().Add(5 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, after, ok := strings.Cut(out.String(), "on http://"); ok {
			addr = strings.TrimSpace(after)
		}
	}
	if addr == "" {
		t.Fatalf("engine did not start: %q", out.String())
	}
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"alias-1","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("x-ilb-engine-cluster") != "c1" || !strings.Contains(string(body), `"completion_tokens":3`) {
		t.Errorf("chat: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	resp, err = http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "vllm:num_requests_running") {
		t.Errorf("metrics lack vLLM gauges:\n%s", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("engine stopped with %v", err)
	}
	return out.String()
}

func TestEngineCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no cluster", []string{"engine", "--models", "m"}, "--cluster is required"},
		{"no models", []string{"engine", "--cluster", "c", "--models", " , "}, `--models " , ": want at least one model name`},
		{"bad slots", []string{"engine", "--cluster", "c", "--models", "m", "--max-running", "0"}, "--max-running 0: want at least 1"},
		{"bad profile", []string{"engine", "--cluster", "c", "--models", "m", "--profile", "gpt-5/tpu"}, `--profile "gpt-5/tpu": want one of llama-3-8b/h100,`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := runCmd(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestEveryCommandHelp: every subcommand answers -h (and --help) with its
// usage on standard error and exit status 0, never an error.
func TestEveryCommandHelp(t *testing.T) {
	for _, c := range commands() {
		for _, flag := range []string{"-h", "--help"} {
			t.Run(c.name+" "+flag, func(t *testing.T) {
				_, errOut, err := runCmd(t, c.name, flag)
				if code := exitCode(err); code != 0 {
					t.Fatalf("exit %d (%v), want 0", code, err)
				}
				if !strings.Contains(errOut, "Usage") {
					t.Errorf("no usage on stderr: %q", errOut)
				}
			})
		}
	}
}
