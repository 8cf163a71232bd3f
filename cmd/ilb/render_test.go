package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const istioExamples = "../../examples/istio/"

// exampleArgs are the flags that render the manifests in examples/istio
// (see the header of examples/istio/ilb.yaml and istio/golden_test.go).
var exampleArgs = map[string][]string{
	"edge-eu.yaml": {"--source", "edge-eu", "--hosts", "llm.example.com", "--gateway", "istio-ingress/llm-gateway", "--listener-port", "8080"},
	"edge-us.yaml": {"--source", "edge-us", "--hosts", "llm.inference.svc.cluster.local", "--listener-port", "80"},
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRenderIstioCommand: the command reproduces the examples, from a
// demand file or from `ilb solve --json` weights, on stdout or in a file.
func TestRenderIstioCommand(t *testing.T) {
	weightsFile := filepath.Join(t.TempDir(), "w.json")
	js, _, err := runCmd(t, "solve", "--config", istioExamples+"ilb.yaml", "--demand", demoDemand, "--json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(weightsFile, []byte(js), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, flags := range exampleArgs {
		want := readFile(t, istioExamples+file)
		for _, tt := range []struct {
			name    string
			weights []string
		}{
			{"weights from the demand", []string{"--demand", demoDemand}},
			{"weights from ilb solve --json", []string{"--weights", weightsFile}},
		} {
			t.Run(file+": "+tt.name, func(t *testing.T) {
				args := append(append([]string{"render", "istio", "--config", istioExamples + "ilb.yaml"}, tt.weights...), flags...)
				out, _, err := runCmd(t, args...)
				if err != nil {
					t.Fatal(err)
				}
				if out != want {
					t.Errorf("output differs from %s:\n%s", file, out)
				}
			})
		}
	}
	t.Run("--out writes the file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "edge-eu.yaml")
		args := append([]string{"render", "istio", "--config", istioExamples + "ilb.yaml", "--demand", demoDemand, "--out", path}, exampleArgs["edge-eu.yaml"]...)
		out, errOut, err := runCmd(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		if out != "" || !strings.Contains(errOut, "wrote "+path+": weights ") {
			t.Errorf("stdout %q, stderr %q", out, errOut)
		}
		if got := readFile(t, path); got != readFile(t, istioExamples+"edge-eu.yaml") {
			t.Errorf("%s differs from the example:\n%s", path, got)
		}
		entries, err := os.ReadDir(filepath.Dir(path))
		if err != nil || len(entries) != 1 {
			t.Errorf("the directory holds %v (%v): the temporary file was left behind", entries, err)
		}
	})
}

func TestRenderIstioErrors(t *testing.T) {
	cfg := istioExamples + "ilb.yaml"
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no target", []string{"render"}, "render: name the target: ilb render istio"},
		{"a flag instead of a target", []string{"render", "--config", cfg}, "render: name the target"},
		{"an unknown target", []string{"render", "linkerd"}, `render: unknown target "linkerd": want istio`},
		{"no config", []string{"render", "istio", "--hosts", "a.b"}, "render istio: --config is required"},
		{"weights and demand", []string{"render", "istio", "--config", cfg, "--weights", "w.json", "--demand", demoDemand}, "give --weights or --demand, not both"},
		{"a stray argument", []string{"render", "istio", "--config", cfg, "edge-eu"}, `unexpected argument "edge-eu"`},
		{"a port out of range", []string{"render", "istio", "--config", cfg, "--listener-port", "70000"}, "--listener-port 70000: want 1..65535"},
		{"a bad selector", []string{"render", "istio", "--config", cfg, "--workload-selector", "istio"}, `--workload-selector: workload selector "istio": want key=value`},
		{"a missing weights file", []string{"render", "istio", "--config", cfg, "--weights", "/nonexistent.json"}, "/nonexistent.json"},
		{"no source in Istio mode", []string{"render", "istio", "--config", demoConfig, "--hosts", "a.b"}, `no source has routing "cluster"`},
		{"no hosts", []string{"render", "istio", "--config", cfg, "--source", "edge-eu"}, "source edge-eu: hosts: none given"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runCmd(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
